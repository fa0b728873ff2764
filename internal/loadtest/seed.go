package loadtest

// "coordinator seed": fills a PostgreSQL database with completed checkpoints, for scale
// tests ("is a round as fast with a million checkpoints behind it?"). It writes to the
// database directly with SQL, not through the API: a million rounds over HTTP would take
// longer than the test.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/internal/cli"
	"github.com/twophase/coordinator/store/postgres"
)

// seedConfig is every setting of "coordinator seed".
type seedConfig struct {
	databaseURL       string
	checkpoints       int64
	jobs              int
	jobPrefix         string
	participants      int
	committablesBytes int
	batch             int64
	analyze           bool
}

func defineSeed(cfg *seedConfig) *cli.Settings {
	s := cli.NewSettings("seed")
	fs := s.FS
	flagOnly := s.FlagOnly
	fs.StringVar(&cfg.databaseURL, "database-url", "", "PostgreSQL `URL` of the coordinator's database (migrated to this build's schema)")
	s.Twin("database-url", "COORDINATOR_DATABASE_URL")
	fs.Int64Var(&cfg.checkpoints, "checkpoints", 0, "`number` of committed checkpoints to add, spread evenly over the jobs")
	flagOnly("checkpoints")
	fs.IntVar(&cfg.jobs, "jobs", 1, "`number` of jobs the checkpoints go to: prefix-0, prefix-1, ...")
	flagOnly("jobs")
	fs.StringVar(&cfg.jobPrefix, "job-prefix", "seed", "job names are `prefix`-0, ...; the same as a later 'coordinator bench --job-prefix' to drive these very jobs")
	flagOnly("job-prefix")
	fs.IntVar(&cfg.participants, "participants", 2, "`number` of participants of each job (p-0, p-1, ..., as the bench names them)")
	flagOnly("participants")
	fs.IntVar(&cfg.committablesBytes, "committables-bytes", 64, "size in `bytes` of each vote's committables")
	flagOnly("committables-bytes")
	fs.Int64Var(&cfg.batch, "batch", 100000, "checkpoints per transaction (`number`)")
	flagOnly("batch")
	fs.BoolVar(&cfg.analyze, "analyze", true, "VACUUM ANALYZE the checkpoint tables at the end, as autovacuum would in time")
	flagOnly("analyze")
	return s
}

func (cfg *seedConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if u, err := url.Parse(cfg.databaseURL); cfg.databaseURL == "" || err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		bad("--database-url must be a postgres:// URL (seed writes to PostgreSQL only, not to the embedded store)")
	}
	if cfg.checkpoints < 1 {
		bad("--checkpoints must be at least 1, not %d", cfg.checkpoints)
	}
	if cfg.jobs < 1 || cfg.jobs > maxBenchJobs {
		bad("--jobs must be from 1 to %d, not %d", maxBenchJobs, cfg.jobs)
	}
	if !namePattern.MatchString(benchJobName(cfg.jobPrefix, maxBenchJobs)) {
		bad("--job-prefix %q does not make valid job names", cfg.jobPrefix)
	}
	if cfg.participants < 1 || cfg.participants > maxBenchParticipants {
		bad("--participants must be from 1 to %d, not %d", maxBenchParticipants, cfg.participants)
	}
	if cfg.committablesBytes < 2 || cfg.committablesBytes > maxCommittablesBytes {
		bad("--committables-bytes must be from 2 to %d, not %d", maxCommittablesBytes, cfg.committablesBytes)
	}
	if cfg.batch < 1 {
		bad("--batch must be at least 1, not %d", cfg.batch)
	}
	return errors.Join(errs...)
}

const seedUsageHeader = `coordinator seed: add committed checkpoints to a PostgreSQL database, fast.

Usage:
  coordinator seed --database-url postgres://... --checkpoints N [flags]

It writes to the database DIRECTLY with SQL (generate_series, a few big INSERT ... SELECT per
job), not through the API, keeping each job's id sequence (jobs.seq) consistent: the next
prepare of a seeded job opens the checkpoint after the seeded ones. Jobs are created when
missing (their participants registered at epoch 1); an existing job must have the same
participants and no checkpoint preparing or committing. A coordinator may run meanwhile.
Meant for scale tests on a test database, never on production data.

Flags of seed:
`

