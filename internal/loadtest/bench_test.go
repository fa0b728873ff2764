package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/api"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/internal/cli"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// benchJSON runs "coordinator bench" with args plus --json and returns its exit status and
// its decoded report.
func benchJSON(t *testing.T, args ...string) (int, benchReport, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Bench(context.Background(), append([]string{"--json"}, args...), nil, &stdout, &stderr)
	var rep benchReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("bench exited %d; its stdout is not one JSON report: %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	return code, rep, stderr.String()
}

// logBuffer collects a coordinator's log lines; its handlers write from many goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startCoordinator serves the coordinator's API on the PostgreSQL database at databaseURL
// (already migrated), on a free port of 127.0.0.1, until the test ends. It returns the base
// URL and the log.
func startCoordinator(t *testing.T, databaseURL string) (string, *logBuffer) {
	t.Helper()
	return startCoordinatorWith(t, databaseURL, nil)
}

// startCoordinatorWith is startCoordinator with the server's protocols (nil: HTTP/1.1) and
// wrap around its handler (nil: none).
func startCoordinatorWith(t *testing.T, databaseURL string, protocols *http.Protocols, wrap ...func(http.Handler) http.Handler) (string, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	store, err := postgres.Open(context.Background(), databaseURL, postgres.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	svc := coordinator.NewService(store, logger)
	build := &api.BuildInfo{Version: "v9.9.9-test", GoVersion: runtime.Version(), Store: api.InfoStorePostgres, SchemaExpected: postgres.SchemaVersion}
	var h http.Handler = api.NewHandler(svc, api.Options{Logger: logger, RequestTimeout: 30 * time.Second, Build: build})
	for _, w := range wrap {
		h = w(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = protocols
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		store.Close()
	})
	return srv.URL, logs
}

// get GETs url, wants status and decodes the answer into into.
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
	if err := json.Unmarshal(body, into); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

// TestBenchAgainstCoordinator seeds history into two jobs, then drives them through a real
// coordinator on PostgreSQL for a second: the rounds continue the seeded ids and pass every
// check.
func TestBenchAgainstCoordinator(t *testing.T) {
	t.Parallel()
	databaseURL := pgtest.URL(t)
	var out, errOut bytes.Buffer
	seedArgs := []string{"--database-url", databaseURL, "--checkpoints", "301", "--jobs", "2", "--job-prefix", "hist", "--batch", "100", "--analyze=false"}
	if code := Seed(context.Background(), seedArgs, nil, &out, &errOut); code != cli.ExitOK {
		t.Fatalf("seed exited %d:\n%s%s", code, out.String(), errOut.String())
	}

	base, logs := startCoordinator(t, databaseURL)

	// The seeded history, as the API shows it.
	var job struct {
		LastCheckpoint int64 `json:"last_checkpoint"`
		LastCommitted  int64 `json:"last_committed"`
	}
	get(t, base+"/v1/jobs/hist-0", http.StatusOK, &job)
	if job.LastCheckpoint != 151 || job.LastCommitted != 151 {
		t.Fatalf("seeded job hist-0: last checkpoint %d, last committed %d, want 151 and 151", job.LastCheckpoint, job.LastCommitted)
	}
	var cp struct {
		Status       string
		Participants []struct {
			Name, Vote   string
			Committables json.RawMessage
			AckedAt      *time.Time `json:"acked_at"`
		}
	}
	get(t, base+"/v1/jobs/hist-1/checkpoints/150", http.StatusOK, &cp)
	if cp.Status != "committed" || len(cp.Participants) != 2 || cp.Participants[1].Name != "p-1" || cp.Participants[1].Vote != "prepared" ||
		!bytes.Equal(cp.Participants[1].Committables, committablesJSON(64)) || cp.Participants[1].AckedAt == nil {
		t.Errorf("seeded checkpoint hist-1/150: %+v", cp)
	}

	code, rep, progress := benchJSON(t, "--url", base, "--jobs", "2", "--duration", "1s", "--warmup", "200ms", "--job-prefix", "hist")
	if code != cli.ExitOK || !rep.OK {
		t.Fatalf("bench exited %d, verdict %q; progress:\n%s\ncoordinator log:\n%s", code, rep.Verdict, progress, logs.String())
	}
	if rep.Rounds == 0 || rep.FailedRounds != 0 || len(rep.Errors) != 0 || len(rep.CheckFailures) != 0 {
		t.Errorf("report: %d rounds, %d failed, errors %v, check failures %v", rep.Rounds, rep.FailedRounds, rep.Errors, rep.CheckFailures)
	}
	if want := rep.Rounds * 5; rep.StateChanges < want { // 1 prepare + 2 votes + 2 acks a round
		t.Errorf("%d state changes for %d rounds, want at least %d", rep.StateChanges, rep.Rounds, want)
	}
	if l := rep.Latency[latRound]; l.Count != uint64(rep.Rounds) || l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.Max {
		t.Errorf("round latency %+v for %d rounds", l, rep.Rounds)
	}
	if !strings.Contains(progress, "rounds") {
		t.Errorf("no progress line on stderr:\n%s", progress)
	}
	// The report says what it measured, from GET /v1/info.
	if rep.Build != "v9.9.9-test" || rep.GoVersion != runtime.Version() || rep.Store != "postgres" {
		t.Errorf("report: build %q, Go %q, store %q; want the coordinator's v9.9.9-test, %s, postgres", rep.Build, rep.GoVersion, rep.Store, runtime.Version())
	}
	if want := "build v9.9.9-test (" + runtime.Version() + "), store postgres\n"; !strings.Contains(progress, want) || strings.Contains(progress, "warning") {
		t.Errorf("text report without %q, or with a warning:\n%s", want, progress)
	}
	get(t, base+"/v1/jobs/hist-0", http.StatusOK, &job)
	if job.LastCommitted <= 151 {
		t.Errorf("hist-0's last committed is %d after the bench, want more than the seeded 151", job.LastCommitted)
	}
}

// fakeCoordinator answers the bench with plausible JSON, and one bug.
type fakeCoordinator struct {
	bug string // "", "never decides", "skips an id", "never committed"

	mu          sync.Mutex
	last        map[string]int64
	status      map[string]string
	votes, acks map[string]int
}

func newFakeCoordinator(bug string) *fakeCoordinator {
	return &fakeCoordinator{bug: bug, last: map[string]int64{}, status: map[string]string{}, votes: map[string]int{}, acks: map[string]int{}}
}

func (f *fakeCoordinator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/v1/jobs/") {
		http.NotFound(w, r) // GET /v1/info too, as a coordinator older than it
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/jobs/"), "/")
	job := parts[0]
	answer := func(status int, body any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case len(parts) == 1 && r.Method == http.MethodPut:
		answer(http.StatusCreated, map[string]any{"name": job, "last_checkpoint": nil})
	case len(parts) == 1:
		answer(http.StatusOK, map[string]any{"name": job, "last_checkpoint": f.last[job]})
	case parts[1] == "participants" && parts[3] == "register":
		answer(http.StatusOK, map[string]any{"epoch": 1, "pending": []any{}})
	case parts[1] == "participants":
		answer(http.StatusOK, map[string]any{"epoch": 1, "items": []any{}})
	case len(parts) == 2:
		f.last[job]++
		if f.bug == "skips an id" && f.last[job] == 3 {
			f.last[job]++
		}
		key := fmt.Sprintf("%s/%d", job, f.last[job])
		f.status[key] = "preparing"
		answer(http.StatusCreated, map[string]any{"id": f.last[job], "status": "preparing"})
	default:
		id, _ := strconv.ParseInt(parts[2], 10, 64)
		key := fmt.Sprintf("%s/%d", job, id)
		switch {
		case len(parts) == 3: // the waiter
			wait, _ := strconv.Atoi(r.URL.Query().Get("wait_ms"))
			for deadline := time.Now().Add(time.Duration(wait) * time.Millisecond); f.status[key] == "preparing" && time.Now().Before(deadline); {
				f.mu.Unlock()
				time.Sleep(time.Millisecond)
				f.mu.Lock()
			}
			if r.Header.Get("Prefer") == "return=minimal" {
				// The minimal view: the counts, no entry.
				prepared := 2
				if f.bug == "counts a vote short" {
					prepared = 1
				}
				if f.status[key] == "preparing" {
					prepared = f.votes[key]
				}
				answer(http.StatusOK, map[string]any{"id": id, "status": f.status[key], "participants": []any{},
					"votes": map[string]int{"prepared": prepared, "abort": 0, "missing": 2 - prepared}})
				return
			}
			if f.bug == "counts a vote short" {
				t := "the waiter asked for the full view"
				http.Error(w, t, http.StatusBadRequest)
				return
			}
			committables := json.RawMessage(committablesJSON(64))
			answer(http.StatusOK, map[string]any{"id": id, "status": f.status[key], "participants": []any{
				map[string]any{"name": "p-0", "vote": "prepared", "committables": committables},
				map[string]any{"name": "p-1", "vote": "prepared", "committables": committables},
			}})
		case parts[3] == "votes":
			f.votes[key]++
			if f.votes[key] == 2 && f.bug != "never decides" {
				f.status[key] = "committing"
			}
			answer(http.StatusOK, map[string]any{"id": id, "status": f.status[key]})
		case parts[3] == "acks":
			f.acks[key]++
			if f.acks[key] == 2 && f.bug != "never committed" {
				f.status[key] = "committed"
			}
			answer(http.StatusOK, map[string]any{"id": id, "status": f.status[key]})
		case parts[3] == "abort":
			f.status[key] = "aborted"
			answer(http.StatusOK, map[string]any{"id": id, "status": "aborted"})
		}
	}
}

// TestBenchFailsOnWrongAnswers points the bench at fake coordinators that answer fast but
// wrong: it must report the failure and exit non-zero, even with --allow-errors.
func TestBenchFailsOnWrongAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ bug, check string }{
		{"", ""},
		{"never decides", "not_decided"},
		{"skips an id", "id_not_next"},
		{"never committed", "not_committed"},
		// With --minimal-waiter: the waiter must ask for the minimal view (the fake refuses
		// the full one) and read the counts.
		{"counts a vote short", "vote_missing"},
	} {
		name := strings.ReplaceAll(tc.bug, " ", "_")
		if name == "" {
			name = "correct"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(newFakeCoordinator(tc.bug))
			defer srv.Close()
			args := []string{"--url", srv.URL, "--jobs", "2", "--participants", "2", "--duration", "500ms",
				"--warmup", "0s", "--round-timeout", "300ms", "--wait", "100ms", "--allow-errors", "--job-prefix", "fake"}
			if tc.bug == "counts a vote short" {
				args = append(args, "--minimal-waiter")
			}
			code, rep, progress := benchJSON(t, args...)
			if tc.bug == "" {
				if code != cli.ExitOK || !rep.OK || rep.Rounds == 0 {
					t.Fatalf("against a correct fake: exit %d, %d rounds, verdict %q, checks %v; progress:\n%s", code, rep.Rounds, rep.Verdict, rep.CheckExamples, progress)
				}
				// The fake has no GET /v1/info: the bench warns, and reports what it cannot tell as unknown.
				if !strings.Contains(progress, "warning: the coordinator has no GET /v1/info") ||
					rep.Build != "unknown" || rep.GoVersion != "unknown" || rep.Store != "unknown" ||
					!strings.Contains(progress, "build unknown, store unknown\n") {
					t.Errorf("against a coordinator without GET /v1/info: build %q, Go %q, store %q; progress:\n%s", rep.Build, rep.GoVersion, rep.Store, progress)
				}
				return
			}
			if code != cli.ExitFailure || rep.OK {
				t.Errorf("a coordinator that %s: exit %d, ok %v, want exit %d and not ok", tc.bug, code, rep.OK, cli.ExitFailure)
			}
			if rep.CheckFailures[tc.check] == 0 {
				t.Errorf("a coordinator that %s: check failures %v, want %s", tc.bug, rep.CheckFailures, tc.check)
			}
			if !strings.HasPrefix(rep.Verdict, "FAILED") {
				t.Errorf("verdict %q", rep.Verdict)
			}
			t.Logf("%s; check failures %v, e.g. %v", rep.Verdict, rep.CheckFailures, rep.CheckExamples)
		})
	}
}

