package coordinatorclient_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

const testToken = "ctk_s3cret-Token.value"

// authServer answers GET /v1/jobs/orders and /healthz over HTTPS when the request carries
// exactly "Authorization: Bearer <testToken>", else 401; it counts the requests it saw.
func authServer(t *testing.T, configure func(*tls.Config)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var seen atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+testToken {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"type":"/problems/unauthorized","title":"Unauthorized","status":401,"code":"unauthorized","detail":"no valid token"}`))
			return
		}
		switch r.URL.Path {
		case "/v1/jobs/orders":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"job":"orders","participants":["sink-a"],"checkpoint_timeout_ms":1000,"epochs":{"sink-a":0}}`))
		case "/healthz":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	srv.TLS = &tls.Config{}
	if configure != nil {
		configure(srv.TLS)
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &seen
}

func serverPool(srv *httptest.Server) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return pool
}

// Token goes as a bearer token on every request, the Coordinator's and the generated
// client's; RootCAs makes an https:// coordinator trusted.
func TestTokenAndRootCAs(t *testing.T) {
	t.Parallel()
	srv, _ := authServer(t, nil)
	ctx := context.Background()
	coord, err := cc.NewCoordinator(srv.URL, cc.Options{Token: testToken, RootCAs: serverPool(srv), MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	job, err := coord.Job(ctx, "orders")
	if err != nil || job.CheckpointTimeoutMs != 1000 {
		t.Fatalf("Job with the token over https: %+v, %v", job, err)
	}
	resp, err := coord.Client().GetHealthz(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the generated client's GetHealthz got %d: the token is not sent on its calls", resp.StatusCode)
	}

	// A wrong token is refused, and neither token shows in the error.
	wrong, err := cc.NewCoordinator(srv.URL, cc.Options{Token: "ctk_wrong-one", RootCAs: serverPool(srv), MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Job(ctx, "orders")
	var apiErr *cc.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token: %v, want an APIError with 401", err)
	}
	if err != nil && strings.Contains(err.Error(), "wrong-one") {
		t.Errorf("the error shows the token: %v", err)
	}

	// No token: refused; without the CA: the certificate is not trusted.
	none, _ := cc.NewCoordinator(srv.URL, cc.Options{RootCAs: serverPool(srv), MaxAttempts: 1})
	if _, err := none.Job(ctx, "orders"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: %v, want 401", err)
	}
	untrusted, _ := cc.NewCoordinator(srv.URL, cc.Options{Token: testToken, MaxAttempts: 1})
	_, err = untrusted.Job(ctx, "orders")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without RootCAs: %v, want a certificate error", err)
	}
	if err != nil && strings.Contains(err.Error(), testToken) {
		t.Errorf("the error shows the token: %v", err)
	}
}

func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	secret := "ctk_abc\r\nX-Injected: 1"
	_, err := cc.NewCoordinator("https://127.0.0.1:1", cc.Options{Token: secret})
	if err == nil || strings.Contains(err.Error(), "abc") {
		t.Errorf("a token with a line break: %v, want an error that does not show it", err)
	}
	_, err = cc.NewCoordinator("https://127.0.0.1:1", cc.Options{HTTPClient: &http.Client{}, RootCAs: x509.NewCertPool()})
	if err == nil || !strings.Contains(err.Error(), "HTTPClient") {
		t.Errorf("RootCAs with an HTTPClient: %v, want an error", err)
	}
	// With an HTTPClient of the caller's, the token is still sent.
	srv, seen := authServer(t, nil)
	coord, err := cc.NewCoordinator(srv.URL, cc.Options{HTTPClient: srv.Client(), Token: testToken, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Job(context.Background(), "orders"); err != nil || seen.Load() != 1 {
		t.Errorf("with the caller's HTTPClient: %v after %d requests", err, seen.Load())
	}
}

// Certificates are presented to a coordinator that asks for a client certificate.
func TestClientCertificates(t *testing.T) {
	t.Parallel()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "sink-a"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca)
	srv, _ := authServer(t, func(c *tls.Config) {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = clientCAs
	})

	ctx := context.Background()
	with, err := cc.NewCoordinator(srv.URL, cc.Options{Token: testToken, RootCAs: serverPool(srv), MaxAttempts: 1,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := with.Job(ctx, "orders"); err != nil {
		t.Errorf("with a client certificate: %v", err)
	}
	without, _ := cc.NewCoordinator(srv.URL, cc.Options{Token: testToken, RootCAs: serverPool(srv), MaxAttempts: 1})
	if _, err := without.Job(ctx, "orders"); err == nil {
		t.Errorf("without a client certificate: no error, want refused")
	}
}
