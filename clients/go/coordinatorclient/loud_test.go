package coordinatorclient_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// A mistake in the transport that sending again cannot cure fails the call at once, after
// one attempt, with an error that says what is wrong, however long its context allows:
// a certificate the client does not trust, one for another name, one that has expired, a
// plain HTTP client on the HTTPS port, a TLS client on a plain HTTP port, and a client
// certificate the coordinator refuses.
func TestPermanentTransportErrorsFailAtOnce(t *testing.T) {
	t.Parallel()
	var attempts atomic.Int64
	count := func(connState http.ConnState) { // a TCP connection made is an attempt
		if connState == http.StateNew {
			attempts.Add(1)
		}
	}
	newTLS := func(t *testing.T, configure func(*tls.Config)) *httptest.Server {
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) { count(s) }
		srv.Config.ErrorLog = slogDiscard()
		srv.TLS = &tls.Config{}
		if configure != nil {
			configure(srv.TLS)
		}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv
	}
	plain := httptest.NewUnstartedServer(http.NotFoundHandler())
	plain.Config.ConnState = func(_ net.Conn, s http.ConnState) { count(s) }
	plain.Start()
	t.Cleanup(plain.Close)

	trusted := newTLS(t, nil)
	mtls := newTLS(t, func(c *tls.Config) { c.ClientAuth = tls.RequireAnyClientCert })
	cases := []struct {
		name, url string
		opts      cc.Options
		want      string
	}{
		{"an untrusted certificate", trusted.URL, cc.Options{}, "authority this client does not trust"},
		{"a certificate for another name", strings.Replace(trusted.URL, "127.0.0.1", "localhost", 1),
			cc.Options{RootCAs: serverPool(trusted)}, "not valid for the host name"},
		{"plain HTTP on the HTTPS port", strings.Replace(trusted.URL, "https://", "http://", 1), cc.Options{},
			"Client sent an HTTP request to an HTTPS server"},
		{"TLS on a plain HTTP port", strings.Replace(plain.URL, "http://", "https://", 1), cc.Options{},
			"does not speak TLS on this port"},
		{"no client certificate where one is required", mtls.URL, cc.Options{RootCAs: serverPool(mtls)},
			"refused the TLS handshake"},
	}
	for _, c := range cases {
		c.opts.MinBackoff, c.opts.MaxBackoff = time.Millisecond, 5*time.Millisecond
		coord, err := cc.NewCoordinator(c.url, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		before := attempts.Load()
		_, err = coord.Register(ctx, "j", "a")
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error saying %q", c.name, err, c.want)
			continue
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: retried until the context ended: %v", c.name, err)
		}
		if n := attempts.Load() - before; n != 1 {
			t.Errorf("%s: %d connections; want one attempt", c.name, n)
		}
		t.Logf("%s: %v", c.name, err)
	}
}

// An expired certificate: refused at once too.
func TestExpiredCertificateFailsAtOnce(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = slogDiscard()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	// The server's certificate, seen from after it expires.
	cert := srv.Certificate()
	client := srv.Client()
	client.Transport.(*http.Transport).TLSClientConfig.Time = func() time.Time { return cert.NotAfter.Add(time.Hour) }
	coord, err := cc.NewCoordinator(srv.URL, cc.Options{HTTPClient: client, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = coord.Register(ctx, "j", "a")
	var invalid x509.CertificateInvalidError
	if err == nil || !errors.As(err, &invalid) || !strings.Contains(err.Error(), "not valid (expired") || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an expired certificate: %v; want it refused at once as not valid", err)
	}
}

// An answer that is no problem document (a proxy's page) keeps its body in the error; a
// refused connection is retried, and said at warn from the third attempt on.
func TestNonProblemBodyAndRetriesAtWarn(t *testing.T) {
	t.Parallel()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusPaymentRequired) // a 4xx: not retried
		_, _ = w.Write([]byte("<html>Payment required by the proxy</html>"))
	}))
	t.Cleanup(proxy.Close)
	coord, err := cc.NewCoordinator(proxy.URL, cc.Options{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = coord.Register(context.Background(), "j", "a")
	var apiErr *cc.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 402 || !strings.Contains(apiErr.Body, "Payment required by the proxy") ||
		!strings.Contains(err.Error(), "Payment required by the proxy") {
		t.Fatalf("a 402 page: %v; want its body in the error", err)
	}

	// Nothing listens on a closed port: refused, retried.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	coord, err = cc.NewCoordinator("http://"+addr, cc.Options{MaxAttempts: 5, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Register(context.Background(), "j", "a"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a refused connection: %v", err)
	}
	var debug, warn int
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "retrying") {
			continue
		}
		switch {
		case strings.Contains(line, "level=DEBUG"):
			debug++
		case strings.Contains(line, "level=WARN") && strings.Contains(line, "attempt="):
			warn++
		}
	}
	if debug != 2 || warn != 2 {
		t.Fatalf("retries logged: %d at debug, %d at warn; want the first two at debug, the next two at warn:\n%s", debug, warn, logs.String())
	}
}

func slogDiscard() *log.Logger { return log.New(io.Discard, "", 0) }

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
