package loadtest

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"
	"strings"
	"sync"
	"time"
)

// histogram counts durations in log-linear buckets: exact below 256ns, then 128 buckets per
// power of two, so a quantile read from it is at most 0.8% above the true value. Its size is
// fixed whatever the run's length, so a 30-minute run keeps the bench's memory flat too.
type histogram struct {
	counts []uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const (
	histLinear  = 256
	histSub     = 128
	histBuckets = histLinear + 56*histSub
)

func newHistogram() *histogram { return &histogram{counts: make([]uint64, histBuckets)} }

func histIndex(d time.Duration) int {
	v := int64(d)
	if v < histLinear {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 8 // v>>e is in [128, 256)
	return min(histLinear+(e-1)*histSub+int(v>>e)-histSub, histBuckets-1)
}

// histUpper is the largest duration bucket i counts.
func histUpper(i int) time.Duration {
	if i < histLinear {
		return time.Duration(i)
	}
	e := (i-histLinear)/histSub + 1
	m := int64((i-histLinear)%histSub + histSub)
	return time.Duration((m+1)<<e - 1)
}

func (h *histogram) add(d time.Duration) {
	h.counts[histIndex(d)]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

// quantile returns the q-quantile (0 < q <= 1), never above the maximum seen.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank && c > 0 {
			return min(histUpper(i), h.max)
		}
	}
	return h.max
}

// benchStats gathers the results of every round. Workers record a round at a time under
// the lock: a few thousand lock operations per second at most.
type benchStats struct {
	mu                           sync.Mutex
	rounds, failedRounds         int64 // measured rounds
	requests, stateChanges       int64 // of measured rounds
	lastVoterSawDecision         int64
	allRounds, allFailedRounds   int64 // warm-up included
	lastEnd                      time.Time
	hist                         map[string]*histogram
	errors, checks               map[string]int64
	errorExamples, checkExamples map[string]string
}

func newBenchStats() *benchStats {
	s := &benchStats{
		hist:   map[string]*histogram{},
		errors: map[string]int64{}, checks: map[string]int64{},
		errorExamples: map[string]string{}, checkExamples: map[string]string{},
	}
	for _, k := range latencyKinds {
		s.hist[k] = newHistogram()
	}
	return s
}

// record adds a round's results; measured says whether it started after the warm-up. A
// result without a start is the errors of a recovery.
func (s *benchStats) record(res *roundResult, measured bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range res.errs {
		s.errors[e.code]++
		if _, ok := s.errorExamples[e.code]; !ok {
			s.errorExamples[e.code] = e.detail
		}
	}
	for _, c := range res.checks {
		s.checks[c.kind]++
		if _, ok := s.checkExamples[c.kind]; !ok {
			s.checkExamples[c.kind] = c.detail
		}
	}
	if res.start.IsZero() {
		return
	}
	failed := len(res.errs) > 0 || len(res.checks) > 0
	s.allRounds++
	if failed {
		s.allFailedRounds++
	}
	if !measured {
		return
	}
	s.requests += int64(res.requests)
	s.stateChanges += int64(res.stateChanges)
	if failed {
		s.failedRounds++
	} else {
		s.rounds++
		if res.lastVoterSawDecision {
			s.lastVoterSawDecision++
		}
	}
	end := res.end
	if end.IsZero() {
		end = time.Now()
	}
	if end.After(s.lastEnd) {
		s.lastEnd = end
	}
	for _, smp := range res.samples {
		s.hist[smp.kind].add(smp.d)
	}
}

