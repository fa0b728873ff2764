package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// logBuffer collects the JSON log lines of a running coordinator.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log lines decoded so far.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		out = append(out, line)
	}
	return out
}

// started runs the coordinator with store args in the background on a free port of
// 127.0.0.1 and returns its base URL, its log and the channel its exit status arrives on.
// Cancelling ctx is what SIGTERM does in main.
func started(t *testing.T, ctx context.Context, store, storeArg string, extra ...string) (string, *logBuffer, <-chan int) {
	t.Helper()
	logs := &logBuffer{}
	exit := make(chan int, 1)
	args := append([]string{"--listen", "127.0.0.1:0", storeArg, "--log-format", "json", "--sweep-interval", "1s", "--shutdown-timeout", "1s"}, extra...)
	go func() { exit <- run(ctx, args, nil, io.Discard, logs) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range logs.lines(t) {
			if line["msg"] == "listening" {
				if line["store"] != store {
					t.Errorf("listening line names store %v, want %s", line["store"], store)
				}
				return "http://" + line["addr"].(string), logs, exit
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

func TestServeSweepsBeforeListeningAndShutsDownCleanly(t *testing.T) {
	t.Parallel()
	databaseURL := pgtest.URL(t)
	ctx := context.Background()

	// A checkpoint that expires while no coordinator runs.
	store, err := postgres.Open(ctx, databaseURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := coordinator.NewService(store, nil)
	cfg := coordinator.JobConfig{Participants: []string{"sink-a"}, CheckpointTimeout: 100 * time.Millisecond, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	if _, _, err := svc.PutJob(ctx, "orders", cfg); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Prepare(ctx, "orders", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	store.Close()
	time.Sleep(150 * time.Millisecond)

	serveCtx, stop := context.WithCancel(ctx)
	defer stop()
	base, logs, exit := started(t, serveCtx, "postgres", "--database-url="+databaseURL)

	// Rule 6: the expired checkpoint was aborted before the coordinator listened.
	swept := false
	for _, line := range logs.lines(t) {
		if line["msg"] == "listening" {
			break
		}
		if strings.HasPrefix(line["msg"].(string), "aborted checkpoints that expired") {
			swept = true
		}
	}
	if !swept {
		t.Errorf("no start-up sweep logged before \"listening\"; log:\n%s", logs.buf.String())
	}
	var cp struct{ Status, AbortReason string }
	get(t, base+"/v1/jobs/orders/checkpoints/1", http.StatusOK, &cp)
	if cp.Status != "aborted" {
		t.Errorf("checkpoint 1 is %q right after start-up, want aborted", cp.Status)
	}

	get(t, base+"/healthz", http.StatusOK, nil)
	get(t, base+"/readyz", http.StatusOK, nil)

	// SIGTERM while a long-poll waits: the long-poll is answered at once with the
	// checkpoint as it stands, the server stops accepting, and exits 0 without the shutdown
	// timeout having to cut anything.
	send(t, http.MethodPut, base+"/v1/jobs/orders", `{"participants":["sink-a"]}`, http.StatusOK)
	send(t, http.MethodPost, base+"/v1/jobs/orders/checkpoints", "", http.StatusCreated)
	polling := make(chan struct{})
	answered := make(chan string, 1)
	go func() {
		close(polling)
		resp, err := http.Get(base + "/v1/jobs/orders/checkpoints/2?wait_ms=60000")
		if err != nil {
			answered <- "no answer: " + err.Error()
			return
		}
		defer resp.Body.Close()
		var cp struct{ Status string }
		if err := json.NewDecoder(resp.Body).Decode(&cp); err != nil {
			answered <- fmt.Sprintf("%d with a body that is not a checkpoint: %v", resp.StatusCode, err)
			return
		}
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, cp.Status)
	}()
	<-polling
	time.Sleep(200 * time.Millisecond)
	stopped := time.Now()
	stop()
	exitedCleanly(t, exit, logs, stopped, 10*time.Second)
	if got := <-answered; got != "200 preparing" {
		t.Errorf("the long-poll waiting at shutdown got %s, want 200 with the checkpoint preparing", got)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("coordinator still accepts requests after shutdown")
	}
	var closed bool
	for _, line := range logs.lines(t) {
		closed = closed || line["msg"] == "store closed"
	}
	if !closed {
		t.Errorf("store not closed at shutdown; log:\n%s", logs.buf.String())
	}
}

func get(t *testing.T, url string, status int, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, body, status)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("GET %s: no X-Request-Id", url)
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, body)
		}
	}
}

func send(t *testing.T, method, url, body string, status int) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, got, status)
	}
}

