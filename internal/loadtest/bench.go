// Package loadtest holds the commands of the coordinator binary that are tools, not the
// service: "coordinator bench" (Bench), a load tool that drives a running coordinator over
// HTTP the way real participants do, checks every answer and prints what it measured, and
// "coordinator seed" (Seed), which fills a PostgreSQL database with committed checkpoints
// for scale tests. It shares nothing with the serve code but internal/cli (flags with
// environment twins, exit statuses, password scrubbing) and, for seed, the PostgreSQL
// store's schema version.
//
// Their flags are their own; only --database-url / --pgbench-url read an environment twin
// (COORDINATOR_DATABASE_URL), so that serve never reports their settings as unknown.
package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twophase/coordinator/internal/cli"
)

// benchConfig is every setting of "coordinator bench".
type benchConfig struct {
	url   string
	token string // sent as a bearer token with every request
	full  bool   // full answers to votes and acks, not minimal ones
	// minimalWaiter has the decision waiter ask for the minimal view (the counts), as a
	// client that only needs the outcome does, instead of the full one.
	minimalWaiter bool
	// streams is how many event streams are held open while measuring, spread over the
	// jobs (GET /v1/jobs/{job}/events), each read to its end.
	streams           int
	jobs              int
	participants      int
	committablesBytes int
	// committablesRandom fills the committables with random base64, which neither the
	// coordinator's nor PostgreSQL's compression can shrink.
	committablesRandom bool
	duration           time.Duration
	rounds             int64
	warmup             time.Duration
	roundTimeout       time.Duration
	wait               time.Duration
	json               bool
	jobPrefix          string
	allowErrors        bool

	floor         bool
	http2         bool
	pgbenchURL    string
	pgbenchPath   string
	pgbenchScale  int
	fsyncDir      string
	fsyncDuration time.Duration

	rssPID      int
	rssInterval time.Duration

	// Set by parse: whether --duration was given (with --rounds it is then a cap).
	durationGiven bool
}

// Bounds of the bench settings.
const (
	maxBenchJobs         = 10000
	maxBenchParticipants = 1000
	maxCommittablesBytes = 16 << 20
)

