package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA is a certificate authority made for a test.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// issue returns a new key and a certificate for it signed by ca, in PEM: a server's for
// 127.0.0.1 and localhost, or a client's, valid until notAfter.
func (ca *testCA) issue(t *testing.T, serial int64, server bool, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("test %d", serial)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// clientCert is ca.issue's client certificate, ready for a tls.Config.
func (ca *testCA) clientCert(t *testing.T, serial int64) tls.Certificate {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, serial, false, time.Now().Add(time.Hour))
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// serverCertFiles writes, in dir, tls.crt and tls.key: a server certificate (serial 1,
// valid an hour) of a new test CA, which it returns with the files' paths.
func serverCertFiles(t *testing.T, dir string) (ca *testCA, certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca = newTestCA(t, "test CA")
	certPEM, keyPEM := ca.issue(t, 1, true, time.Now().Add(time.Hour))
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	return ca, certFile, keyFile
}

// startedTLS runs the coordinator on the embedded store with args, on a free port of
// 127.0.0.1, and returns its address, log and exit channel once it listens over HTTPS.
func startedTLS(t *testing.T, ctx context.Context, args ...string) (string, *logBuffer, <-chan int) {
	t.Helper()
	logs := &logBuffer{}
	exit := make(chan int, 1)
	args = append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--log-format", "json",
		"--sweep-interval", "1s", "--shutdown-timeout", "1s"}, args...)
	go func() { exit <- run(ctx, args, nil, io.Discard, logs) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range logs.lines(t) {
			if line["msg"] == "listening" {
				if line["scheme"] != "https" {
					t.Errorf("listening line says scheme %v, want https", line["scheme"])
				}
				return line["addr"].(string), logs, exit
			}
		}
		select {
		case code := <-exit:
			t.Fatalf("coordinator exited %d before listening; log:\n%s", code, logs.buf.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("coordinator did not log \"listening\" in time; log:\n%s", logs.buf.String())
	return "", nil, nil
}

// httpsClient trusts roots and presents certs, on a new connection for every request.
func httpsClient(roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: certs},
	}}
}

