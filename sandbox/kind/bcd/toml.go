package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseTOML reads the subset of TOML 1.0 that bcd-ansible's config.toml uses: comments, [table]
// headers, and key = value with basic strings, booleans and integers. The result maps dotted
// keys ("gateway.url") to string, bool or int64. Anything else is an error naming the line.
func parseTOML(text string) (map[string]any, error) {
	out := map[string]any{}
	table := ""
	for i, raw := range strings.Split(text, "\n") {
		n := i + 1
		line := strings.TrimSpace(stripComment(raw))
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "[") {
			if !strings.HasSuffix(line, "]") || strings.HasPrefix(line, "[[") {
				return nil, fmt.Errorf("line %d: not a table header: %q", n, line)
			}
			table = strings.TrimSpace(line[1 : len(line)-1])
			if !bareKey(table) {
				return nil, fmt.Errorf("line %d: table name %q is not a bare key", n, table)
			}
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: expected key = value", n)
		}
		key = strings.TrimSpace(key)
		if !bareKey(key) {
			return nil, fmt.Errorf("line %d: key %q is not a bare key", n, key)
		}
		if table != "" {
			key = table + "." + key
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("line %d: %s is defined twice", n, key)
		}
		v, err := parseValue(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %v", n, key, err)
		}
		out[key] = v
	}
	return out, nil
}

func bareKey(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// stripComment drops a '#' comment that is not inside a basic string.
func stripComment(line string) string {
	in, esc := false, false
	for i, r := range line {
		switch {
		case esc:
			esc = false
		case in && r == '\\':
			esc = true
		case r == '"':
			in = !in
		case r == '#' && !in:
			return line[:i]
		}
	}
	return line
}

func parseValue(s string) (any, error) {
	switch {
	case s == "true":
		return true, nil
	case s == "false":
		return false, nil
	case strings.HasPrefix(s, `"`):
		return parseBasicString(s)
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, nil
	}
	return nil, fmt.Errorf("unsupported value %q (strings, booleans and integers only)", s)
}

func parseBasicString(s string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			if strings.TrimSpace(s[i+1:]) != "" {
				return "", fmt.Errorf("text after the string: %q", s[i+1:])
			}
			return b.String(), nil
		case c == '\\':
			i++
			if i >= len(s) {
				return "", fmt.Errorf("unterminated escape")
			}
			switch s[i] {
			case '"', '\\':
				b.WriteByte(s[i])
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'u', 'U':
				width := 4
				if s[i] == 'U' {
					width = 8
				}
				if i+width >= len(s) {
					return "", fmt.Errorf("short unicode escape")
				}
				code, err := strconv.ParseUint(s[i+1:i+1+width], 16, 32)
				if err != nil {
					return "", fmt.Errorf("bad unicode escape")
				}
				b.WriteRune(rune(code))
				i += width
			default:
				return "", fmt.Errorf("unknown escape \\%c", s[i])
			}
		case c < 0x20 && c != '\t' || c == 0x7f:
			return "", fmt.Errorf("control character in a basic string")
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated string")
}
