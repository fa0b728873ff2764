package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func healthcheckRun(t *testing.T, environ []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"healthcheck"}, args...), environ, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestHealthcheckOnCoordinator: against a running coordinator, healthcheck exits 0 by
// its /readyz; once it has stopped, 1.
func TestHealthcheckOnCoordinator(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	base, _, exit := started(t, ctx, "embedded", "--data-dir="+t.TempDir())
	code, stdout, stderr := healthcheckRun(t, nil, "--url", base+"/readyz")
	if code != exitHealthy || stdout != "healthy: GET "+base+"/readyz answered 200\n" || stderr != "" {
		t.Errorf("healthy coordinator: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// COORDINATOR_LISTEN gives the default URL its port, as in the image.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	if code, _, stderr := healthcheckRun(t, []string{"COORDINATOR_LISTEN=:" + port}); code != exitHealthy {
		t.Errorf("with COORDINATOR_LISTEN=:%s and no --url: exit %d, %s", port, code, stderr)
	}
	stop()
	<-exit
	code, stdout, stderr = healthcheckRun(t, nil, "--url", base+"/readyz")
	if code != exitUnhealthy || stdout != "" || !strings.HasPrefix(stderr, "unhealthy: ") || !strings.Contains(stderr, "refused") {
		t.Errorf("stopped coordinator: exit %d, stdout %q, stderr %q; want exit 1 saying the connection was refused", code, stdout, stderr)
	}
}

func TestHealthcheckAnswers(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"type":"/problems/unavailable","title":"Unavailable","status":503,"code":"unavailable",` +
			`"detail":"not ready: the database cannot be written: its transactions are read-only (default_transaction_read_only)"}`))
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/healthz", http.StatusFound) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tt := range []struct {
		name, path string
		code       int
		stderr     string
	}{
		{"200", "/healthz", exitHealthy, ""},
		{"503 with a problem", "/readyz", exitUnhealthy, "answered 503: not ready: the database cannot be written: its transactions are read-only"},
		{"404", "/nope", exitUnhealthy, "answered 404: Not Found"},
		{"redirect, not followed", "/moved", exitUnhealthy, "answered 302: Found (to /healthz)"},
	} {
		code, _, stderr := healthcheckRun(t, nil, "--url", srv.URL+tt.path)
		if code != tt.code || !strings.Contains(stderr, tt.stderr) || strings.Count(stderr, "\n") > 1 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line with %q", tt.name, code, stderr, tt.code, tt.stderr)
		}
	}

	start := time.Now()
	err := healthcheck(context.Background(), srv.URL+"/slow", 100*time.Millisecond)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("a server that does not answer: %v after %s, want a timeout after 100ms", err, time.Since(start))
	}
}

// TestHealthcheckUsage: invalid flags exit 1, not 2 (Docker reserves 2); help exits 0.
func TestHealthcheckUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--url", "ftp://127.0.0.1/readyz"}, {"--url", "127.0.0.1:8080"}, {"--timeout", "1s"}, {"extra"}} {
		if code, _, stderr := healthcheckRun(t, nil, args...); code != exitUnhealthy || !strings.HasPrefix(stderr, "coordinator healthcheck: ") {
			t.Errorf("%q: exit %d, stderr %q; want exit 1 with a usage message", args, code, stderr)
		}
	}
	code, stdout, _ := healthcheckRun(t, nil, "--help")
	if code != exitHealthy || !strings.HasPrefix(stdout, "coordinator healthcheck: ") || !strings.Contains(stdout, "--url URL") {
		t.Errorf("--help: exit %d, %q", code, stdout)
	}
}

func TestDefaultHealthcheckURL(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]string{
		"":                     "http://127.0.0.1:8080/readyz",
		":9090":                "http://127.0.0.1:9090/readyz",
		"0.0.0.0:9090":         "http://127.0.0.1:9090/readyz",
		"[::]:9090":            "http://127.0.0.1:9090/readyz",
		"10.1.2.3:8081":        "http://10.1.2.3:8081/readyz",
		"[::1]:8081":           "http://[::1]:8081/readyz",
		"coordinator.lan:7000": "http://coordinator.lan:7000/readyz",
		":0":                   "http://127.0.0.1:8080/readyz",
		"not an address":       "http://127.0.0.1:8080/readyz",
	} {
		environ := []string{"HOME=/home/nonroot"}
		if listen != "" {
			environ = append(environ, "COORDINATOR_LISTEN="+listen)
		}
		if got := defaultHealthcheckURL(environ); got != want {
			t.Errorf("COORDINATOR_LISTEN=%q: %s, want %s", listen, got, want)
		}
	}
}
