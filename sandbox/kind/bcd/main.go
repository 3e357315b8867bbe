// Command bcd is the kind test bed's stand-in for bcd: the three commands the DaemonSet that
// bcd-ansible renders calls (docs/bcd-contract.yml), speaking the node side of the control-plane
// emulator's protocol (docs/control-plane-api.md, "The node side") over pinned TLS.
//
//	bcd join   --config /etc/bcd/config.toml --token-file /var/run/secrets/bcd-join/token
//	bcd node   --config /etc/bcd/config.toml
//	bcd status --config /etc/bcd/config.toml
//
// join: with an identity in /var/lib/bcd it exits 0 and spends nothing. Otherwise it refuses a
// token file group or others may read, fetches discovery from join.server over TLS whose chain
// must hold the key of pins.serving_ca, refuses a join key (or a published join-signing key)
// whose pin is not the configured one, posts the token to the gateway, checks the JoinService's
// signature on the answer against pins.join_signing, and writes the identity (0600) under
// /var/lib/bcd. Every refusal exits 1 with "<Reason>: <message>" on stderr and in
// /dev/termination-log (the kubelet shows it as the container's termination message).
//
// node: reports the node to the gateway every 10 s, and keeps its Node's bcd.dev/* labels
// (bcd.dev/node-id, bcd.dev/site; other bcd.dev/* labels removed) with the image's kubectl as the
// kubelet (--kubeconfig /etc/kubernetes/kubelet.conf), at most once a minute (seed: GPUs for
// pods, API access). It exits 1 when the control plane no longer knows the node. An image that
// carries /usr/local/share/bcd/crash-after-seconds is the test bed's bad build: node exits 1
// after that many seconds.
//
// status (the liveness probe): exits 0 while node's loop has run within the last minute.
//
// Secrets (the token, the node credential) are never printed. For tests outside a pod, the
// paths can be moved with BCD_STATE_DIR, BCD_RUN_DIR, BCD_KUBECONFIG, BCD_KUBECTL,
// BCD_CRASH_MARKER and BCD_TERMINATION_LOG.
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

var (
	stateDir       = envOr("BCD_STATE_DIR", "/var/lib/bcd")
	runDir         = envOr("BCD_RUN_DIR", "/run/bcd")
	kubeletConfig  = envOr("BCD_KUBECONFIG", "/etc/kubernetes/kubelet.conf")
	kubectl        = envOr("BCD_KUBECTL", "/usr/local/bin/kubectl")
	crashMarker    = envOr("BCD_CRASH_MARKER", "/usr/local/share/bcd/crash-after-seconds")
	terminationLog = envOr("BCD_TERMINATION_LOG", "/dev/termination-log")
	version        = "0.1.0"
)

const (
	reportEvery = 10 * time.Second
	labelEvery  = time.Minute
	labelPrefix = "bcd.dev/"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// refusal is a reason (as the emulator names them) and a message.
type refusal struct{ reason, message string }

func (r *refusal) Error() string { return r.reason + ": " + r.message }

func refuse(reason, format string, args ...any) error {
	return &refusal{reason, fmt.Sprintf(format, args...)}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bcd join|node|status|version [flags]")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "join":
		err = join(args)
	case "node":
		err = node(args)
	case "status":
		err = status(args)
	case "version":
		fmt.Println("bcd (kind test bed stand-in) " + version)
	default:
		err = fmt.Errorf("unknown command %q (join, node, status, version)", cmd)
	}
	if err != nil {
		msg := err.Error()
		fmt.Fprintf(os.Stderr, "bcd %s: %s\n", cmd, msg)
		// The kubelet shows this file as the container's termination message.
		_ = os.WriteFile(terminationLog, []byte(msg), 0o644)
		os.Exit(1)
	}
}

// ---------------------------------------------------------------------------- configuration

type config struct {
	path                            string
	site, gatewayURL, serverName    string
	servingCA, joinSigning, joinEnc string
	hosted, server                  string
}

