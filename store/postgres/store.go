// Package postgres is the coordinator's store on PostgreSQL, through a pgx pool. Any number
// of coordinator processes may share one database: every change to a job happens in one
// transaction holding the job's row lock, and decisions are announced to the other
// processes with NOTIFY in the same transaction.
package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/writehealth"
)

// channel is the NOTIFY channel on which decisions are announced, payload "origin job/id",
// and the other changes that can make something owed (a checkpoint opened, a participant
// registered, the job changed or deleted), payload "origin job/0": origin names the process
// that made the change, which wakes its own waiters itself (Publish).
const channel = "coordinator_decisions"

// lockTimeout bounds every lock wait of the store's connections (PostgreSQL's lock_timeout,
// unless the database URL sets one): a statement that would wait longer for a lock another
// transaction holds fails instead (DESIGN.md, invariant 12).
const lockTimeout = "50ms"

// Options tune the store.
type Options struct {
	// MaxConns bounds the pool (default: pgxpool's, 4 or the number of CPUs).
	MaxConns int32
	// Writers is how many group commits may be in flight at once (default 2); a job is in
	// one at a time, and one starts beside the running ones only once the latest has run
	// a while (overlapAfter). Fewer writers make larger transactions (less CPU per update,
	// the updates that come during a commit wait for the next); more overlap commits.
	Writers int
	// MaxBatch bounds how many updates one group commit takes (default 64).
	MaxBatch int
	Logger   *slog.Logger
	// ObserveCommit, when set, is told how long each group commit that committed took.
	ObserveCommit func(time.Duration)
}

// Store implements coordinator.Store on PostgreSQL.
type Store struct {
	pool      *pgxpool.Pool
	logger    *slog.Logger
	committer *committer
	closeOnce sync.Once
	broker    coordinator.Broker
	cancel    context.CancelFunc
	listened  chan struct{}
	origin    string             // this process's name in announcements
	health    writehealth.Record // what the writes met, for Ready
	observe   func(time.Duration)

	owingReads atomic.Int64 // Owing's reads of what is owed (viewSQL), for tests
}

var _ coordinator.Store = (*Store)(nil)

// Open connects to the database at url (a postgres:// URL) and starts listening for
// decisions taken by other processes. The schema must already be migrated (MigrateUp).
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if _, set := cfg.ConnConfig.RuntimeParams["lock_timeout"]; !set {
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = lockTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	s := &Store{pool: pool, logger: opts.Logger, cancel: cancel, listened: make(chan struct{}), origin: rand.Text(), observe: opts.ObserveCommit,
		health: writehealth.Record{Classify: storageFailure}}
	s.committer = newCommitter(s, opts.Writers, opts.MaxBatch)
	go s.listen(lctx, cfg.ConnConfig.Copy())
	return s, nil
}

// Close stops listening, answers queued updates with ErrUnavailable and closes the pool.
// It may be called more than once.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.listened
		s.committer.close()
		s.pool.Close()
	})
}