func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	h := newHistogram()
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.9, 900 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, time.Millisecond}} {
		got := h.quantile(tc.q)
		if got < tc.want || float64(got) > float64(tc.want)*1.008 {
			t.Errorf("quantile(%v) = %v, want %v within 0.8%%", tc.q, got, tc.want)
		}
	}
	for _, d := range []time.Duration{0, 1, 255, 256, 257, 511, 512, time.Second, time.Hour} {
		if i := histIndex(d); histUpper(i) < d || (i > 0 && histUpper(i-1) >= d) {
			t.Errorf("duration %d is in bucket %d of upper bound %d (the one below: %d)", d, i, histUpper(i), histUpper(i-1))
		}
	}
}

func TestCommittablesJSONSize(t *testing.T) {
	t.Parallel()
	for n := 2; n < 100; n++ {
		for _, random := range []bool{false, true} {
			b := benchCommittables(n, random)
			var v []any
			if len(b) != n || json.Unmarshal(b, &v) != nil {
				t.Errorf("benchCommittables(%d, %v) = %q", n, random, b)
			}
		}
	}
	// Random ones do not repeat: two of 16 KiB share no long run.
	a, b := randomCommittablesJSON(16<<10), randomCommittablesJSON(16<<10)
	if bytes.Equal(a[2:66], b[2:66]) || bytes.Count(a, a[2:10]) != 1 {
		t.Errorf("random committables repeat: %.80s", a)
	}
}