// defineBench registers the flags of "coordinator bench" on a settings bound to cfg.
func defineBench(cfg *benchConfig) *cli.Settings {
	s := cli.NewSettings("bench")
	fs := s.FS
	flagOnly := s.FlagOnly

	fs.StringVar(&cfg.url, "url", "http://127.0.0.1:8080", "base `URL` of the running coordinator to drive")
	flagOnly("url")
	fs.StringVar(&cfg.token, "token", "", "`token` sent with every request (Authorization: Bearer), for a coordinator with authentication on: "+
		"one that may create jobs, open checkpoints and act as every participant, e.g. the admin token")
	flagOnly("token")
	fs.BoolVar(&cfg.http2, "http2", false, "speak HTTP/2 (h2c with prior knowledge to an http:// coordinator, negotiated over https://, as "+
		"coordinatorclient.Options.UnencryptedHTTP2 does) through net/http's client: the requests of every job share a few connections "+
		"instead of one connection each")
	flagOnly("http2")
	fs.BoolVar(&cfg.full, "full", false, "ask for full answers to votes and acks (every participant's entry), as curl gets them, instead of "+
		"minimal ones (Prefer: return=minimal: the voter's entry and the counts), as the client libraries ask")
	flagOnly("full")
	fs.BoolVar(&cfg.minimalWaiter, "minimal-waiter", false, "the decision waiter asks for the minimal view (Prefer: return=minimal, no participant: "+
		"status and counts of votes and acks), as a client that needs only the outcome does, instead of the full view with every "+
		"participant's committables; the checks then read the counts, and committables are not compared")
	flagOnly("minimal-waiter")
	fs.IntVar(&cfg.streams, "streams", 0, "hold this `number` of event streams open while measuring (GET /v1/jobs/{job}/events, spread over the jobs), "+
		"each read as it comes, to measure what watchers cost the rounds")
	flagOnly("streams")
	fs.IntVar(&cfg.jobs, "jobs", 16, "`number` of jobs driven concurrently, each running its rounds one after the other")
	flagOnly("jobs")
	fs.IntVar(&cfg.jobs, "concurrency", 16, "the same as --jobs (`number`)")
	flagOnly("concurrency")
	fs.IntVar(&cfg.participants, "participants", 2, "`number` of participants of each job (votes and acks per round)")
	flagOnly("participants")
	fs.IntVar(&cfg.committablesBytes, "committables-bytes", 64, "size in `bytes` of the committables JSON array each vote carries")
	flagOnly("committables-bytes")
	fs.BoolVar(&cfg.committablesRandom, "committables-random", false,
		"fill the committables with random base64 (incompressible) instead of one repeated byte")
	flagOnly("committables-random")
	cli.DurationVar(fs, &cfg.duration, "duration", 10*time.Second, "how long (`duration`) to measure, after the warm-up; with --rounds, a cap")
	flagOnly("duration")
	fs.Int64Var(&cfg.rounds, "rounds", 0, "measure this `number` of rounds (over all jobs) instead of a duration; 0: use --duration")
	flagOnly("rounds")
	cli.DurationVar(fs, &cfg.warmup, "warmup", time.Second, "`duration` of rounds run first and not counted in throughput or latency (errors still count)")
	flagOnly("warmup")
	cli.DurationVar(fs, &cfg.roundTimeout, "round-timeout", 10*time.Second, "longest a round may take (`duration`); a round not decided by then is a check failure")
	flagOnly("round-timeout")
	cli.DurationVar(fs, &cfg.wait, "wait", 10*time.Second, "wait_ms of each long-poll of the decision waiter (`duration`, at most 60s)")
	flagOnly("wait")
	fs.BoolVar(&cfg.json, "json", false, "print the report as one JSON object on stdout (the text report goes to stderr)")
	flagOnly("json")
	fs.StringVar(&cfg.jobPrefix, "job-prefix", "", "jobs are named `prefix`-0, prefix-1, ...; existing jobs are reused and continue their ids (seeded ones too)")
	flagOnly("job-prefix")
	fs.BoolVar(&cfg.allowErrors, "allow-errors", false, "exit 0 despite HTTP and transport errors (never despite a wrong answer)")
	flagOnly("allow-errors")

	fs.BoolVar(&cfg.floor, "floor", false, "after the run, measure the floor: pgbench simple-update (-N, as many clients as --jobs, as long as the run) and the fdatasync rate")
	flagOnly("floor")
	fs.StringVar(&cfg.pgbenchURL, "pgbench-url", "", "PostgreSQL `URL` of the server the coordinator uses, for --floor: a scratch database is created there and dropped after")
	s.Twin("pgbench-url", "COORDINATOR_DATABASE_URL")
	fs.StringVar(&cfg.pgbenchPath, "pgbench", "", "`path` of pgbench (default: on PATH, else /usr/lib/postgresql/*/bin/pgbench)")
	flagOnly("pgbench")
	fs.IntVar(&cfg.pgbenchScale, "pgbench-scale", 1, "pgbench -i scale `factor` of the scratch database")
	flagOnly("pgbench-scale")
	fs.StringVar(&cfg.fsyncDir, "fsync-dir", "", "`directory` of the fdatasync probe's temp file (default: next to the PostgreSQL data directory when it is local, else the temp directory)")
	flagOnly("fsync-dir")
	cli.DurationVar(fs, &cfg.fsyncDuration, "fsync-duration", 2*time.Second, "how long (`duration`) the fdatasync probe runs")
	flagOnly("fsync-duration")

	fs.IntVar(&cfg.rssPID, "rss-pid", 0, "sample the resident memory of this `process` (the coordinator) from /proc/PID/status while the bench runs, and report its CPU per round and per vote")
	flagOnly("rss-pid")
	cli.DurationVar(fs, &cfg.rssInterval, "rss-interval", 10*time.Second, "how often (`duration`) --rss-pid is sampled")
	flagOnly("rss-interval")
	return s
}

