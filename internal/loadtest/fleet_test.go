package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twophase/coordinator/internal/cli"
	"github.com/twophase/coordinator/store/pgtest"
)

// fleetJSON runs "coordinator fleet" with args plus --json and returns its exit status and
// its decoded report.
func fleetJSON(t *testing.T, args ...string) (int, fleetReport, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Fleet(context.Background(), append([]string{"--json"}, args...), nil, &stdout, &stderr)
	var rep fleetReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("fleet exited %d; its stdout is not one JSON report: %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	return code, rep, stderr.String()
}

// TestFleetTriggers runs 3 jobs x 2 participants through the participant library against a
// real coordinator on PostgreSQL, a checkpoint per job every 200ms, for 2s: every checkpoint
// commits, and the rates, latencies and CPU figures are there.
func TestFleetTriggers(t *testing.T) {
	t.Parallel()
	base, logs := startCoordinator(t, pgtest.URL(t))
	pid := strconv.Itoa(os.Getpid()) // the coordinator runs in this process
	var rep fleetReport
	// A round slower than the interval is a backlog: on a machine loaded by the rest of the
	// suite (under -race) one can be, once in a while; the run is then made again, up to
	// three times, and must show none.
	for attempt := 1; ; attempt++ {
		var code int
		var stderr string
		code, rep, stderr = fleetJSON(t, "--url", base, "--jobs", "3", "--participants", "2", "--interval", "200ms",
			"--warmup", "500ms", "--duration", "2s", "--coordinator-pid", pid, "--rss-interval", "500ms")
		if code != cli.ExitOK || !rep.OK {
			t.Fatalf("fleet exited %d: %s\n%s\ncoordinator log:\n%s", code, rep.Verdict, stderr, logs.String())
		}
		if !rep.Backlog || attempt == 3 {
			break
		}
		t.Logf("run %d: backlog %v; running again", attempt, rep.BacklogReasons)
	}
	if rep.Mode != "triggers" || rep.Jobs != 3 || rep.Participants != 2 {
		t.Errorf("mode %q, %d jobs x %d participants, want triggers, 3 x 2", rep.Mode, rep.Jobs, rep.Participants)
	}
	// 3 jobs every 200ms: 15 rounds/s offered, 30 votes/s.
	if rep.Committed == 0 || rep.RoundsPerSecond < 10 || rep.RoundsPerSecond > 18 {
		t.Errorf("committed %d in the window, %.1f/s, want about 15/s", rep.Committed, rep.RoundsPerSecond)
	}
	if rep.VotesPerSecond < 20 || rep.VotesPerSecond > 36 {
		t.Errorf("%.1f votes/s, want about 30/s", rep.VotesPerSecond)
	}
	if rep.Backlog {
		t.Errorf("backlog reported at 15 rounds/s: %v", rep.BacklogReasons)
	}
	if rep.AllCheckpoints == 0 || rep.NotCommitted != 0 || rep.Aborts != 0 || !rep.Verified {
		t.Errorf("listed %d checkpoints %v, %d not committed, %d aborts, verified %v; want all committed",
			rep.AllCheckpoints, rep.Checkpoints, rep.NotCommitted, rep.Aborts, rep.Verified)
	}
	// An opening in flight when the triggers stop may open a checkpoint the trigger never
	// hears of: the participants commit it all the same.
	if rep.AllCommitted != rep.AllCheckpoints || rep.AllOpened > rep.AllCheckpoints || rep.AllOpened < rep.AllCheckpoints-3 {
		t.Errorf("opened %d, committed by every participant %d, listed %d: want all listed committed by every participant, and opened",
			rep.AllOpened, rep.AllCommitted, rep.AllCheckpoints)
	}
	for _, k := range fleetLatencyKinds {
		l, ok := rep.Latency[k]
		if !ok || l.Count == 0 || l.P50 <= 0 && k != latOpenToPrepare || l.P99 < l.P50 || l.Max < l.P99 {
			t.Errorf("latency %s: %+v, want samples with p50 <= p99 <= max", k, l)
		}
	}
	// Each checkpoint of the window gets one open-to-prepare sample per participant.
	if got, want := rep.Latency[latOpenToPrepare].Count, rep.Latency[latOpenToLastCommit].Count*2; got != want {
		t.Errorf("%d open-to-prepare samples for %d committed checkpoints of 2 participants", got, want/2)
	}
	if rep.CoordinatorCPU == nil || rep.CoordinatorCPU.Seconds <= 0 {
		t.Errorf("coordinator CPU %+v, want some (notes %v)", rep.CoordinatorCPU, rep.CPUNotes)
	}
	if rep.RSS == nil || rep.RSS.MaxKiB <= 0 || rep.RSS.WindowEndKiB <= 0 {
		t.Errorf("RSS %+v, want samples", rep.RSS)
	}
	if rep.RequestsByKind["vote"].Requests == 0 || rep.RequestsByKind["open_checkpoint"].Requests == 0 {
		t.Errorf("requests by kind %v, want votes and opens", rep.RequestsByKind)
	}
	if len(rep.RunnerErrors) > 0 || len(rep.TriggerErrors) > 0 {
		t.Errorf("runner errors %v, trigger errors %v", rep.RunnerErrors, rep.TriggerErrors)
	}
	// The job and its checkpoints are real ones, on the coordinator.
	var job struct {
		LastCommitted *int64 `json:"last_committed"`
	}
	get(t, base+"/v1/jobs/"+rep.JobPrefix+"-0", http.StatusOK, &job)
	if job.LastCommitted == nil || *job.LastCommitted == 0 {
		t.Errorf("job %s-0 committed nothing", rep.JobPrefix)
	}
}

// TestFleetIdle runs the participants without triggers: each holds one long-poll of --wait
// at a time, so 6 participants with a 1s wait make about 6 requests a second, not the 60 a
// 100ms poll would.
func TestFleetIdle(t *testing.T) {
	t.Parallel()
	base, logs := startCoordinator(t, pgtest.URL(t))
	code, rep, stderr := fleetJSON(t, "--url", base, "--idle", "--jobs", "3", "--participants", "2", "--wait", "1s",
		"--warmup", "300ms", "--duration", "2s", "--coordinator-pid", strconv.Itoa(os.Getpid()))
	if code != cli.ExitOK || !rep.OK {
		t.Fatalf("fleet exited %d: %s\n%s\ncoordinator log:\n%s", code, rep.Verdict, stderr, logs.String())
	}
	if rep.Mode != "idle" || rep.AllOpened != 0 || rep.Committed != 0 {
		t.Errorf("mode %q, opened %d, committed %d: want idle, nothing opened", rep.Mode, rep.AllOpened, rep.Committed)
	}
	runners := float64(3 * 2)
	if rep.RequestsPerSecond < runners/2 || rep.RequestsPerSecond > runners*2 {
		t.Errorf("%.1f requests/s by %v idle participants with a 1s long-poll, want about %v: %v", rep.RequestsPerSecond, runners, runners, rep.RequestsByKind)
	}
	for kind := range rep.RequestsByKind {
		if kind != "pending_wait" {
			t.Errorf("idle participants made %s requests: %v", kind, rep.RequestsByKind)
		}
	}
	if rep.CoordinatorCPU == nil {
		t.Errorf("no coordinator CPU (notes %v)", rep.CPUNotes)
	}
	if !strings.HasPrefix(rep.Verdict, "OK") {
		t.Errorf("verdict %q", rep.Verdict)
	}
}

// TestFleetHTTP2 runs the fleet with --http2 against a coordinator serving h2c: every
// request of the runners and triggers goes over HTTP/2, and every checkpoint commits.
func TestFleetHTTP2(t *testing.T) {
	t.Parallel()
	base, logs, h1, h2 := startH2CCoordinator(t, "/v1/info") // the report's look at the build, by the bench's client
	code, rep, stderr := fleetJSON(t, "--url", base, "--http2", "--jobs", "2", "--participants", "2", "--interval", "200ms",
		"--warmup", "500ms", "--duration", "1s")
	if code != cli.ExitOK || !rep.OK {
		t.Fatalf("fleet exited %d: %s\n%s\ncoordinator log:\n%s", code, rep.Verdict, stderr, logs.String())
	}
	if rep.Protocol != "HTTP/2 (h2c)" {
		t.Errorf("report says protocol %q, want HTTP/2 (h2c)", rep.Protocol)
	}
	if h2.Load() == 0 || h1.Load() != 0 {
		t.Errorf("the coordinator saw %d HTTP/2 and %d HTTP/1.1 requests, want HTTP/2 only", h2.Load(), h1.Load())
	}
	if rep.AllCheckpoints == 0 || rep.NotCommitted != 0 {
		t.Errorf("listed %d checkpoints, %d not committed; want all committed", rep.AllCheckpoints, rep.NotCommitted)
	}
}

// startH2CCoordinator starts a coordinator serving HTTP/1.1 and h2c, and counts the
// requests it gets over each, but for those to the paths in uncounted.
func startH2CCoordinator(t *testing.T, uncounted ...string) (base string, logs *logBuffer, h1, h2 *atomic.Int64) {
	t.Helper()
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	h1, h2 = new(atomic.Int64), new(atomic.Int64)
	count := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case slices.Contains(uncounted, r.URL.Path):
			case r.ProtoMajor == 2:
				h2.Add(1)
			default:
				h1.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}
	base, logs = startCoordinatorWith(t, pgtest.URL(t), protocols, count)
	return base, logs, h1, h2
}