// TestBenchMinimalWaiter runs the bench with --minimal-waiter, 16 KiB committables and four
// event streams against a real coordinator: the waiter's minimal views carry the counts,
// every round passes its checks, and the streams received the rounds' events.
func TestBenchMinimalWaiter(t *testing.T) {
	t.Parallel()
	base, logs := startCoordinator(t, pgtest.URL(t))
	code, rep, progress := benchJSON(t, "--url", base, "--minimal-waiter", "--jobs", "2", "--committables-bytes", "16384",
		"--streams", "4", "--duration", "1s", "--warmup", "200ms")
	if code != cli.ExitOK || !rep.OK {
		t.Fatalf("bench exited %d, verdict %q; progress:\n%s\ncoordinator log:\n%s", code, rep.Verdict, progress, logs.String())
	}
	if rep.Rounds == 0 || rep.FailedRounds != 0 || len(rep.CheckFailures) != 0 {
		t.Errorf("report: %d rounds, %d failed, check failures %v", rep.Rounds, rep.FailedRounds, rep.CheckFailures)
	}
	// Each round is three status changes at least, each seen by the two streams of its job.
	if rep.Streams != 4 || rep.StreamEvents < 3*2*rep.Rounds {
		t.Errorf("%d streams received %d events for %d rounds, want at least %d", rep.Streams, rep.StreamEvents, rep.Rounds, 3*2*rep.Rounds)
	}
}

