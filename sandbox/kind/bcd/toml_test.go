package main

import "testing"

func TestParseTOMLReadsTheRenderedConfig(t *testing.T) {
	doc, err := parseTOML(`# comment
log_level = "info"
site = "site_01"   # trailing comment

[gateway]
url = "https://gw.example.com:7443"
server_name = "gw \"quoted\" \\ \u00e9 # not a comment"

[pins]
serving_ca = "sha256/AAAA="

[host]
units = false

[limits]
n = 42
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"log_level": "info", "site": "site_01", "gateway.url": "https://gw.example.com:7443",
		"gateway.server_name": "gw \"quoted\" \\ \u00e9 # not a comment", "pins.serving_ca": "sha256/AAAA=",
		"host.units": false, "limits.n": int64(42),
	}
	if len(doc) != len(want) {
		t.Fatalf("got %v", doc)
	}
	for k, v := range want {
		if doc[k] != v {
			t.Errorf("%s: got %#v, want %#v", k, doc[k], v)
		}
	}
}

func TestParseTOMLRefusesWhatItDoesNotRead(t *testing.T) {
	for _, text := range []string{
		"site = 'literal'", "site = \"open", "[[array]]", "site", "a = 1\na = 2", "x = [1, 2]", "bad key = 1",
		"s = \"a\" b", "s = \"\\q\"",
	} {
		if _, err := parseTOML(text); err == nil {
			t.Errorf("parsed %q", text)
		}
	}
}