// A long-poll on pending parked by the coordinator (--park-after) is answered at shutdown,
// which it does not hold up.
func TestServeAnswersParkedLongPollsAtShutdown(t *testing.T) {
	t.Parallel()
	serveCtx, stop := context.WithCancel(context.Background())
	defer stop()
	base, logs, exit := started(t, serveCtx, "postgres", "--database-url="+pgtest.URL(t), "--park-after", "100ms")
	send(t, http.MethodPut, base+"/v1/jobs/orders", `{"participants":["sink-a"]}`, http.StatusCreated)
	send(t, http.MethodPost, base+"/v1/jobs/orders/participants/sink-a/register", "", http.StatusOK)
	answered := make(chan string, 1)
	go func() {
		resp, err := http.Get(base + "/v1/jobs/orders/participants/sink-a/pending?wait_ms=60000")
		if err != nil {
			answered <- "no answer: " + err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, body)
	}()
	time.Sleep(500 * time.Millisecond)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "coordinator_http_parked_requests_total 1") {
		t.Fatalf("the long-poll was not parked: %s", metrics)
	}
	stopped := time.Now()
	stop()
	select {
	case got := <-answered:
		if !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"items":[]`) {
			t.Errorf("the parked long-poll at shutdown got %s, want 200 with nothing owed", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parked long-poll was not answered at shutdown")
	}
	exitedCleanly(t, exit, logs, stopped, 5*time.Second)
}

// exitedCleanly waits for a coordinator stopped at stopped to exit, and fails the test
// unless it exited 0 within limit, without its shutdown timeout cutting requests short (a
// long-poll holding the shutdown).
func exitedCleanly(t *testing.T, exit <-chan int, logs *logBuffer, stopped time.Time, limit time.Duration) {
	t.Helper()
	select {
	case code := <-exit:
		if code != exitOK {
			t.Errorf("exit status %d after shutdown, want 0; log:\n%s", code, logs.buf.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("coordinator did not exit within 30s of shutdown")
	}
	if took := time.Since(stopped); took > limit {
		t.Errorf("shutdown took %s with a 1s shutdown timeout", took)
	}
	for _, line := range logs.lines(t) {
		if msg, _ := line["msg"].(string); strings.HasPrefix(msg, "shutdown timeout passed") {
			t.Errorf("the shutdown timeout cut requests short: a long-poll held the shutdown; log:\n%s", logs.buf.String())
		}
	}
}

func TestEmbeddedStoreHasOneOwner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	base, logs, exit := started(t, ctx, "embedded", "--data-dir="+dir)
	send(t, http.MethodPut, base+"/v1/jobs/orders", `{"participants":["sink-a"]}`, http.StatusCreated)

	// A second coordinator on the same data directory exits at once, naming the first.
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--data-dir", dir}, nil, io.Discard, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "in use") {
		t.Errorf("second coordinator on %s: exit %d, log %q; want exit 1 saying the directory is in use", dir, code, stderr.String())
	}

	stop()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit status %d after shutdown; log:\n%s", code, logs.buf.String())
	}

	// The data survived, and the schema is current.
	var stdout bytes.Buffer
	if code := run(context.Background(), []string{"migrate", "version", "--data-dir", dir}, nil, &stdout, io.Discard); code != exitOK {
		t.Fatalf("migrate version exited %d", code)
	}
	if !strings.HasPrefix(stdout.String(), "schema version ") || strings.Contains(stdout.String(), "version 0 ") {
		t.Errorf("migrate version printed %q", stdout.String())
	}
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	base, _, exit = started(t, ctx2, "embedded", "--data-dir="+dir)
	get(t, base+"/v1/jobs/orders", http.StatusOK, nil)
	stop2()
	<-exit
}