// listen relays the decisions other processes announce to this process's waiters. After
// any interruption it wakes every waiter, since announcements may have been missed.
func (s *Store) listen(ctx context.Context, cfg *pgx.ConnConfig) {
	defer close(s.listened)
	var backoff reconnectBackoff
	var drops dropLog
	for ctx.Err() == nil {
		listenedFor, err := s.listenOnce(ctx, cfg)
		s.broker.NotifyAll()
		if ctx.Err() != nil {
			return
		}
		wait := backoff.next(listenedFor)
		if n, warn := drops.note(time.Now(), listenedFor); warn {
			s.logger.Warn("decision listener interrupted; reconnecting", "error", err, "backoff", wait, "interruptions", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// dropLog rate-limits the listener's warnings while its connection keeps dropping (the
// database down, say): the first drop after a good connection warns at once, and then one
// warning every listenWarnEvery, with the count of drops since that good connection.
type dropLog struct {
	count    int
	warnedAt time.Time
}

// listenWarnEvery is how often a listener that keeps losing its connection says so.
const listenWarnEvery = 30 * time.Second

// note counts a drop at now, of a connection that had listened for listenedFor, and says
// whether to warn of it, with the count.
func (d *dropLog) note(now time.Time, listenedFor time.Duration) (int, bool) {
	if listenedFor >= maxReconnectBackoff {
		*d = dropLog{} // the connection was good: a new run of drops
	}
	d.count++
	if d.count == 1 || now.Sub(d.warnedAt) >= listenWarnEvery {
		d.warnedAt = now
		return d.count, true
	}
	return d.count, false
}

// The listener's waits before reconnecting.
const (
	minReconnectBackoff = 100 * time.Millisecond
	maxReconnectBackoff = 2 * time.Second
)

// reconnectBackoff is how long the listener waits before it connects again: from
// minReconnectBackoff, doubling after each connection that failed, up to
// maxReconnectBackoff, and from minReconnectBackoff again once a connection was good.
//
// Good means it listened for at least maxReconnectBackoff, not merely that its LISTEN went
// through: every reconnection wakes every waiter to re-read (listen), so a connection that
// a proxy or a server cuts right after each LISTEN must not make the listener reconnect,
// and the waiters re-read, every minReconnectBackoff. So the listener reconnects at most
// about once per maxReconnectBackoff for as long as connections keep dropping, and is back
// within minReconnectBackoff after the drop of a good one. The zero value is ready to use.
type reconnectBackoff struct {
	wait time.Duration // the next wait; 0 means minReconnectBackoff
}

// next returns the wait before the next attempt, the last connection having listened for
// listenedFor (0: it never got its LISTEN through).
func (b *reconnectBackoff) next(listenedFor time.Duration) time.Duration {
	if listenedFor >= maxReconnectBackoff {
		b.wait = 0
	}
	wait := max(b.wait, minReconnectBackoff)
	b.wait = min(wait*2, maxReconnectBackoff)
	return wait
}

// listenOnce connects, listens and relays announcements until the connection fails or ctx
// ends. It returns how long it listened: 0 if it never got its LISTEN through.
func (s *Store) listenOnce(ctx context.Context, cfg *pgx.ConnConfig) (time.Duration, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, listenSQL); err != nil {
		return 0, err
	}
	listening := time.Now()
	// Waiters that subscribed while the listener was down re-read now.
	s.committer.cache.listen(true)
	defer s.committer.cache.listen(false)
	s.broker.NotifyAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return time.Since(listening), err
		}
		origin, key, ok := strings.Cut(n.Payload, " ")
		if !ok {
			key = n.Payload // from a coordinator that does not name itself
		}
		if origin != s.origin {
			if job, _, ok := strings.Cut(key, "/"); ok {
				s.committer.cache.heardForeign(job)
			}
			s.broker.NotifyKey(key)
		}
	}
}

// KnownPreparing implements coordinator.PreparingKnower: see stateCache.knownPreparing.
func (s *Store) KnownPreparing(job string, id int64) bool {
	return s.committer.cache.knownPreparing(job, id)
}

// KnownDecided implements coordinator.DecisionKnower: see stateCache.knownDecided.
func (s *Store) KnownDecided(job string, id int64) *coordinator.Checkpoint {
	return s.committer.cache.knownDecided(job, id)
}

// KnownVersion implements coordinator.VersionKnower: see stateCache.knownVersion.
func (s *Store) KnownVersion(job string) (int64, bool) {
	return s.committer.cache.knownVersion(job)
}

// KnownOwing implements coordinator.OwingKnower: see stateCache.knownOwing.
func (s *Store) KnownOwing(job string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, bool) {
	return s.committer.cache.knownOwing(job)
}

// Subscribe implements coordinator.Store.
func (s *Store) Subscribe(job string, id int64) *coordinator.Subscription {
	return s.broker.Subscribe(job, id)
}

// readOnlySQL reads whether the database refuses writes: a standby in recovery, or
// transactions read-only by default (default_transaction_read_only, which a standby also
// shows as on).
const readOnlySQL = "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'"

// Ready implements coordinator.Store: the database answers, the schema is current, the
// database accepts writes (it is no standby, its transactions are not read-only by
// default) and no write failed for want of storage or on a read-only database in the last
// writehealth.Hold. It writes nothing itself. Otherwise it returns an
// error wrapping coordinator.ErrUnavailable whose message says which.
func (s *Store) Ready(ctx context.Context) error {
	var version int64
	var dirty bool
	err := s.pool.QueryRow(ctx, schemaVersionSQL).Scan(&version, &dirty)
	if err != nil {
		return translate(fmt.Errorf("read schema version: %w", err))
	}
	if dirty || uint(version) != SchemaVersion {
		note := ""
		if dirty {
			note = " (dirty: a migration failed half-way)"
		}
		return &coordinator.Error{Code: coordinator.CodeUnavailable,
			Message: fmt.Sprintf("the schema is at version %d%s, this build needs %d", version, note, SchemaVersion),
			Err:     fmt.Errorf("schema version %d (dirty %v), want %d", version, dirty, SchemaVersion)}
	}
	var recovery, readOnly bool
	if err := s.pool.QueryRow(ctx, readOnlySQL).Scan(&recovery, &readOnly); err != nil {
		return translate(fmt.Errorf("read whether the database is read-only: %w", err))
	}
	switch {
	case recovery:
		return &coordinator.Error{Code: coordinator.CodeUnavailable,
			Message: "the database cannot be written: it is a standby in recovery (pg_is_in_recovery)",
			Err:     errors.New("pg_is_in_recovery() is true")}
	case readOnly:
		return &coordinator.Error{Code: coordinator.CodeUnavailable,
			Message: "the database cannot be written: its transactions are read-only (default_transaction_read_only)",
			Err:     errors.New("transaction_read_only is on")}
	}
	return s.health.Check()
}

// Update implements coordinator.Store. Updates are group-committed: see committer.
func (s *Store) Update(ctx context.Context, job string, checkpoint int64, fn func(tx coordinator.JobTx) error) error {
	err := s.committer.update(ctx, job, checkpoint, fn)
	s.health.Note(err)
	return err
}

// View implements coordinator.Store.
func (s *Store) View(ctx context.Context, job string, fn func(tx coordinator.JobTx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return translate(fmt.Errorf("acquire connection: %w", err))
	}
	defer conn.Release()
	err = s.view(ctx, conn.Conn(), job, fn)
	if err != nil && !coordinator.IsRejection(err) {
		// The transaction may be open still; a connection in an unknown state is not reused.
		if _, rbErr := conn.Exec(context.Background(), "ROLLBACK"); rbErr != nil {
			conn.Conn().Close(context.Background()) //nolint:errcheck
		}
	}
	return translate(err)
}

// Owing implements coordinator.Store. When the cache holds every checkpoint of the job on
// which anything is owed (KnownOwing), it reads only the job's version and the clock: while
// the version is the cached one, the cached state is what the database holds (DESIGN.md,
// invariants 1 and 15), and it is the answer. Otherwise, or when the version moved, it
// reads with viewSQL alone, outside any transaction: one statement sees one snapshot, so
// it needs neither BEGIN nor COMMIT, and costs one round trip.
func (s *Store) Owing(ctx context.Context, job, participant string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, error) {
	if j, _, owing, ok := s.committer.cache.knownOwing(job); ok {
		var version int64
		var now time.Time
		err := s.pool.QueryRow(ctx, jobVersionSQL, job).Scan(&version, &now)
		switch {
		case err == nil && version == j.Version:
			return j, now.UTC(), coordinator.OwingOf(owing, participant), nil
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return nil, time.Time{}, nil, translate(fmt.Errorf("read the version of %s: %w", job, err))
		}
		// Changed (or deleted) since: read it.
	}
	s.owingReads.Add(1)
	var row viewRow
	var found bool
	rows, err := s.pool.Query(ctx, viewSQL, job)
	if err != nil {
		return nil, time.Time{}, nil, translate(fmt.Errorf("read what %s/%s owes: %w", job, participant, err))
	}
	cps, err := scanCheckpoints(&rowsSeen{Rows: rows, seen: &found}, row.dest()...)
	if err != nil {
		return nil, time.Time{}, nil, translate(fmt.Errorf("read what %s/%s owes: %w", job, participant, err))
	}
	if !found {
		return nil, time.Time{}, nil, coordinator.ErrNotFound
	}
	return row.get(), row.now.UTC(), coordinator.OwingOf(cps, participant), nil
}

func (s *Store) view(ctx context.Context, conn *pgx.Conn, job string, fn func(tx coordinator.JobTx) error) error {
	t := &jobTx{ctx: ctx, conn: conn, queue: &writeQueue{}}
	t.queue.add("begin", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	if err := t.beginView(job); err != nil {
		return err
	}
	fnErr := fn(t)
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return err
	}
	return fnErr
}

// PutJob implements coordinator.Store.
func (s *Store) PutJob(ctx context.Context, name string, cfg coordinator.JobConfig, audit *coordinator.AuditEntry) (*coordinator.Job, bool, error) {
	var job *coordinator.Job
	var created bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var deleted bool
		err := tx.QueryRow(ctx, putJobDeletedSQL, name).Scan(&deleted)
		exists := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var inserted bool
		err = tx.QueryRow(ctx, putJobUpsertSQL,
			name, cfg.Participants, cfg.CheckpointTimeout.Milliseconds(), cfg.MaxConcurrentCheckpoints, cfg.AutoCommit, cfg.Retention.Milliseconds(),
		).Scan(&inserted)
		if err != nil {
			return err
		}
		created = inserted || (exists && deleted)
		if audit != nil {
			a := *audit
			a.Action = coordinator.AuditJobUpdated
			if created {
				a.Action = coordinator.AuditJobCreated
			}
			if _, err := tx.Exec(ctx, insertAuditSQL, auditArgs(&a)...); err != nil {
				return fmt.Errorf("record %s: %w", a.Action, err)
			}
		}
		job, err = getJob(ctx, tx, name)
		return err
	})
	s.health.Note(err)
	// Its version changed: what the committer cached of it is stale.
	s.committer.cache.forget(name)
	if err != nil {
		return nil, false, translate(fmt.Errorf("put job %s: %w", name, err))
	}
	s.broker.NotifyJob(name)
	// Other processes drop what they cached of the job, and their waiters look at it
	// again. Announced after the commit, not in it: a transaction that notifies takes
	// PostgreSQL's notification lock while it commits, which under lock_timeout could fail
	// the job's change for the announcement's sake. Without the announcement only what
	// other processes tell pending is late (a participant taken out of the job waits
	// rather than hearing 404): their writes check the job's version.
	if _, err := s.pool.Exec(ctx, announceSQL, s.origin+" "+coordinator.BrokerKey(name, coordinator.AnyCheckpoint)); err != nil {
		s.logger.Warn("announcing a changed job to other coordinators failed: their long-polls on it see the change late", "job", name, "error", err)
	}
	return job, created, nil
}