// status is the status of GET url by client, or the error.
func status(client *http.Client, url string) (int, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// servedSerial is the serial (hex) of the certificate addr presents on a new connection.
func servedSerial(addr string, roots *x509.CertPool) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// waitSerial waits up to 5s for new connections to addr to see the certificate serial.
func waitSerial(t *testing.T, addr string, roots *x509.CertPool, serial string, logs *logBuffer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := servedSerial(addr, roots)
		if err == nil && got == serial {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s, new connections see certificate serial %s (%v), want %s; log:\n%s", got, err, serial, logs.buf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countLogged counts the log lines whose message starts with prefix and whose attributes
// include attrs.
func countLogged(t *testing.T, logs *logBuffer, prefix string, attrs map[string]string) int {
	t.Helper()
	n := 0
	for _, line := range logs.lines(t) {
		msg, _ := line["msg"].(string)
		if !strings.HasPrefix(msg, prefix) {
			continue
		}
		match := true
		for k, v := range attrs {
			match = match && fmt.Sprint(line[k]) == v
		}
		if match {
			n++
		}
	}
	return n
}

// The coordinator serves HTTPS only, TLS 1.2 or later, and takes a renewed certificate
// written over its files without a restart, keeping the one it serves when the new files
// are broken. coordinator healthcheck works over it.
func TestTLSServesAndReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, certFile, keyFile := serverCertFiles(t, dir)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	addr, logs, exit := startedTLS(t, ctx, "--tls-cert-file", certFile, "--tls-key-file", keyFile)
	_, port, _ := net.SplitHostPort(addr)
	client := httpsClient(ca.pool())

	for _, url := range []string{"https://" + addr + "/healthz", "https://localhost:" + port + "/healthz"} {
		if code, err := status(client, url); code != http.StatusOK {
			t.Errorf("GET %s trusting the CA: %d %v, want 200", url, code, err)
		}
	}
	if n := countLogged(t, logs, "TLS certificate loaded", map[string]string{"serial": "1"}); n != 1 {
		t.Errorf("%d \"TLS certificate loaded\" lines with serial 1 at start-up, want 1; log:\n%s", n, logs.buf.String())
	}
	if strings.Contains(logs.buf.String(), "PRIVATE KEY") {
		t.Errorf("the log shows key material:\n%s", logs.buf.String())
	}

	// Plain HTTP on the same port is not served (net/http answers 400).
	if code, err := status(&http.Client{Timeout: 5 * time.Second}, "http://"+addr+"/healthz"); err == nil && code < 300 {
		t.Errorf("plain HTTP to the HTTPS port: %d, want no 2xx", code)
	}
	// Nor is TLS 1.1.
	if conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		conn.Close()
		t.Errorf("a TLS 1.1 client was served, want refused")
	}

	// healthcheck, by the same settings as the coordinator's: https, the certificate pinned.
	environ := []string{"COORDINATOR_LISTEN=:" + port, "COORDINATOR_TLS_CERT_FILE=" + certFile}
	code, stdout, stderr := healthcheckRun(t, environ)
	if want := "healthy: GET https://127.0.0.1:" + port + "/readyz answered 200\n"; code != exitHealthy || stdout != want {
		t.Errorf("healthcheck with COORDINATOR_TLS_CERT_FILE: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
	if code, _, stderr := healthcheckRun(t, nil, "--url", "https://"+addr+"/readyz", "--tls-cert-file", certFile); code != exitHealthy {
		t.Errorf("healthcheck --tls-cert-file: exit %d, %s", code, stderr)
	}
	if code, _, stderr := healthcheckRun(t, nil, "--url", "https://"+addr+"/readyz"); code != exitUnhealthy || !strings.Contains(stderr, "certificate") {
		t.Errorf("healthcheck over https with neither the CA nor the certificate: exit %d, %s; want 1 about the certificate", code, stderr)
	}
	otherFile := filepath.Join(dir, "other.crt")
	otherPEM, _ := ca.issue(t, 99, true, time.Now().Add(time.Hour))
	writeFile(t, otherFile, otherPEM)
	code, _, stderr = healthcheckRun(t, []string{"COORDINATOR_LISTEN=:" + port}, "--tls-cert-file", otherFile)
	if code != exitUnhealthy || !strings.Contains(stderr, "is not the one in --tls-cert-file") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("healthcheck pinning another certificate: exit %d, stderr %q; want 1 saying it is not the one", code, stderr)
	}

	// A renewed certificate (a new key too) written over the files is served on new
	// connections, without a restart.
	certPEM, keyPEM := ca.issue(t, 2, true, time.Now().Add(2*time.Hour))
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	waitSerial(t, addr, ca.pool(), "2", logs)
	if n := countLogged(t, logs, "TLS certificate loaded", map[string]string{"serial": "2"}); n != 1 {
		t.Errorf("%d \"TLS certificate loaded\" lines with serial 2, want 1; log:\n%s", n, logs.buf.String())
	}
	if code, _, stderr := healthcheckRun(t, environ); code != exitHealthy {
		t.Errorf("healthcheck after the renewal: exit %d, %s", code, stderr)
	}

	// A broken replacement (a key that is not one) is warned of once, and the certificate
	// in use is still served.
	certPEM, _ = ca.issue(t, 3, true, time.Now().Add(2*time.Hour))
	garbage := []byte("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5IGF0IGFsbA==\n-----END PRIVATE KEY-----\n")
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, garbage)
	const warning = "TLS certificate files changed but cannot be used"
	deadline := time.Now().Add(5 * time.Second)
	for countLogged(t, logs, warning, nil) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no warning 5s after a broken key was written; log:\n%s", logs.buf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(tlsPollInterval + 300*time.Millisecond)
	if got, err := servedSerial(addr, ca.pool()); err != nil || got != "2" {
		t.Errorf("with a broken key on disk, new connections see serial %s (%v), want the previous 2", got, err)
	}
	if code, err := status(client, "https://"+addr+"/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz with a broken key on disk: %d %v, want 200", code, err)
	}
	if n := countLogged(t, logs, warning, nil); n != 1 {
		t.Errorf("%d warnings for one broken change, want 1; log:\n%s", n, logs.buf.String())
	}
	if strings.Contains(logs.buf.String(), "bm90IGEga2V5") {
		t.Errorf("the log shows the key file's content:\n%s", logs.buf.String())
	}

	// Fixed files are loaded again.
	certPEM, keyPEM = ca.issue(t, 4, true, time.Now().Add(2*time.Hour))
	writeFile(t, keyFile, keyPEM)
	writeFile(t, certFile, certPEM)
	waitSerial(t, addr, ca.pool(), "4", logs)

	stop()
	if code := <-exit; code != exitOK {
		t.Errorf("exit status %d after shutdown; log:\n%s", code, logs.buf.String())
	}
}