func loadConfig(path string) (*config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, refuse("NoConfig", "%s: %v", path, err)
	}
	doc, err := parseTOML(string(raw))
	if err != nil {
		return nil, refuse("ConfigInvalid", "%s: %v", path, err)
	}
	str := func(key string, required bool) (string, error) {
		v, ok := doc[key]
		if !ok {
			if required {
				return "", refuse("ConfigInvalid", "%s: %s is missing", path, key)
			}
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", refuse("ConfigInvalid", "%s: %s must be a string", path, key)
		}
		return s, nil
	}
	c := &config{path: path}
	for _, f := range []struct {
		key      string
		dst      *string
		required bool
	}{
		{"site", &c.site, true}, {"gateway.url", &c.gatewayURL, true}, {"gateway.server_name", &c.serverName, false},
		{"pins.serving_ca", &c.servingCA, true}, {"pins.join_signing", &c.joinSigning, true},
		{"pins.join_encryption", &c.joinEnc, true}, {"join.hosted", &c.hosted, true}, {"join.server", &c.server, false},
	} {
		if *f.dst, err = str(f.key, f.required); err != nil {
			return nil, err
		}
	}
	if c.hosted != "kubernetes" {
		return nil, refuse("ConfigInvalid", "%s: join.hosted is %q; a DaemonSet node joins with a hosted \"kubernetes\" token", path, c.hosted)
	}
	for _, u := range []string{c.gatewayURL, c.server} {
		if u != "" && !strings.HasPrefix(u, "https://") {
			return nil, refuse("ConfigInvalid", "%s: %s is not an https URL", path, u)
		}
	}
	return c, nil
}

// ---------------------------------------------------------------------------- pinned TLS

func pinOf(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256/" + base64.StdEncoding.EncodeToString(sum[:])
}