// Seed is "coordinator seed": it parses args (the arguments after "seed") and environ,
// adds the checkpoints and returns the exit status (cli.ExitOK, cli.ExitFailure,
// cli.ExitUsage). Help and progress go to stdout; errors go to stderr.
func Seed(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	var cfg seedConfig
	s := defineSeed(&cfg)
	rest, err := s.Parse(args, environ)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, seedUsageHeader)
		printFlags(stdout, s, map[string]string{"database-url": "none"})
		return cli.ExitOK
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil {
		err = cfg.validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordinator seed: %v\nRun 'coordinator seed --help' for usage.\n", err)
		return cli.ExitUsage
	}
	if err := seed(ctx, cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "coordinator seed: %s\n", cli.Scrub(err.Error(), cli.URLPassword(cfg.databaseURL)))
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// seed adds cfg.checkpoints committed checkpoints, spread over cfg.jobs jobs.
func seed(ctx context.Context, cfg seedConfig, w io.Writer) error {
	version, dirty, err := postgres.MigrationVersion(cfg.databaseURL)
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if dirty || version != postgres.SchemaVersion {
		return fmt.Errorf("the schema is at version %d (dirty: %v); this build writes version %d: run 'coordinator migrate up'", version, dirty, postgres.SchemaVersion)
	}
	conn, err := pgx.Connect(ctx, cfg.databaseURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", cli.RedactURL(cfg.databaseURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	participants := make([]string, cfg.participants)
	for i := range participants {
		participants[i] = benchParticipantName(i)
	}
	committables := string(committablesJSON(cfg.committablesBytes))
	started := time.Now()
	for i := range cfg.jobs {
		n := cfg.checkpoints / int64(cfg.jobs)
		if int64(i) < cfg.checkpoints%int64(cfg.jobs) {
			n++
		}
		if n == 0 {
			continue
		}
		name := benchJobName(cfg.jobPrefix, i)
		if err := seedJob(ctx, conn, cfg, name, participants, committables, n, w); err != nil {
			return fmt.Errorf("job %s: %w", name, err)
		}
	}
	took := time.Since(started)
	fmt.Fprintf(w, "seed: %d committed checkpoints in %d jobs %s-0.. in %.1fs (%.0f/s)\n",
		cfg.checkpoints, cfg.jobs, cfg.jobPrefix, took.Seconds(), float64(cfg.checkpoints)/took.Seconds())
	if cfg.analyze {
		start := time.Now()
		if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) checkpoints, checkpoint_participants"); err != nil {
			return fmt.Errorf("vacuum analyze: %w", err)
		}
		fmt.Fprintf(w, "seed: VACUUM (ANALYZE) in %.1fs\n", time.Since(start).Seconds())
	}
	return nil
}

// seedJob creates the job if needed and appends n committed checkpoints to it, in
// transactions of cfg.batch checkpoints that each move jobs.seq along.
func seedJob(ctx context.Context, conn *pgx.Conn, cfg seedConfig, name string, participants []string, committables string, n int64, w io.Writer) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO jobs (name, participants, checkpoint_timeout_ms, max_concurrent_checkpoints, auto_commit, created_at, updated_at)
			VALUES ($1, $2, 60000, 1, true, clock_timestamp(), clock_timestamp())
			ON CONFLICT (name) DO NOTHING`, name, participants); err != nil {
			return err
		}
		var have []string
		var deleted bool
		if err := tx.QueryRow(ctx, "SELECT participants, deleted FROM jobs WHERE name = $1 FOR UPDATE", name).Scan(&have, &deleted); err != nil {
			return err
		}
		if deleted {
			return errors.New("the job was deleted; seed another job prefix")
		}
		if !slices.Equal(have, participants) {
			return fmt.Errorf("the job has participants %v, not %v", have, participants)
		}
		var open bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM checkpoints WHERE job = $1 AND status IN ('preparing', 'committing'))", name).Scan(&open); err != nil {
			return err
		}
		if open {
			return errors.New("the job has a checkpoint preparing or committing: finish it first")
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO participant_epochs (job, participant, epoch)
			SELECT $1, p, 1 FROM unnest($2::text[]) AS p
			ON CONFLICT (job, participant) DO NOTHING`, name, participants)
		return err
	})
	if err != nil {
		return err
	}

	// History in the past, 5 ms apart, ending a minute ago.
	const spacing = 5 * time.Millisecond
	base := time.Now().Add(-time.Minute - time.Duration(n)*spacing)
	for done := int64(0); done < n; {
		size := min(cfg.batch, n-done)
		start := time.Now()
		var lo int64
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var seq int64
			if err := tx.QueryRow(ctx, "SELECT seq FROM jobs WHERE name = $1 FOR UPDATE", name).Scan(&seq); err != nil {
				return err
			}
			lo = seq + 1
			hi := seq + size
			t0 := base.Add(time.Duration(done) * spacing)
			if _, err := tx.Exec(ctx, `
				INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at)
				SELECT $1, g, 'committed', true, x.t, x.t + interval '60 seconds', x.t + interval '2 milliseconds', x.t + interval '4 milliseconds'
				FROM generate_series($2::bigint, $3::bigint) AS g
				CROSS JOIN LATERAL (SELECT $4::timestamptz + (g - $2::bigint) * interval '5 milliseconds') AS x(t)`,
				name, lo, hi, t0); err != nil {
				return fmt.Errorf("insert checkpoints %d..%d: %w", lo, hi, err)
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant, epoch, vote, committables, voted_at, acked_at)
				SELECT $1, g, p.ord::integer, p.name, e.epoch, 'prepared', $5, x.t + interval '1 millisecond', x.t + interval '3 milliseconds'
				FROM generate_series($2::bigint, $3::bigint) AS g
				CROSS JOIN unnest($6::text[]) WITH ORDINALITY AS p(name, ord)
				JOIN participant_epochs e ON e.job = $1 AND e.participant = p.name
				CROSS JOIN LATERAL (SELECT $4::timestamptz + (g - $2::bigint) * interval '5 milliseconds') AS x(t)`,
				name, lo, hi, t0, committables, participants); err != nil {
				return fmt.Errorf("insert the votes of checkpoints %d..%d: %w", lo, hi, err)
			}
			_, err := tx.Exec(ctx, "UPDATE jobs SET seq = $2, version = version + 1 WHERE name = $1", name, hi)
			return err
		})
		if err != nil {
			return err
		}
		done += size
		fmt.Fprintf(w, "seed: %s checkpoints %d..%d in %.1fs\n", name, lo, lo+size-1, time.Since(start).Seconds())
	}
	return nil
}