// With --tls-client-ca-file, every client must present a certificate signed by one of its
// CAs; the file is read again when it changes.
func TestTLSClientCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, clientCAFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "clients.pem")
	serverCA, clientCA := newTestCA(t, "server CA"), newTestCA(t, "client CA")
	certPEM, keyPEM := serverCA.issue(t, 1, true, time.Now().Add(time.Hour))
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	writeFile(t, clientCAFile, clientCA.certPEM)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	addr, logs, exit := startedTLS(t, ctx, "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-client-ca-file", clientCAFile)
	url := "https://" + addr + "/healthz"

	if code, err := status(httpsClient(serverCA.pool()), url); err == nil {
		t.Errorf("a client without a certificate got %d, want refused", code)
	}
	if code, err := status(httpsClient(serverCA.pool(), serverCA.clientCert(t, 10)), url); err == nil {
		t.Errorf("a client with a certificate of another CA got %d, want refused", code)
	}
	withCert := httpsClient(serverCA.pool(), clientCA.clientCert(t, 11))
	if code, err := status(withCert, url); code != http.StatusOK {
		t.Errorf("a client with a certificate of the client CA: %d %v, want 200", code, err)
	}

	// healthcheck cannot present a certificate unless given one.
	_, port, _ := net.SplitHostPort(addr)
	environ := []string{"COORDINATOR_LISTEN=:" + port, "COORDINATOR_TLS_CERT_FILE=" + certFile, "COORDINATOR_TLS_CLIENT_CA_FILE=" + clientCAFile}
	code, _, stderr := healthcheckRun(t, environ)
	if code != exitUnhealthy || !strings.Contains(stderr, "--tls-client-cert-file") {
		t.Errorf("healthcheck without a client certificate: exit %d, stderr %q; want 1 naming --tls-client-cert-file", code, stderr)
	}
	hcCert, hcKey := clientCA.issue(t, 12, false, time.Now().Add(time.Hour))
	hcCertFile, hcKeyFile := filepath.Join(dir, "hc.crt"), filepath.Join(dir, "hc.key")
	writeFile(t, hcCertFile, hcCert)
	writeFile(t, hcKeyFile, hcKey)
	if code, _, stderr := healthcheckRun(t, environ, "--tls-client-cert-file", hcCertFile, "--tls-client-key-file", hcKeyFile); code != exitHealthy {
		t.Errorf("healthcheck with a client certificate: exit %d, %s", code, stderr)
	}

	// A new CA bundle is taken without a restart.
	writeFile(t, clientCAFile, serverCA.certPEM)
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, err := status(httpsClient(serverCA.pool(), serverCA.clientCert(t, 13)), url)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after the client CA file changed, a certificate of the new CA gets %d %v; log:\n%s", code, err, logs.buf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, err := status(withCert, url); err == nil {
		t.Errorf("after the client CA file changed, a certificate of the old CA got %d, want refused", code)
	}

	stop()
	if code := <-exit; code != exitOK {
		t.Errorf("exit status %d after shutdown; log:\n%s", code, logs.buf.String())
	}
}

// An unusable certificate, key or CA file stops the coordinator at start-up, with a
// message that names the setting and shows no key.
func TestTLSStartupFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, "test CA")
	certPEM, keyPEM := ca.issue(t, 1, true, time.Now().Add(time.Hour))
	_, otherKeyPEM := ca.issue(t, 2, true, time.Now().Add(time.Hour))
	expiredPEM, expiredKeyPEM := ca.issue(t, 3, true, time.Now().Add(-time.Minute))
	files := map[string][]byte{"cert": certPEM, "key": keyPEM, "other.key": otherKeyPEM, "expired": expiredPEM,
		"expired.key": expiredKeyPEM, "ca": ca.certPEM, "not-a-ca": keyPEM}
	for name, data := range files {
		writeFile(t, filepath.Join(dir, name), data)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"missing certificate", []string{"--tls-cert-file", f("nope"), "--tls-key-file", f("key")}, "--tls-cert-file"},
		{"key of another certificate", []string{"--tls-cert-file", f("cert"), "--tls-key-file", f("other.key")}, "does not match"},
		{"key for a certificate", []string{"--tls-cert-file", f("cert"), "--tls-key-file", f("cert")}, "--tls-key-file"},
		{"expired", []string{"--tls-cert-file", f("expired"), "--tls-key-file", f("expired.key")}, "expired"},
		{"client CAs not certificates", []string{"--tls-cert-file", f("cert"), "--tls-key-file", f("key"), "--tls-client-ca-file", f("not-a-ca")}, "--tls-client-ca-file"},
		{"client CAs missing", []string{"--tls-cert-file", f("cert"), "--tls-key-file", f("key"), "--tls-client-ca-file", f("nope")}, "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr strings.Builder
			args := append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, tt.args...)
			code := run(context.Background(), args, nil, io.Discard, &stderr)
			if code != exitFailure || !strings.Contains(stderr.String(), tt.want) || strings.Contains(stderr.String(), "listening") {
				t.Errorf("exit %d, stderr %q; want exit %d before listening, with %q", code, stderr.String(), exitFailure, tt.want)
			}
			for _, key := range [][]byte{keyPEM, otherKeyPEM, expiredKeyPEM} {
				if body := strings.Split(string(key), "\n")[1]; strings.Contains(stderr.String(), body) {
					t.Errorf("stderr shows key material: %q", stderr.String())
				}
			}
		})
	}
}