// namePattern is the protocol's pattern of job and participant names.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (cfg *benchConfig) validate(fs *flag.FlagSet) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	if j, ok := given["jobs"]; ok {
		if c, ok := given["concurrency"]; ok && c != j {
			bad("--jobs %s and --concurrency %s disagree (they are the same setting)", j, c)
		}
	}
	_, cfg.durationGiven = given["duration"]
	u, err := url.Parse(cfg.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("--url must be an http:// URL, like http://127.0.0.1:8080, not %q", cfg.url)
	}
	cfg.url = strings.TrimRight(cfg.url, "/")
	if cfg.jobs < 1 || cfg.jobs > maxBenchJobs {
		bad("--jobs must be from 1 to %d, not %d", maxBenchJobs, cfg.jobs)
	}
	if cfg.participants < 1 || cfg.participants > maxBenchParticipants {
		bad("--participants must be from 1 to %d, not %d", maxBenchParticipants, cfg.participants)
	}
	if cfg.streams < 0 || cfg.streams > 10000 {
		bad("--streams must be from 0 to 10000, not %d", cfg.streams)
	}
	if cfg.committablesBytes < 2 || cfg.committablesBytes > maxCommittablesBytes {
		bad("--committables-bytes must be from 2 (an empty array) to %d, not %d", maxCommittablesBytes, cfg.committablesBytes)
	}
	if cfg.duration <= 0 {
		bad("--duration must be positive, not %s", cfg.duration)
	}
	if cfg.rounds < 0 {
		bad("--rounds must be 0 or more, not %d", cfg.rounds)
	}
	if cfg.warmup < 0 {
		bad("--warmup must be 0 or more, not %s", cfg.warmup)
	}
	if cfg.roundTimeout < 10*time.Millisecond {
		bad("--round-timeout must be at least 10ms, not %s", cfg.roundTimeout)
	}
	if cfg.wait < time.Millisecond || cfg.wait > 60*time.Second {
		bad("--wait must be from 1ms to 60s, not %s", cfg.wait)
	}
	if cfg.jobPrefix == "" {
		cfg.jobPrefix = "bench-" + randomHex(3)
	}
	if !namePattern.MatchString(benchJobName(cfg.jobPrefix, maxBenchJobs)) {
		bad("--job-prefix %q does not make valid job names (letters, digits, '.', '_', '-'; at most 128 in all)", cfg.jobPrefix)
	}
	if cfg.floor && cfg.pgbenchURL == "" {
		bad("--floor needs --pgbench-url (or COORDINATOR_DATABASE_URL): the PostgreSQL server the coordinator uses")
	}
	if cfg.pgbenchURL != "" {
		if u, err := url.Parse(cfg.pgbenchURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			bad("--pgbench-url must be a postgres:// URL")
		}
	}
	if cfg.pgbenchScale < 1 {
		bad("--pgbench-scale must be at least 1, not %d", cfg.pgbenchScale)
	}
	if cfg.fsyncDuration <= 0 {
		bad("--fsync-duration must be positive, not %s", cfg.fsyncDuration)
	}
	if cfg.rssPID < 0 {
		bad("--rss-pid must be a process id, not %d", cfg.rssPID)
	}
	if cfg.rssInterval < 10*time.Millisecond {
		bad("--rss-interval must be at least 10ms, not %s", cfg.rssInterval)
	}
	return errors.Join(errs...)
}

// benchJobName and benchParticipantName are shared with "coordinator seed", so that a bench
// with the same --job-prefix drives the seeded jobs.
func benchJobName(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }

func benchParticipantName(i int) string { return fmt.Sprintf("p-%d", i) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// benchCommittables is the committables of a bench's votes: committablesJSON, or with
// random randomCommittablesJSON.
func benchCommittables(n int, random bool) []byte {
	if random {
		return randomCommittablesJSON(n)
	}
	return committablesJSON(n)
}

// randomCommittablesJSON returns a compact JSON array of exactly n bytes (n >= 2) whose
// string is random base64: what compression cannot shrink, as encrypted or already
// compressed handles would be.
func randomCommittablesJSON(n int) []byte {
	if n < 6 {
		return committablesJSON(n)
	}
	raw := make([]byte, (n-4)*3/4+3)
	_, _ = rand.Read(raw)
	text := base64.RawURLEncoding.EncodeToString(raw)[:n-4]
	return []byte(`["` + text + `"]`)
}

// committablesJSON returns a compact JSON array of exactly n bytes (n >= 2), as a
// participant's transaction handles would be.
func committablesJSON(n int) []byte {
	switch {
	case n == 2:
		return []byte("[]")
	case n < 6:
		return []byte("[" + strings.Repeat("1", n-2) + "]")
	}
	return []byte(`["` + strings.Repeat("x", n-4) + `"]`)
}

const benchUsageHeader = `coordinator bench: drive a running coordinator over HTTP as participants do, and measure.

Usage:
  coordinator bench [flags]

Each job runs rounds one after the other: prepare (POST .../checkpoints), the votes of its
participants in parallel while a waiter long-polls the checkpoint (GET ...?wait_ms=), then the
acks in parallel. Every answer is checked: ids one after the other, the decision commit seen by
the waiter only after the last vote was sent, committables returned as sent (with
--minimal-waiter: every vote counted as prepared), the checkpoint committed by the acks. A round that is not decided as expected fails the run, whatever
--allow-errors says. The report names the coordinator's build and store, as its
GET /v1/info tells them (a coordinator without it is warned of, and reported as unknown).

Flags of bench:
`

const benchUsageFooter = `
Exit status: 0 when every round was decided as expected and no request failed (or
--allow-errors), 1 otherwise, 2 on invalid flags.
`

// printFlags lists the flags of s in their order, with their environment twin if any.
func printFlags(w io.Writer, s *cli.Settings, defaults map[string]string) {
	for _, name := range s.Order {
		f := s.FS.Lookup(name)
		placeholder, text := cli.UnquoteUsage(f)
		head := "--" + f.Name
		if placeholder != "" {
			head += " " + placeholder
		}
		def, ok := defaults[name]
		if !ok {
			def = f.DefValue
			if def == "" {
				def = `""`
			}
		}
		if env := s.Envs[name]; env != "" {
			fmt.Fprintf(w, "  %-28s env %s (default %s)\n", head, env, def)
		} else {
			fmt.Fprintf(w, "  %-28s (default %s)\n", head, def)
		}
		fmt.Fprintf(w, "        %s\n", text)
	}
}

// Bench is "coordinator bench": it parses args (the arguments after "bench") and environ,
// drives the coordinator until the run is done or ctx ends, and returns the exit status
// (cli.ExitOK, cli.ExitFailure, cli.ExitUsage). Help and the report go to stdout (the text
// report to stderr with --json); progress and errors go to stderr.
func Bench(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	var cfg benchConfig
	s := defineBench(&cfg)
	rest, err := s.Parse(args, environ)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, benchUsageHeader)
		printFlags(stdout, s, map[string]string{"job-prefix": "bench-<random>", "pgbench-url": "none"})
		fmt.Fprint(stdout, benchUsageFooter)
		return cli.ExitOK
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil {
		err = cfg.validate(s.FS)
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordinator bench: %v\nRun 'coordinator bench --help' for usage.\n", err)
		return cli.ExitUsage
	}

	rep, err := runBench(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "coordinator bench: %s\n", cli.Scrub(err.Error(), cli.URLPassword(cfg.pgbenchURL)))
		if rep == nil {
			return cli.ExitFailure
		}
	}
	text := stdout
	if cfg.json {
		text = stderr
	}
	rep.writeText(text)
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "coordinator bench: write JSON: %v\n", err)
			return cli.ExitFailure
		}
	}
	if !rep.OK || err != nil {
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// runBench sets the jobs up, runs the warm-up and the measured rounds, and the floor when
// asked. It returns a report even when the floor failed (with the error); a nil report
// means nothing was measured (setup failed).
func runBench(ctx context.Context, cfg benchConfig, progress io.Writer) (*benchReport, error) {
	started := time.Now()
	client := newBenchClient(cfg.url)
	client.authorization = bearer(cfg.token)
	client.minimal = !cfg.full
	client.minimalWait = cfg.minimalWaiter
	if cfg.http2 {
		client.speakHTTP2()
	}
	defer client.close()

	var rss *rssSampler
	rssCtx, stopRSS := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRSS()
	var rssDone sync.WaitGroup
	if cfg.rssPID > 0 {
		if _, err := readRSS(cfg.rssPID); err != nil {
			return nil, fmt.Errorf("--rss-pid %d: %w", cfg.rssPID, err)
		}
		rss = &rssSampler{pid: cfg.rssPID, start: started}
		rssDone.Go(func() { rss.run(rssCtx, cfg.rssInterval, progress) })
	}

	target := readTarget(ctx, client, progress)
	fmt.Fprintf(progress, "bench: setting up %d jobs %s-0..%d with %d participants on %s: %s\n",
		cfg.jobs, cfg.jobPrefix, cfg.jobs-1, cfg.participants, cfg.url, target.describe())
	jobs, err := setupJobs(ctx, client, cfg)
	if err != nil {
		return nil, fmt.Errorf("set up the jobs: %w", err)
	}

	r := &benchRun{cfg: cfg, client: client, stats: newBenchStats(), target: target}
	watchers := watchStreams(ctx, cfg, jobs, client.tls)
	r.measure(ctx, jobs, progress)
	streamEvents := watchers.stop()
	if cfg.streams > 0 {
		fmt.Fprintf(progress, "bench: %d event streams open while measuring (%d failed to open), %d events received\n",
			cfg.streams, watchers.failed.Load(), streamEvents)
	}

	if rss != nil {
		stopRSS()
		rssDone.Wait()
	}
	rep := r.report(rss)
	rep.Streams, rep.StreamEvents = cfg.streams, streamEvents
	if !cfg.floor {
		return rep, nil
	}
	if ctx.Err() != nil {
		return rep, errors.New("interrupted: floor not measured")
	}
	seconds := int(rep.ElapsedSeconds + 0.999)
	if cfg.rounds == 0 || seconds < 1 {
		seconds = max(1, int(cfg.duration.Round(time.Second)/time.Second))
	}
	floor, err := measureFloor(ctx, cfg, cfg.jobs, seconds, progress)
	if floor != nil {
		if floor.PgbenchTPS > 0 {
			floor.Ratio = rep.StateChangesPerSecond / floor.PgbenchTPS
		}
		rep.Floor = floor
	}
	if err != nil {
		return rep, fmt.Errorf("floor: %w", err)
	}
	return rep, nil
}

// benchRun is one measurement: the jobs' workers share it.
type benchRun struct {
	cfg    benchConfig
	client *benchClient
	stats  *benchStats
	target targetInfo

	warmupEnd   time.Time // rounds that start from here on are measured
	stopAt      time.Time // no round starts from here on
	tickets     atomic.Int64
	interrupted bool // set when measure returns
	// The bench's own CPU use while measuring (warm-up included): on a machine it shares
	// with the coordinator and the database, it is CPU they did not get.
	cpu, wall time.Duration
	// coordinatorCPU is the CPU of the process of --rss-pid over the same time.
	coordinatorCPU time.Duration
	// For progress lines.
	roundsAll, roundsMeasured, errorsAll, checksAll atomic.Int64
}

// measure runs every job's worker until the duration (or the number of rounds) is done or
// ctx ends, printing a progress line every second.
func (r *benchRun) measure(ctx context.Context, jobs []*benchJob, progress io.Writer) {
	start := time.Now()
	r.warmupEnd = start.Add(r.cfg.warmup)
	limit := r.cfg.duration
	if r.cfg.rounds > 0 && !r.cfg.durationGiven {
		limit = 365 * 24 * time.Hour // until the rounds are done; each round is bounded
	}
	r.stopAt = r.warmupEnd.Add(limit)
	what := fmt.Sprintf("for %s", r.cfg.duration)
	if r.cfg.rounds > 0 {
		what = fmt.Sprintf("%d rounds", r.cfg.rounds)
	}
	fmt.Fprintf(progress, "bench: warm-up %s, then measuring %s\n", r.cfg.warmup, what)

	cpuStart := cpuTime()
	var coordinatorStart time.Duration
	if r.cfg.rssPID > 0 {
		coordinatorStart, _ = processCPU(r.cfg.rssPID)
	}
	var workers sync.WaitGroup
	for _, j := range jobs {
		workers.Go(func() { r.work(ctx, j) })
	}
	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prev int64
	prevAt := start
	for {
		select {
		case <-done:
			r.interrupted = ctx.Err() != nil
			r.cpu, r.wall = cpuTime()-cpuStart, time.Since(start)
			if r.cfg.rssPID > 0 {
				if end, err := processCPU(r.cfg.rssPID); err == nil && coordinatorStart > 0 {
					r.coordinatorCPU = end - coordinatorStart
				}
			}
			return
		case now := <-tick.C:
			measured := r.roundsMeasured.Load()
			phase, rate, avg := "warm-up", 0.0, 0.0
			if !now.Before(r.warmupEnd) {
				phase = "measure"
				from := prevAt
				if from.Before(r.warmupEnd) {
					from = r.warmupEnd
				}
				if d := now.Sub(from).Seconds(); d > 0 {
					rate = float64(measured-prev) / d
				}
				if d := now.Sub(r.warmupEnd).Seconds(); d > 0 {
					avg = float64(measured) / d
				}
			}
			fmt.Fprintf(progress, "bench: %5.0fs %-7s rounds %d (%.0f/s now, %.0f/s avg), all rounds %d, errors %d, check failures %d\n",
				now.Sub(start).Seconds(), phase, measured, rate, avg, r.roundsAll.Load(), r.errorsAll.Load(), r.checksAll.Load())
			prev, prevAt = measured, now
		}
	}
}

// work runs the rounds of one job, one after the other.
func (r *benchRun) work(ctx context.Context, j *benchJob) {
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(r.stopAt) {
			return
		}
		measured := !now.Before(r.warmupEnd)
		if measured && r.cfg.rounds > 0 && r.tickets.Add(1) > r.cfg.rounds {
			return
		}
		res := r.round(j)
		r.roundsAll.Add(1)
		r.errorsAll.Add(int64(len(res.errs)))
		r.checksAll.Add(int64(len(res.checks)))
		if measured && len(res.errs) == 0 && len(res.checks) == 0 {
			r.roundsMeasured.Add(1)
		}
		r.stats.record(&res, measured)
		if len(res.errs) > 0 || len(res.checks) > 0 {
			r.recoverJob(ctx, j, &res)
		}
	}
}