// benchReport is what "coordinator bench" prints, as text or as JSON.
type benchReport struct {
	URL               string `json:"url"`
	Build             string `json:"build"`      // the coordinator's version
	GoVersion         string `json:"go_version"` // the Go release it was built with
	Store             string `json:"store"`      // postgres or embedded
	Protocol          string `json:"protocol"`   // "HTTP/1.1", "HTTP/2" or "HTTP/2 (h2c)": what the bench spoke
	Jobs              int    `json:"jobs"`
	Participants      int    `json:"participants"`
	CommittablesBytes int    `json:"committables_bytes"`
	// Streams were held open while measuring (--streams), and received StreamEvents.
	Streams      int    `json:"streams,omitempty"`
	StreamEvents int64  `json:"stream_events,omitempty"`
	JobPrefix    string `json:"job_prefix"`

	WarmupSeconds  float64 `json:"warmup_seconds"`
	ElapsedSeconds float64 `json:"elapsed_seconds"` // from the end of the warm-up to the end of the last measured round
	Interrupted    bool    `json:"interrupted"`

	Rounds                int64   `json:"rounds"`
	FailedRounds          int64   `json:"failed_rounds"`
	RoundsPerSecond       float64 `json:"rounds_per_second"`
	Requests              int64   `json:"requests"`
	RequestsPerSecond     float64 `json:"requests_per_second"`
	StateChanges          int64   `json:"state_changes"`
	StateChangesPerSecond float64 `json:"state_changes_per_second"`

	Latency map[string]latencySummary `json:"latency_ms"`
	// LastVoterSawDecision is the share of rounds in which the answer to the vote sent
	// last already carried the decision (committing).
	LastVoterSawDecision float64 `json:"last_voter_saw_decision"`

	Errors        map[string]int64  `json:"errors"`
	ErrorExamples map[string]string `json:"error_examples,omitempty"`
	CheckFailures map[string]int64  `json:"check_failures"`
	CheckExamples map[string]string `json:"check_examples,omitempty"`
	AllRounds     int64             `json:"all_rounds"` // warm-up included
	AllFailed     int64             `json:"all_failed_rounds"`

	// BenchCPUCores is the CPU the bench itself used while it ran (warm-up included), in
	// cores: on a shared machine, CPU the coordinator and the database did not get.
	BenchCPUCores float64 `json:"bench_cpu_cores"`
	// VotesPerSecond is RoundsPerSecond times the participants: the votes the rounds took.
	VotesPerSecond float64 `json:"votes_per_second"`
	// The coordinator's CPU (with --rss-pid, its process) over the whole run, warm-up
	// included, per round and per vote of the whole run; 0 without a pid.
	CoordinatorCPUCores      float64 `json:"coordinator_cpu_cores,omitempty"`
	CoordinatorCPUPerRoundMS float64 `json:"coordinator_cpu_per_round_ms,omitempty"`
	CoordinatorCPUPerVoteMS  float64 `json:"coordinator_cpu_per_vote_ms,omitempty"`

	Floor *floorReport `json:"floor,omitempty"`
	RSS   *rssReport   `json:"rss,omitempty"`

	OK      bool   `json:"ok"`
	Verdict string `json:"verdict"`
}

type latencySummary struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func (r *benchRun) report(rss *rssSampler) *benchReport {
	s := r.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := &benchReport{
		URL: r.cfg.url, Build: r.target.Version, GoVersion: r.target.GoVersion, Store: r.target.Store,
		Protocol: protocolName(r.cfg.http2, r.cfg.url),
		Jobs:     r.cfg.jobs, Participants: r.cfg.participants, CommittablesBytes: r.cfg.committablesBytes, JobPrefix: r.cfg.jobPrefix,
		WarmupSeconds: r.cfg.warmup.Seconds(),
		Rounds:        s.rounds, FailedRounds: s.failedRounds, Requests: s.requests, StateChanges: s.stateChanges,
		Latency: map[string]latencySummary{},
		Errors:  s.errors, ErrorExamples: s.errorExamples, CheckFailures: s.checks, CheckExamples: s.checkExamples,
		AllRounds: s.allRounds, AllFailed: s.allFailedRounds,
	}
	end := s.lastEnd
	if end.IsZero() {
		end = time.Now()
		if end.After(r.stopAt) {
			end = r.stopAt
		}
	}
	if elapsed := end.Sub(r.warmupEnd); elapsed > 0 {
		rep.ElapsedSeconds = elapsed.Seconds()
		rep.RoundsPerSecond = float64(s.rounds) / elapsed.Seconds()
		rep.RequestsPerSecond = float64(s.requests) / elapsed.Seconds()
		rep.StateChangesPerSecond = float64(s.stateChanges) / elapsed.Seconds()
	}
	for _, k := range latencyKinds {
		h := s.hist[k]
		sum := latencySummary{Count: h.n, P50: ms(h.quantile(0.5)), P90: ms(h.quantile(0.9)), P99: ms(h.quantile(0.99)), Max: ms(h.max)}
		if h.n > 0 {
			sum.Mean = ms(h.sum / time.Duration(h.n))
		}
		rep.Latency[k] = sum
	}
	if s.rounds > 0 {
		rep.LastVoterSawDecision = float64(s.lastVoterSawDecision) / float64(s.rounds)
	}
	if rss != nil {
		rep.RSS = rss.report()
	}
	if r.wall > 0 {
		rep.BenchCPUCores = r.cpu.Seconds() / r.wall.Seconds()
	}
	rep.VotesPerSecond = rep.RoundsPerSecond * float64(r.cfg.participants)
	if r.coordinatorCPU > 0 && r.wall > 0 && s.allRounds > 0 {
		rep.CoordinatorCPUCores = r.coordinatorCPU.Seconds() / r.wall.Seconds()
		rep.CoordinatorCPUPerRoundMS = ms(r.coordinatorCPU / time.Duration(s.allRounds))
		rep.CoordinatorCPUPerVoteMS = ms(r.coordinatorCPU / time.Duration(s.allRounds*int64(r.cfg.participants)))
	}
	rep.Interrupted = r.interrupted

	var checks, errs int64
	for _, n := range s.checks {
		checks += n
	}
	for _, n := range s.errors {
		errs += n
	}
	switch {
	case checks > 0:
		rep.Verdict = fmt.Sprintf("FAILED: %d answers were not what the protocol requires", checks)
	case errs > 0 && !r.cfg.allowErrors:
		rep.Verdict = fmt.Sprintf("FAILED: %d requests failed (--allow-errors to accept)", errs)
	case s.rounds == 0:
		rep.Verdict = "FAILED: no round completed in the measured time"
	default:
		rep.OK = true
		rep.Verdict = "OK: every round decided commit as expected"
		if errs > 0 {
			rep.Verdict += fmt.Sprintf(" (%d requests failed, allowed)", errs)
		}
	}
	return rep
}