func TestTLSSettings(t *testing.T) {
	t.Parallel()
	cfg, err := parseServe(t, nil, []string{"COORDINATOR_TLS_CERT_FILE=/etc/tls/tls.crt", "COORDINATOR_TLS_KEY_FILE=/etc/tls/tls.key",
		"COORDINATOR_TLS_CLIENT_CA_FILE=/etc/tls/clients.pem"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.tlsCertFile != "/etc/tls/tls.crt" || cfg.tlsKeyFile != "/etc/tls/tls.key" || cfg.tlsClientCAFile != "/etc/tls/clients.pem" {
		t.Errorf("TLS files from the environment: %q %q %q", cfg.tlsCertFile, cfg.tlsKeyFile, cfg.tlsClientCAFile)
	}
	if unknown := unknownEnv([]string{"COORDINATOR_TLS_CERT_FILE=x", "COORDINATOR_TLS_KEY_FILE=x", "COORDINATOR_TLS_CLIENT_CA_FILE=x"}); len(unknown) > 0 {
		t.Errorf("reported as unknown: %q", unknown)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"certificate without key", []string{"--tls-cert-file", "tls.crt"}, "--tls-cert-file and --tls-key-file go together"},
		{"key without certificate", []string{"--tls-key-file", "tls.key"}, "--tls-cert-file and --tls-key-file go together"},
		{"client CAs without certificate", []string{"--tls-client-ca-file", "clients.pem"}, "--tls-client-ca-file needs --tls-cert-file"},
	} {
		_, err := parseServe(t, tt.args, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
		var stderr strings.Builder
		if code := run(context.Background(), tt.args, nil, io.Discard, &stderr); code != exitUsage {
			t.Errorf("%s: exit %d, want %d; %s", tt.name, code, exitUsage, stderr.String())
		}
	}
}

func TestHealthcheckTLSUsage(t *testing.T) {
	t.Parallel()
	code, _, stderr := healthcheckRun(t, nil, "--url", "https://127.0.0.1:1/readyz", "--tls-client-cert-file", "c.pem")
	if code != exitUnhealthy || !strings.Contains(stderr, "--tls-client-key-file") {
		t.Errorf("a client certificate without its key: exit %d, %q", code, stderr)
	}
	code, _, stderr = healthcheckRun(t, nil, "--url", "https://127.0.0.1:1/readyz", "--tls-cert-file", filepath.Join(t.TempDir(), "nope"))
	if code != exitUnhealthy || !strings.Contains(stderr, "--tls-cert-file") {
		t.Errorf("a missing --tls-cert-file: exit %d, %q", code, stderr)
	}
	// Over plain http, the TLS settings are not read.
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if code, _, stderr := healthcheckRun(t, []string{"COORDINATOR_TLS_CLIENT_CA_FILE=/nope"}, "--url", "http://"+ln.Addr().String()+"/readyz"); code != exitHealthy {
		t.Errorf("http:// with COORDINATOR_TLS_CLIENT_CA_FILE set: exit %d, %s", code, stderr)
	}
	code, stdout, _ := healthcheckRun(t, nil, "--help")
	for _, want := range []string{"--tls-cert-file", "--tls-client-cert-file", "COORDINATOR_TLS_CERT_FILE"} {
		if code != exitHealthy || !strings.Contains(stdout, want) {
			t.Errorf("healthcheck --help misses %s", want)
		}
	}
}
