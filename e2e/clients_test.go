package e2e_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// clientFixture is what the contract tests of the Python and TypeScript clients run
// against, handed to them in environment variables (env): two coordinator binaries on one
// PostgreSQL database, both with authentication on and the same admin token,
//
//   - TWOPHASE_URL: plain HTTP on loopback;
//   - TWOPHASE_TLS_URL: HTTPS whose certificate is signed by TWOPHASE_CA_FILE's CA, and that
//     requires a client certificate (TWOPHASE_CLIENT_CERT, TWOPHASE_CLIENT_KEY);
//   - TWOPHASE_PROXY_URL: a proxy in front of the first that can be told to lose answers;
//   - TWOPHASE_CONTROL: the test's control, to which a client test POSTs
//     /restart (SIGKILL the first coordinator and start it again, answering at once: the
//     client must ride through it), /kill, /start, and /lose-answers?n=N (the proxy
//     forwards the next N requests but drops their answers, closing the connection);
//   - TWOPHASE_ADMIN_TOKEN.
type clientFixture struct {
	plain, tls *harness.Coordinator
	env        []string
}

func startClientFixture(t *testing.T) *clientFixture {
	t.Helper()
	dbURL := pgtest.URL(t) // first: under -short it skips the test
	dir := t.TempDir()
	tokenFile, admin := harness.AdminTokenFile(t)
	caFile, certFile, keyFile, clientCert, clientKey := writeClientFixtureCerts(t, dir)

	plain := harness.StartCoordinator(t, dbURL, "--admin-token-file", tokenFile)
	tlsCoord := harness.StartCoordinator(t, dbURL, "--admin-token-file", tokenFile,
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-client-ca-file", caFile)

	var lose atomic.Int64
	var restartMu sync.Mutex
	proxyURL := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		out, err := http.NewRequestWithContext(r.Context(), r.Method, plain.BaseURL+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := plain.HTTP.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		answer, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if lose.Add(-1) >= 0 {
			// The coordinator did what was asked; its answer never reaches the client.
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		lose.Store(0)
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	}))
	controlURL := serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		switch r.URL.Path {
		case "/restart":
			// Killed now, started again in the background: requests meanwhile fail.
			plain.Kill()
			go func() {
				restartMu.Lock()
				defer restartMu.Unlock()
				time.Sleep(300 * time.Millisecond)
				plain.Restart()
			}()
		case "/kill":
			plain.Kill()
		case "/start":
			restartMu.Lock()
			plain.Restart()
			restartMu.Unlock()
		case "/lose-answers":
			n, err := strconv.Atoi(r.URL.Query().Get("n"))
			if err != nil || n < 1 {
				http.Error(w, "n: a count", http.StatusBadRequest)
				return
			}
			lose.Store(int64(n))
		default:
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(func() { restartMu.Lock(); restartMu.Unlock() }) // no restart after the test
	return &clientFixture{
		plain: plain,
		tls:   tlsCoord,
		env: []string{
			"TWOPHASE_URL=" + plain.BaseURL,
			"TWOPHASE_TLS_URL=https://" + tlsCoord.Addr,
			"TWOPHASE_PROXY_URL=" + proxyURL,
			"TWOPHASE_CONTROL=" + controlURL,
			"TWOPHASE_ADMIN_TOKEN=" + admin,
			"TWOPHASE_CA_FILE=" + caFile,
			"TWOPHASE_CLIENT_CERT=" + clientCert,
			"TWOPHASE_CLIENT_KEY=" + clientKey,
		},
	}
}

// serveLoopback serves h on 127.0.0.1 and a free port until the test ends.
func serveLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// writeClientFixtureCerts writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, both signed by it, as PEM files in dir.
func writeClientFixtureCerts(t *testing.T, dir string) (caFile, certFile, keyFile, clientCert, clientKey string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client tests CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(crand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, usage x509.ExtKeyUsage, name string) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificate(crand.Reader, &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serverCert, serverKey := leaf(2, x509.ExtKeyUsageServerAuth, "127.0.0.1")
	cCert, cKey := leaf(3, x509.ExtKeyUsageClientAuth, "client tests participant")
	return write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		write("server.pem", serverCert), write("server-key.pem", serverKey),
		write("client.pem", cCert), write("client-key.pem", cKey)
}

// runClientTests runs a client's test command (name and args) in dir with the fixture's
// environment, and fails the test if it fails or ran fewer than min tests, whose count
// countRE's first group reads from the output.
func runClientTests(t *testing.T, f *clientFixture, dir string, countRE *regexp.Regexp, min int, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), f.env...)
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, text)
	}
	m := countRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s: no test count in its output:\n%s", name, text)
	}
	if n, _ := strconv.Atoi(m[1]); n < min {
		t.Fatalf("%s ran %d tests, want at least %d:\n%s", name, n, min, text)
	}
	return text
}