// TestBenchHTTP2 runs the bench with --http2 against a coordinator serving h2c: every
// request goes over HTTP/2, and every round passes its checks, 16 KiB committables included.
func TestBenchHTTP2(t *testing.T) {
	t.Parallel()
	base, logs, h1, h2 := startH2CCoordinator(t)
	code, rep, progress := benchJSON(t, "--url", base, "--http2", "--jobs", "2", "--committables-bytes", "16384",
		"--duration", "1s", "--warmup", "200ms")
	if code != cli.ExitOK || !rep.OK {
		t.Fatalf("bench exited %d, verdict %q; progress:\n%s\ncoordinator log:\n%s", code, rep.Verdict, progress, logs.String())
	}
	if rep.Rounds == 0 || rep.FailedRounds != 0 || len(rep.CheckFailures) != 0 {
		t.Errorf("report: %d rounds, %d failed, check failures %v", rep.Rounds, rep.FailedRounds, rep.CheckFailures)
	}
	if rep.Protocol != "HTTP/2 (h2c)" {
		t.Errorf("report says protocol %q, want HTTP/2 (h2c)", rep.Protocol)
	}
	if h2.Load() == 0 || h1.Load() != 0 {
		t.Errorf("the coordinator saw %d HTTP/2 and %d HTTP/1.1 requests, want HTTP/2 only", h2.Load(), h1.Load())
	}
}
