package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTransportDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := parseServe(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.readHeaderTimeout != 10*time.Second || cfg.maxHeaderBytes != 64<<10 || cfg.maxWaiters != 10000 ||
		cfg.allowedOrigins != "" || cfg.allowedHosts != "" || cfg.debugListen != "" {
		t.Errorf("defaults: read header timeout %s, max header bytes %d, max waiters %d, origins %q, hosts %q, debug %q",
			cfg.readHeaderTimeout, cfg.maxHeaderBytes, cfg.maxWaiters, cfg.allowedOrigins, cfg.allowedHosts, cfg.debugListen)
	}
}

func TestTransportSettings(t *testing.T) {
	t.Parallel()
	environ := []string{
		"COORDINATOR_READ_HEADER_TIMEOUT=2s",
		"COORDINATOR_MAX_HEADER_BYTES=8192",
		"COORDINATOR_MAX_WAITERS=0",
		"COORDINATOR_ALLOWED_ORIGINS=https://dash.example, http://localhost:3000,",
		"COORDINATOR_ALLOWED_HOSTS=coordinator,coordinator.prod.svc.cluster.local, 10.0.0.7,[fd00::7]",
		"COORDINATOR_DEBUG_LISTEN=localhost:6060",
	}
	cfg, err := parseServe(t, nil, environ)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.readHeaderTimeout != 2*time.Second || cfg.maxHeaderBytes != 8192 || cfg.maxWaiters != 0 || cfg.debugListen != "localhost:6060" {
		t.Errorf("from the environment: %s, %d, %d, %q", cfg.readHeaderTimeout, cfg.maxHeaderBytes, cfg.maxWaiters, cfg.debugListen)
	}
	if got := splitList(cfg.allowedOrigins); !slices.Equal(got, []string{"https://dash.example", "http://localhost:3000"}) {
		t.Errorf("allowed origins %q", got)
	}
	if got := splitList(cfg.allowedHosts); !slices.Equal(got, []string{"coordinator", "coordinator.prod.svc.cluster.local", "10.0.0.7", "[fd00::7]"}) {
		t.Errorf("allowed hosts %q", got)
	}

	// The API serves --allowed-hosts, and the host of --listen when it names one, not when
	// it is every address.
	for listen, want := range map[string][]string{
		":8080":                    nil,
		"0.0.0.0:8080":             nil,
		"[::]:8080":                nil,
		"127.0.0.1:0":              {"127.0.0.1"},
		"coordinator.internal:443": {"coordinator.internal"},
		"[fd00::1]:8080":           {"fd00::1"},
	} {
		cfg := config{listen: listen}
		if got := cfg.apiAllowedHosts(); !slices.Equal(got, want) {
			t.Errorf("--listen %s: allowed hosts %q, want %q", listen, got, want)
		}
		cfg.allowedHosts = " coordinator,,10.0.0.7 "
		if got, want := cfg.apiAllowedHosts(), append([]string{"coordinator", "10.0.0.7"}, want...); !slices.Equal(got, want) {
			t.Errorf("--listen %s --allowed-hosts %q: allowed hosts %q, want %q", listen, cfg.allowedHosts, got, want)
		}
	}

	for _, args := range [][]string{
		{"--debug-listen", "127.0.0.1:0"},
		{"--debug-listen", "localhost:0"},
		{"--debug-listen", "[::1]:0"},
		{"--debug-listen", "127.1.2.3:6060"},
		{"--allowed-hosts", "*"},
		{"--allowed-origins", "https://dash.example:8443"},
		{"--max-header-bytes", "1024"},
		{"--read-header-timeout", "100ms"},
	} {
		if _, err := parseServe(t, args, nil); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}

func TestInvalidTransportSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string // in the error
	}{
		{[]string{"--read-header-timeout=0s"}, "--read-header-timeout must be positive"},
		{[]string{"--read-header-timeout=-1s"}, "--read-header-timeout must be positive"},
		{[]string{"--max-header-bytes=100"}, "--max-header-bytes must be from 1024"},
		{[]string{"--max-header-bytes=1073741824"}, "--max-header-bytes must be from 1024"},
		{[]string{"--max-waiters=-1"}, "--max-waiters must not be negative"},
		{[]string{"--allowed-origins=null"}, "null is never allowed"},
		{[]string{"--allowed-origins=https://dash.example,null"}, "null is never allowed"},
		{[]string{"--allowed-origins=*"}, "--allowed-origins: * is not allowed"},
		{[]string{"--allowed-origins=dash.example"}, "is not an origin"},
		{[]string{"--allowed-origins=https://dash.example/app"}, "is not an origin"},
		{[]string{"--allowed-origins=ftp://dash.example"}, "is not an origin"},
		{[]string{"--allowed-hosts=coordinator:8080"}, "without the port"},
		{[]string{"--allowed-hosts=http://coordinator"}, "without scheme or path"},
		{[]string{"--allowed-hosts=*.example.com"}, "wildcards"},
		{[]string{"--allowed-hosts=a b"}, "--allowed-hosts"},
		{[]string{"--debug-listen", ":6060"}, "would listen on every interface"},
		{[]string{"--debug-listen", "0.0.0.0:6060"}, "--debug-listen must be on loopback"},
		{[]string{"--debug-listen", "[::]:6060"}, "--debug-listen must be on loopback"},
		{[]string{"--debug-listen", "192.0.2.1:6060"}, "--debug-listen must be on loopback"},
		{[]string{"--debug-listen", "debug.example.com:6060"}, "--debug-listen must be on loopback"},
		{[]string{"--debug-listen", "127.0.0.1"}, "--debug-listen must be host:port"},
	}
	for _, tt := range tests {
		_, err := parseServe(t, tt.args, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one saying %q", tt.args, err, tt.want)
		}
	}
	// The twins are checked alike, and the run exits 2.
	var stderr bytes.Buffer
	if code := run(context.Background(), nil, []string{"COORDINATOR_DEBUG_LISTEN=:6060"}, io.Discard, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "every interface") {
		t.Errorf("COORDINATOR_DEBUG_LISTEN=:6060: exit %d, %q", code, stderr.String())
	}
}