// GetJob implements coordinator.Store.
func (s *Store) GetJob(ctx context.Context, name string) (*coordinator.Job, error) {
	job, err := getJob(ctx, s.pool, name)
	if err != nil {
		return nil, translate(err)
	}
	return job, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// scanJob scans a row of jobViewColumns.
func scanJob(row pgx.Row) (*coordinator.Job, error) {
	var j coordinator.Job
	var timeoutMS, retentionMS int64
	var names []string
	var epochs []int64
	dest := []any{&j.Name, &j.Config.Participants, &timeoutMS, &j.Config.MaxConcurrentCheckpoints, &j.Config.AutoCommit,
		&retentionMS, &j.Seq, &j.CreatedAt, &j.UpdatedAt, &names, &epochs, &j.LastCheckpoint, &j.LastCommitted}
	if err := row.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, coordinator.ErrNotFound
		}
		return nil, err
	}
	j.Config.CheckpointTimeout = time.Duration(timeoutMS) * time.Millisecond
	j.Config.Retention = time.Duration(retentionMS) * time.Millisecond
	j.CreatedAt, j.UpdatedAt = j.CreatedAt.UTC(), j.UpdatedAt.UTC()
	j.Epochs = epochsOf(names, epochs)
	return &j, nil
}

func getJob(ctx context.Context, q querier, name string) (*coordinator.Job, error) {
	return scanJob(q.QueryRow(ctx, getJobSQL, name))
}