var latencyLabels = map[string]string{
	latRound:    "round (prepare..last ack)",
	latDecision: "last vote -> decision seen",
	latPrepare:  "prepare",
	latVote:     "vote",
	latWait:     "long-poll",
	latAck:      "ack",
}

func (rep *benchReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "\ncoordinator bench: %s over %s, %d jobs x %d participants, committables %d B, %s\n",
		rep.URL, rep.Protocol, rep.Jobs, rep.Participants, rep.CommittablesBytes, describeTarget(rep.Build, rep.GoVersion, rep.Store))
	fmt.Fprintf(w, "measured %.2fs after a %.1fs warm-up%s\n", rep.ElapsedSeconds, rep.WarmupSeconds, map[bool]string{true: " (interrupted)"}[rep.Interrupted])
	fmt.Fprintf(w, "  rounds          %9d  %10.1f /s   (%d failed)\n", rep.Rounds, rep.RoundsPerSecond, rep.FailedRounds)
	fmt.Fprintf(w, "  HTTP requests   %9d  %10.1f /s\n", rep.Requests, rep.RequestsPerSecond)
	fmt.Fprintf(w, "  state changes   %9d  %10.1f /s   (prepares + votes + acks)\n", rep.StateChanges, rep.StateChangesPerSecond)
	fmt.Fprintf(w, "  votes                      %10.1f /s\n", rep.VotesPerSecond)
	if rep.CoordinatorCPUCores > 0 {
		fmt.Fprintf(w, "  coordinator CPU %9.2f cores, %.3f ms per round, %.3f ms per vote (whole run)\n",
			rep.CoordinatorCPUCores, rep.CoordinatorCPUPerRoundMS, rep.CoordinatorCPUPerVoteMS)
	}
	fmt.Fprintf(w, "  latency ms                      count       p50       p90       p99       max\n")
	for _, k := range latencyKinds {
		l := rep.Latency[k]
		fmt.Fprintf(w, "    %-28s %9d %9.3f %9.3f %9.3f %9.3f\n", latencyLabels[k], l.Count, l.P50, l.P90, l.P99, l.Max)
	}
	fmt.Fprintf(w, "  the last voter's own answer already carried the decision in %.1f%% of rounds\n", 100*rep.LastVoterSawDecision)
	if rep.BenchCPUCores > 0 {
		fmt.Fprintf(w, "  the bench itself used %.2f CPU cores\n", rep.BenchCPUCores)
	}
	writeCounts(w, "errors", rep.Errors, rep.ErrorExamples)
	writeCounts(w, "check failures", rep.CheckFailures, rep.CheckExamples)
	if f := rep.Floor; f != nil {
		fmt.Fprintf(w, "  floor: pgbench -N, %d clients, %ds: %.1f tps; ratio state changes/s / pgbench tps = %.2f\n",
			f.PgbenchClients, f.PgbenchSeconds, f.PgbenchTPS, f.Ratio)
		if f.FsyncPerSecond > 0 {
			fmt.Fprintf(w, "  floor: write+fdatasync of 8 KiB: %.0f flushes/s in %s%s\n", f.FsyncPerSecond, f.FsyncDir, f.FsyncNote)
		}
	}
	if rss := rep.RSS; rss != nil {
		fmt.Fprintf(w, "  coordinator RSS (pid %d): first %.1f MiB, min %.1f, max %.1f, last %.1f MiB over %.0fs\n",
			rss.PID, mib(rss.FirstKiB), mib(rss.MinKiB), mib(rss.MaxKiB), mib(rss.LastKiB), rss.Samples[len(rss.Samples)-1].Seconds)
		step := max(1, len(rss.Samples)/20)
		for i, smp := range rss.Samples {
			if i%step == 0 || i == len(rss.Samples)-1 {
				fmt.Fprintf(w, "    t=%7.0fs  %8.1f MiB\n", smp.Seconds, mib(smp.KiB))
			}
		}
	}
	fmt.Fprintf(w, "%s\n", rep.Verdict)
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func writeCounts(w io.Writer, what string, counts map[string]int64, examples map[string]string) {
	if len(counts) == 0 {
		fmt.Fprintf(w, "  %s: none\n", what)
		return
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "  %s:\n", what)
	for _, k := range keys {
		fmt.Fprintf(w, "    %-28s %9d   e.g. %s\n", k, counts[k], strings.TrimSpace(examples[k]))
	}
}