// pinnedClient trusts exactly the certificate of the presented chain whose key has pin
// servingCA, and checks the server's certificate under it for serverName.
func pinnedClient(servingCA, serverName string) *http.Client {
	verify := func(cs tls.ConnectionState) error {
		var ca *x509.Certificate
		var seen []string
		for _, cert := range cs.PeerCertificates {
			p := pinOf(cert.RawSubjectPublicKeyInfo)
			seen = append(seen, p)
			if p == servingCA {
				ca = cert
			}
		}
		if ca == nil {
			return refuse("PinMismatch", "the server presents no certificate whose key has pins.serving_ca %s (it presents %s)",
				servingCA, strings.Join(seen, ", "))
		}
		roots, inter := x509.NewCertPool(), x509.NewCertPool()
		roots.AddCert(ca)
		for _, cert := range cs.PeerCertificates[1:] {
			inter.AddCert(cert)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: serverName, Roots: roots, Intermediates: inter})
		if err != nil {
			return refuse("PinMismatch", "the server's certificate does not verify under the pinned serving CA for %s: %v", serverName, err)
		}
		return nil
	}
	return &http.Client{
		Timeout: 15 * time.Second,
		Transport: &http.Transport{
			Proxy: nil,
			// The chain is checked by VerifyConnection against the pin, not the system roots.
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true, VerifyConnection: verify, MinVersion: tls.VersionTLS12}, //nolint:gosec
			TLSHandshakeTimeout: 10 * time.Second,
		},
	}
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"error"`
}

// call sends a request and decodes a 2xx JSON answer into out; any other answer is a refusal
// with the server's reason (or code) and message.
func call(client *http.Client, method, target, bearer string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bcd-standin/"+version)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		var r *refusal
		if errors.As(err, &r) {
			return r
		}
		return refuse("Unreachable", "%s %s: %v", method, target, scrubURLError(err))
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		var e apiError
		if json.Unmarshal(raw, &e) == nil && (e.Error.Reason != "" || e.Error.Code != "") {
			reason := e.Error.Reason
			if reason == "" {
				reason = e.Error.Code
			}
			return &refusal{reason, fmt.Sprintf("%s (HTTP %d from %s)", e.Error.Message, resp.StatusCode, target)}
		}
		return refuse("Refused", "HTTP %d from %s", resp.StatusCode, target)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return refuse("BadAnswer", "%s answered with something that is not the expected JSON: %v", target, err)
	}
	return nil
}

func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// ---------------------------------------------------------------------------- keys

type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	D   string `json:"d,omitempty"`
}

func (k *jwk) public() (*ecdsa.PublicKey, error) {
	if k.Kty != "EC" || k.Crv != "P-256" {
		return nil, fmt.Errorf("not an EC P-256 key")
	}
	if k.D != "" {
		return nil, fmt.Errorf("carries a private part")
	}
	x, err1 := base64.RawURLEncoding.DecodeString(k.X)
	y, err2 := base64.RawURLEncoding.DecodeString(k.Y)
	if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
		return nil, fmt.Errorf("bad coordinates")
	}
	pub := &ecdsa.PublicKey{Curve: elliptic.P256(), X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
	if !pub.Curve.IsOnCurve(pub.X, pub.Y) {
		return nil, fmt.Errorf("not a point of P-256")
	}
	return pub, nil
}

func (k *jwk) pin() (string, error) {
	pub, err := k.public()
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	return pinOf(der), nil
}

// ---------------------------------------------------------------------------- identity

type identity struct {
	ID         string `json:"id"`
	Hostname   string `json:"hostname"`
	Site       string `json:"site"`
	Trust      string `json:"trust"`
	GatewayURL string `json:"gatewayUrl"`
	Credential string `json:"credential"`
	JoinedAt   string `json:"joinedAt"`
}

func identityPath() string { return filepath.Join(stateDir, "node.json") }

func loadIdentity() (*identity, error) {
	raw, err := os.ReadFile(identityPath())
	if err != nil {
		return nil, err
	}
	var id identity
	if err := json.Unmarshal(raw, &id); err != nil || id.ID == "" || id.Credential == "" {
		return nil, fmt.Errorf("%s is not a bcd identity", identityPath())
	}
	return &id, nil
}

func writeIdentity(id *identity) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(id, "", "  ")
	tmp := identityPath() + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(raw, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, identityPath())
}

func nodeName() (string, error) {
	name := os.Getenv("NODE_NAME")
	if name == "" {
		return "", refuse("ConfigMismatch", "NODE_NAME is not set: bcd cannot tell which Node it runs on (the DaemonSet sets it from spec.nodeName)")
	}
	return name, nil
}

// ---------------------------------------------------------------------------- join

func join(args []string) error {
	fs := flag.NewFlagSet("join", flag.ContinueOnError)
	cfgPath := fs.String("config", "/etc/bcd/config.toml", "config.toml")
	tokenFile := fs.String("token-file", "", "the join token's file")
	if err := fs.Parse(args); err != nil {
		return refuse("Usage", "%v", err)
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	host, err := nodeName()
	if err != nil {
		return err
	}
	if id, err := loadIdentity(); err == nil {
		if id.Hostname != host {
			return refuse("IdentityMismatch", "%s holds the identity of %s, not of this node %s", identityPath(), id.Hostname, host)
		}
		fmt.Printf("bcd join: %s joined before as %s; no token spent\n", host, id.ID)
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return refuse("IdentityUnreadable", "%v", err)
	}
	if *tokenFile == "" {
		return refuse("NoToken", "no --token-file and this node never joined (no identity in %s)", stateDir)
	}
	st, err := os.Stat(*tokenFile)
	if err != nil {
		return refuse("NoToken", "no token file %s and this node never joined: %v", *tokenFile, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return refuse("TokenFileMode", "%s is mode %04o: bcd join refuses a token file group or others can read", *tokenFile, st.Mode().Perm())
	}
	if st.Size() > 4096 {
		return refuse("TokenInvalid", "%s is over 4 KiB", *tokenFile)
	}
	raw, err := os.ReadFile(*tokenFile)
	if err != nil {
		return refuse("NoToken", "%s: %v", *tokenFile, err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return refuse("TokenInvalid", "%s is empty", *tokenFile)
	}
	if cfg.server == "" {
		return refuse("ConfigInvalid", "%s: join.server is missing: bcd join fetches the join key from the control plane there", cfg.path)
	}

	// Discovery, from the control plane, over TLS pinned to the serving CA.
	var disc struct {
		Gateway struct {
			URL  string `json:"url"`
			Name string `json:"name"`
		} `json:"gateway"`
		Site           string `json:"site"`
		JoinKey        *jwk   `json:"joinKey"`
		JoinSigningKey *jwk   `json:"joinSigningKey"`
	}
	cp := pinnedClient(cfg.servingCA, hostOf(cfg.server))
	if err := call(cp, "GET", strings.TrimRight(cfg.server, "/")+"/.well-known/better-compute", "", nil, &disc); err != nil {
		return err
	}
	if disc.Site != cfg.site {
		return refuse("ConfigMismatch", "%s: site is %q, the control plane's is %q", cfg.path, cfg.site, disc.Site)
	}
	if strings.TrimRight(disc.Gateway.URL, "/") != strings.TrimRight(cfg.gatewayURL, "/") {
		return refuse("ConfigMismatch", "%s: gateway.url is %q, the control plane's is %q", cfg.path, cfg.gatewayURL, disc.Gateway.URL)
	}
	if disc.JoinKey == nil {
		return refuse("PinMismatch", "discovery at %s has no joinKey", cfg.server)
	}
	if p, err := disc.JoinKey.pin(); err != nil || p != cfg.joinEnc {
		return refuse("PinMismatch", "the control plane's joinKey has pin %s, not pins.join_encryption %s%s", p, cfg.joinEnc, errSuffix(err))
	}
	if disc.JoinSigningKey != nil {
		if p, err := disc.JoinSigningKey.pin(); err != nil || p != cfg.joinSigning {
			return refuse("PinMismatch", "the control plane's joinSigningKey has pin %s, not pins.join_signing %s%s", p, cfg.joinSigning, errSuffix(err))
		}
	}

	// The join, at the gateway.
	serverName := cfg.serverName
	if serverName == "" {
		serverName = hostOf(cfg.gatewayURL)
	}
	gw := pinnedClient(cfg.servingCA, serverName)
	body := map[string]any{
		"token":    token,
		"hostname": host,
		"config": map[string]any{
			"site":    cfg.site,
			"gateway": map[string]any{"url": cfg.gatewayURL},
			"pins":    map[string]any{"serving_ca": cfg.servingCA, "join_signing": cfg.joinSigning, "join_encryption": cfg.joinEnc},
			"join":    map[string]any{"hosted": cfg.hosted, "server": cfg.server},
		},
	}
	var ans struct {
		NodeDocument string `json:"nodeDocument"`
		Signature    string `json:"signature"`
		SigningKey   *jwk   `json:"signingKey"`
		Credential   string `json:"credential"`
		Rejoined     bool   `json:"rejoined"`
	}
	if err := call(gw, "POST", strings.TrimRight(cfg.gatewayURL, "/")+"/v1/join", "", body, &ans); err != nil {
		return err
	}
	if ans.SigningKey == nil {
		return refuse("PinMismatch", "the join answer carries no signing key")
	}
	if p, err := ans.SigningKey.pin(); err != nil || p != cfg.joinSigning {
		return refuse("PinMismatch", "the join answer is signed by a key with pin %s, not pins.join_signing %s%s", p, cfg.joinSigning, errSuffix(err))
	}
	pub, _ := ans.SigningKey.public()
	sig, err := base64.RawURLEncoding.DecodeString(ans.Signature)
	sum := sha256.Sum256([]byte(ans.NodeDocument))
	if err != nil || len(sig) != 64 ||
		!ecdsa.Verify(pub, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return refuse("BadSignature", "the join answer's signature does not verify under the join signing key")
	}
	var nd struct {
		ID       string `json:"id"`
		Hostname string `json:"hostname"`
		Site     string `json:"site"`
		Trust    string `json:"trust"`
		State    string `json:"state"`
		JoinedAt string `json:"joinedAt"`
	}
	if err := json.Unmarshal([]byte(ans.NodeDocument), &nd); err != nil || nd.ID == "" || nd.Hostname != host {
		return refuse("BadAnswer", "the join answer does not name this node %s", host)
	}
	if ans.Credential == "" {
		return refuse("BadAnswer", "the join answer carries no node credential")
	}
	id := &identity{ID: nd.ID, Hostname: host, Site: nd.Site, Trust: nd.Trust, GatewayURL: cfg.gatewayURL,
		Credential: ans.Credential, JoinedAt: nd.JoinedAt}
	if err := writeIdentity(id); err != nil {
		return refuse("StateUnwritable", "writing the identity under %s: %v", stateDir, err)
	}
	how := "spent one use of the token"
	if ans.Rejoined {
		how = "the control plane knew this node; no use spent"
	}
	fmt.Printf("bcd join: %s joined as %s (%s, %s); %s\n", host, nd.ID, nd.Trust, nd.State, how)
	return nil
}

func errSuffix(err error) string {
	if err != nil {
		return " (" + err.Error() + ")"
	}
	return ""
}

// ---------------------------------------------------------------------------- node

func node(args []string) error {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	cfgPath := fs.String("config", "/etc/bcd/config.toml", "config.toml")
	if err := fs.Parse(args); err != nil {
		return refuse("Usage", "%v", err)
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	host, err := nodeName()
	if err != nil {
		return err
	}
	id, err := loadIdentity()
	if err != nil {
		return refuse("NotJoined", "no identity in %s (bcd join runs first): %v", stateDir, err)
	}
	if id.Hostname != host {
		return refuse("IdentityMismatch", "%s holds the identity of %s, not of this node %s", identityPath(), id.Hostname, host)
	}
	_ = os.MkdirAll(runDir, 0o755)
	fmt.Printf("bcd node: %s is %s (site %s); reporting to %s every %s\n", host, id.ID, cfg.site, cfg.gatewayURL, reportEvery)

	var crash <-chan time.Time
	if raw, err := os.ReadFile(crashMarker); err == nil {
		secs, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		if secs <= 0 {
			secs = 5
		}
		fmt.Printf("bcd node: this image is the test bed's bad build (%s): exiting in %ds\n", crashMarker, secs)
		crash = time.After(time.Duration(secs) * time.Second)
	}

	serverName := cfg.serverName
	if serverName == "" {
		serverName = hostOf(cfg.gatewayURL)
	}
	gw := pinnedClient(cfg.servingCA, serverName)
	var lastLabels time.Time
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	for {
		touch(filepath.Join(runDir, "alive"))
		var ans struct {
			State string `json:"state"`
			Trust string `json:"trust"`
		}
		err := call(gw, "POST", strings.TrimRight(cfg.gatewayURL, "/")+"/v1/report", id.Credential,
			map[string]any{"id": id.ID, "hostname": host}, &ans)
		var r *refusal
		switch {
		case err == nil:
			touch(filepath.Join(runDir, "reported"))
		case errors.As(err, &r) && (r.reason == "UNAUTHORIZED" || r.reason == "NOT_FOUND" || r.reason == "NodeRemoved"):
			return refuse("NodeUnknown", "the control plane no longer accepts node %s: %s", id.ID, r.message)
		default:
			fmt.Fprintf(os.Stderr, "bcd node: report failed (retrying in %s): %v\n", reportEvery, err)
		}
		if time.Since(lastLabels) >= labelEvery {
			if err := keepLabels(host, map[string]string{labelPrefix + "node-id": id.ID, labelPrefix + "site": cfg.site}); err != nil {
				fmt.Fprintf(os.Stderr, "bcd node: keeping Node %s's labels failed (retrying): %v\n", host, err)
			} else {
				lastLabels = time.Now()
			}
		}
		select {
		case <-crash:
			return refuse("BadBuild", "this image is the test bed's bad build (%s)", crashMarker)
		case <-tick.C:
		}
	}
}

func touch(path string) {
	now := time.Now()
	if err := os.Chtimes(path, now, now); err != nil {
		_ = os.WriteFile(path, []byte(now.UTC().Format(time.RFC3339)+"\n"), 0o644)
	}
}

// keepLabels sets want on the Node and removes its other bcd.dev/* labels, as the kubelet.
func keepLabels(host string, want map[string]string) error {
	out, err := exec.Command(kubectl, "--kubeconfig", kubeletConfig, "get", "node", host, "-o", "json").Output()
	if err != nil {
		return fmt.Errorf("kubectl get node %s: %v%s", host, err, stderrOf(err))
	}
	var n struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(out, &n); err != nil {
		return fmt.Errorf("kubectl get node %s: %v", host, err)
	}
	var changes []string
	for k, v := range want {
		if n.Metadata.Labels[k] != v {
			changes = append(changes, k+"="+v)
		}
	}
	for k := range n.Metadata.Labels {
		if _, keep := want[k]; strings.HasPrefix(k, labelPrefix) && !keep {
			changes = append(changes, k+"-")
		}
	}
	if len(changes) == 0 {
		return nil
	}
	sort.Strings(changes)
	argv := append([]string{"--kubeconfig", kubeletConfig, "label", "node", host, "--overwrite"}, changes...)
	if out, err := exec.Command(kubectl, argv...).CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl label node %s: %v: %s", host, err, strings.TrimSpace(string(out)))
	}
	fmt.Printf("bcd node: Node %s labels: %s\n", host, strings.Join(changes, " "))
	return nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// ---------------------------------------------------------------------------- status

func status(args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	cfgPath := fs.String("config", "/etc/bcd/config.toml", "config.toml")
	if err := fs.Parse(args); err != nil {
		return refuse("Usage", "%v", err)
	}
	if _, err := loadConfig(*cfgPath); err != nil {
		return err
	}
	id, err := loadIdentity()
	if err != nil {
		return refuse("NotJoined", "no identity in %s: %v", stateDir, err)
	}
	st, err := os.Stat(filepath.Join(runDir, "alive"))
	if err != nil {
		return refuse("NotRunning", "bcd node has not run its loop yet (%v)", err)
	}
	if age := time.Since(st.ModTime()); age > time.Minute {
		return refuse("Stuck", "bcd node's loop last ran %s ago", age.Round(time.Second))
	}
	reported := "never"
	if st, err := os.Stat(filepath.Join(runDir, "reported")); err == nil {
		reported = time.Since(st.ModTime()).Round(time.Second).String() + " ago"
	}
	fmt.Printf("bcd status: %s is %s; last report %s\n", id.Hostname, id.ID, reported)
	return nil
}