// ListJobs implements coordinator.Store.
func (s *Store) ListJobs(ctx context.Context, pattern coordinator.JobPattern, after string, limit int) ([]*coordinator.Job, error) {
	prefix, exact := patternArgs(pattern)
	rows, err := s.pool.Query(ctx, listJobsSQL, after, limit, prefix, exact)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var jobs []*coordinator.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, translate(err)
		}
		jobs = append(jobs, j)
	}
	return jobs, translate(rows.Err())
}

// ListCheckpoints implements coordinator.Store.
func (s *Store) ListCheckpoints(ctx context.Context, q coordinator.CheckpointQuery) ([]*coordinator.Checkpoint, error) {
	sql, args := listCheckpointsSQL(q)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, translate(err)
	}
	cps, err := scanCheckpoints(rows)
	return cps, translate(err)
}

// GetCheckpoint implements coordinator.Store in one statement (two when it finds nothing).
func (s *Store) GetCheckpoint(ctx context.Context, job string, id int64) (*coordinator.Checkpoint, error) {
	rows, err := s.pool.Query(ctx, getCheckpointSQL, job, id)
	if err != nil {
		return nil, translate(err)
	}
	cps, err := scanCheckpoints(rows)
	if err != nil {
		return nil, translate(err)
	}
	if len(cps) > 0 {
		return cps[0], nil
	}
	var seq int64
	err = s.pool.QueryRow(ctx, jobSeqSQL, job).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coordinator.ErrNotFound
	}
	if err != nil {
		return nil, translate(err)
	}
	if coordinator.Gone(id, seq) {
		return nil, coordinator.ErrGone
	}
	return nil, nil
}