// startedArgs runs the coordinator on the embedded store with args on a free port of
// 127.0.0.1, and returns its base URL, its log (JSON, debug) and its exit status channel.
func startedArgs(t *testing.T, ctx context.Context, args ...string) (string, *logBuffer, <-chan int) {
	t.Helper()
	logs := &logBuffer{}
	exit := make(chan int, 1)
	args = append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--log-format", "json",
		"--log-level", "debug", "--shutdown-timeout", "1s"}, args...)
	go func() { exit <- run(ctx, args, nil, io.Discard, logs) }()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if addr := logged(t, logs, "listening", "addr"); addr != "" {
			return "http://" + addr, logs, exit
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

// logged is the attribute attr of the first log line with message msg, "" if none.
func logged(t *testing.T, logs *logBuffer, msg, attr string) string {
	t.Helper()
	for _, line := range logs.lines(t) {
		if line["msg"] == msg {
			s, _ := line[attr].(string)
			return s
		}
	}
	return ""
}

// TestTransportLimits runs the coordinator with a short read header timeout, small
// headers, a bound of one long-poll, hosts and origins of its own and a debug listener,
// and checks each.
func TestTransportLimits(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	base, logs, exit := startedArgs(t, ctx, "--read-header-timeout", "500ms", "--max-header-bytes", "1024",
		"--max-waiters", "1", "--allowed-hosts", "coordinator", "--allowed-origins", "https://dash.example",
		"--debug-listen", "127.0.0.1:0")
	defer func() {
		stop()
		if code := <-exit; code != exitOK {
			t.Errorf("exit %d; log:\n%s", code, logs.buf.String())
		}
	}()
	addr := strings.TrimPrefix(base, "http://")

	t.Run("slow headers are cut off", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// A byte every 50 ms: the request line and headers would take about 3 s.
		request := "GET /v1/jobs/slowloris HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris-test\r\nX-Padding: " +
			strings.Repeat("x", 20) + "\r\n\r\n"
		start := time.Now()
		go func() {
			for i := range len(request) {
				if _, err := conn.Write([]byte{request[i]}); err != nil {
					return // the server closed the connection
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(conn)
		took := time.Since(start)
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			t.Fatalf("the connection was still open after %s, with a 500ms read header timeout", took)
		}
		if took < 400*time.Millisecond || took > 3*time.Second {
			t.Errorf("the connection was closed after %s, want about 500ms", took)
		}
		// net/http may say 400 as it hangs up; the API never saw the request (its answers
		// all carry X-Request-Id).
		if len(got) > 0 && (!bytes.HasPrefix(got, []byte("HTTP/1.1 4")) || bytes.Contains(bytes.ToLower(got), []byte("x-request-id"))) {
			t.Errorf("the slow request was answered by the API: %q", got)
		}
		for _, line := range logs.lines(t) {
			if line["msg"] == "request" && line["path"] == "/v1/jobs/slowloris" {
				t.Errorf("the slow request was served: %v", line)
			}
		}
		// A request sent at once is served.
		get(t, base+"/v1/jobs", http.StatusOK, nil)
	})

	t.Run("large headers get 431", func(t *testing.T) {
		for size, want := range map[int]int{200: 200, 16 << 10: http.StatusRequestHeaderFieldsTooLarge} {
			req, _ := http.NewRequest("GET", base+"/v1/jobs", nil)
			req.Header.Set("X-Large", strings.Repeat("x", size))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("headers of %d bytes: %v", size, err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("headers of %d bytes: %d, want %d", size, resp.StatusCode, want)
			}
		}
	})

	t.Run("hosts and origins", func(t *testing.T) {
		for _, tt := range []struct {
			host, origin string
			want         int
		}{
			{"coordinator:8080", "", 200},
			{"localhost", "", 200},
			{"other.example", "", 421},
			{"coordinator", "https://dash.example", 200},
			{"coordinator", "https://evil.example", 403},
			{"coordinator", "null", 403},
		} {
			req, _ := http.NewRequest("GET", base+"/v1/jobs", nil)
			req.Host = tt.host
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want || (tt.want != 200 && resp.Header.Get("Content-Type") != "application/problem+json") {
				t.Errorf("Host %s, Origin %q: %d %s, want %d", tt.host, tt.origin, resp.StatusCode, resp.Header.Get("Content-Type"), tt.want)
			}
		}
	})

	t.Run("one long-poll at once", func(t *testing.T) {
		send(t, http.MethodPut, base+"/v1/jobs/orders", `{"participants":["sink-a"]}`, http.StatusCreated)
		send(t, http.MethodPost, base+"/v1/jobs/orders/checkpoints", "", http.StatusCreated)
		held := make(chan int, 1)
		go func() {
			resp, err := http.Get(base + "/v1/jobs/orders/checkpoints/1?wait_ms=20000")
			if err != nil {
				held <- 0
				return
			}
			resp.Body.Close()
			held <- resp.StatusCode
		}()
		time.Sleep(200 * time.Millisecond)
		var status int
		var retryAfter string
		for deadline := time.Now().Add(5 * time.Second); status != 503 && time.Now().Before(deadline); {
			resp, err := http.Get(base + "/v1/jobs/orders/checkpoints/1?wait_ms=1")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			status, retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			time.Sleep(10 * time.Millisecond)
		}
		if status != 503 || retryAfter != "1" {
			t.Errorf("a second long-poll with --max-waiters 1: %d, Retry-After %q; want 503, 1", status, retryAfter)
		}
		send(t, http.MethodPost, base+"/v1/jobs/orders/checkpoints/1/abort", "", http.StatusOK)
		if got := <-held; got != 200 {
			t.Errorf("the held long-poll: %d, want 200", got)
		}
	})

	t.Run("debug listener", func(t *testing.T) {
		debugAddr := logged(t, logs, "serving profiles", "addr")
		if host, _, err := net.SplitHostPort(debugAddr); err != nil || host != "127.0.0.1" {
			t.Fatalf("profiles served on %q, want 127.0.0.1", debugAddr)
		}
		debug := "http://" + debugAddr + "/debug/pprof/"
		for path, want := range map[string]int{"": 200, "goroutine?debug=1": 200, "cmdline": 404, "cmdline?debug=1": 404} {
			resp, err := http.Get(debug + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("GET /debug/pprof/%s: %d, want %d", path, resp.StatusCode, want)
			}
			// The command line is the process's (os.Args: the test binary's flags here).
			for _, arg := range os.Args[1:] {
				if len(arg) > 8 && bytes.Contains(body, []byte(arg)) {
					t.Errorf("GET /debug/pprof/%s shows the command line's %q", path, arg)
				}
			}
			if path == "cmdline" && bytes.Contains(body, []byte(os.Args[0])) {
				t.Errorf("GET /debug/pprof/cmdline shows the program's path")
			}
		}
		// Not for web pages: a name of another site (DNS rebinding), or a page's request.
		for _, tt := range []struct {
			host, origin string
			want         int
		}{
			{"evil.example:6060", "", http.StatusMisdirectedRequest},
			{"localhost:6060", "", 200},
			{"", "https://evil.example", http.StatusForbidden},
		} {
			req, _ := http.NewRequest("GET", debug, nil)
			if tt.host != "" {
				req.Host = tt.host
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("GET /debug/pprof/ with Host %q, Origin %q: %d, want %d", tt.host, tt.origin, resp.StatusCode, tt.want)
			}
		}
	})
}

// TestDebugCmdlineNotServed checks the debug mux alone: no path under it answers the
// command line.
func TestDebugCmdlineNotServed(t *testing.T) {
	t.Parallel()
	mux := debugGuard(debugMux())
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/cmdline/", "/debug/pprof/cmdline?debug=1", "/debug/pprof//cmdline"} {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:6060"+path, nil)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		if w.Code == 200 || strings.Contains(w.Body.String(), os.Args[0]) {
			t.Errorf("GET %s: %d %q", path, w.Code, w.Body.String())
		}
	}
}