// TestFleetFlags refuses settings that would measure nothing sensible.
func TestFleetFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--jobs", "0"},
		{"--jobs", "20000"},
		{"--participants", "0"},
		{"--jobs", "10000", "--participants", "10"},
		{"--interval", "2s", "--warmup", "3s"}, // the triggers have not all started
		{"--wait", "2m"},
		{"--duration", "2h"},
		{"--url", "ftp://x"},
		{"extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Fleet(context.Background(), args, nil, &stdout, &stderr); code != cli.ExitUsage {
			t.Errorf("fleet %v exited %d, want %d (usage):\n%s", args, code, cli.ExitUsage, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Fleet(context.Background(), []string{"--help"}, nil, &stdout, &stderr); code != cli.ExitOK || !strings.Contains(stdout.String(), "--idle") {
		t.Errorf("fleet --help exited %d:\n%s", code, stdout.String())
	}
}

func TestClassifyRequest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		method, url string
		want        int
	}{
		{"PUT", "http://h/v1/jobs/j", reqPutJob},
		{"POST", "http://h/v1/jobs/j/participants/p-0/register", reqRegister},
		{"GET", "http://h/v1/jobs/j/participants/p-0/pending?wait_ms=10000", reqPendingWait},
		{"GET", "http://h/v1/jobs/j/participants/p-0/pending", reqPending},
		{"POST", "http://h/v1/jobs/j/checkpoints", reqOpen},
		{"GET", "http://h/v1/jobs/j/checkpoints?limit=1000", reqListCheckpoints},
		{"GET", "http://h/v1/jobs/j/checkpoints/7?wait_ms=10000", reqCheckpointWait},
		{"GET", "http://h/v1/jobs/j/checkpoints/7", reqCheckpoint},
		{"PUT", "http://h/v1/jobs/j/checkpoints/7/votes/p-1", reqVote},
		{"PUT", "http://h/v1/jobs/j/checkpoints/7/acks/p-1", reqAck},
		{"GET", "http://h/v1/info", reqOther},
	} {
		r, _ := http.NewRequest(c.method, c.url, nil)
		if got := classifyRequest(r); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.url, reqKindNames[got], reqKindNames[c.want])
		}
	}
}

func TestProcCPU(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	st, err := readProcStat("self")
	if err != nil {
		t.Fatal(err)
	}
	if st.comm == "" {
		t.Errorf("no command name in /proc/self/stat")
	}
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Error(err)
	}
	if _, n, err := commandCPU("no-such-command-here"); err != nil || n != 0 {
		t.Errorf("commandCPU of no command: %d processes, %v", n, err)
	}
}