// ExpiredJobs implements coordinator.Store.
func (s *Store) ExpiredJobs(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, expiredJobsSQL)
	if err != nil {
		return nil, translate(err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return jobs, translate(err)
}

// patternArgs are the prefix and the exact name that a job pattern stands for in listJobsSQL:
// a name is its own prefix too; every job is the empty prefix and no name.
func patternArgs(p coordinator.JobPattern) (prefix, exact string) {
	prefix, isPrefix := p.Prefix()
	if isPrefix {
		return prefix, ""
	}
	return prefix, prefix
}

// Participants implements coordinator.Store, in one query.
func (s *Store) Participants(ctx context.Context, job string, names []string) ([]coordinator.ParticipantActivity, error) {
	rows, err := s.pool.Query(ctx, participantsSQL, job, names)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := make([]coordinator.ParticipantActivity, 0, len(names))
	for rows.Next() {
		var p coordinator.ParticipantActivity
		var voteMS *int64
		var owed int64
		if err := rows.Scan(&p.Name, &p.Epoch, &p.RegisteredAt, &p.LastVoteAt, &voteMS, &p.LastAckAt, &owed); err != nil {
			return nil, translate(err)
		}
		if voteMS != nil {
			d := time.Duration(*voteMS) * time.Millisecond
			p.LastVote = &d
		}
		p.Owed = int(owed)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	return out, nil
}
