// Package sqlite is the coordinator's embedded store: a SQLite database in one file of a
// local data directory, through the pure-Go driver modernc.org/sqlite (no cgo), so the
// coordinator runs with no database server.
//
// Durability is the same promise as on Postgres: the database is in WAL mode with
// synchronous=FULL, so a transaction has reached the disk (fsync) when its commit returns,
// and a process killed right after loses none of it.
//
// One process owns a data directory: Open takes an exclusive lock on its lock file, and a
// second Open, in this process or another, fails at once with an *InUseError naming the
// process that holds it. Rule 8 of docs/protocol.md (many coordinators on one database)
// is therefore not offered by this store; the Postgres store offers it.
//
// Inside the process, writes are serialised on one connection whose transactions begin
// IMMEDIATE: that connection is the lock of every job at once. Reads (View, GetJob,
// ListJobs, ListCheckpoints, ExpiredJobs) run on a pool of read-only connections, each in
// a snapshot that writes do not block.
//
// The store's clock is the process's: time.Now in UTC, truncated to the microsecond, which
// is the precision of the stored times (unix microseconds), so a time compares equal after
// a round trip, as on Postgres.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/groupcommit"
	"github.com/twophase/coordinator/store/writehealth"
)

// File names inside the data directory.
const (
	// DatabaseFileName is the SQLite database; SQLite keeps its write-ahead log and
	// shared-memory index beside it (-wal, -shm).
	DatabaseFileName = "coordinator.db"
	// LockFileName is the file whose exclusive lock marks the directory's owner; it
	// holds the owner's process id.
	LockFileName = "coordinator.lock"
)

// busyTimeout is how long a connection waits for a lock SQLite's own locking holds
// (a WAL checkpoint, a reader recovering the WAL) before SQLITE_BUSY.
const busyTimeout = 5 * time.Second

// Options tune the store.
type Options struct {
	// Logger receives the store's log lines; nil discards them.
	Logger *slog.Logger
	// Migrate applies pending migrations when the store opens. Without it Open fails
	// (ErrSchemaVersion) unless the schema is already current.
	Migrate bool
	// ReadConns bounds the pool of read-only connections (default: the number of
	// CPUs, at least 4).
	ReadConns int
	// ObserveCommit, when set, is told how long each group commit that committed took.
	ObserveCommit func(time.Duration)
}

// Store implements coordinator.Store on a SQLite database in a data directory.
type Store struct {
	dir    string
	path   string
	lock   *dirLock
	writer *sql.DB // one connection, transactions BEGIN IMMEDIATE
	reader *sql.DB // read-only connections
	logger *slog.Logger
	broker coordinator.Broker

	queue   *groupcommit.Queue  // updates for the writer (committer.go)
	stop    chan struct{}       // closed by Close
	written chan struct{}       // closed when the writer has stopped
	health  writehealth.Record  // what the writes met, for Ready
	observe func(time.Duration) // Options.ObserveCommit

	closeOnce sync.Once
	closed    atomic.Bool
}

var _ coordinator.Store = (*Store)(nil)

// ErrSchemaVersion is wrapped by Open's error when the database's schema is not the one
// this build needs and Options.Migrate is off.
var ErrSchemaVersion = errors.New("schema version is not current")

// errClosed is the cause of the unavailability of a closed store.
var errClosed = errors.New("sqlite: store is closed")

// Open opens the store in dataDir, creating the directory (mode 0700) and the database if
// they do not exist. It first takes the directory's lock: if another Store, in this
// process or another, holds it, Open fails at once with an *InUseError (errors.Is
// ErrInUse) naming that process. With opts.Migrate it then applies pending migrations;
// without, the schema must already be current (else ErrSchemaVersion).
func Open(ctx context.Context, dataDir string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = max(4, runtime.NumCPU())
	}
	dir, lock, err := ownDir(dataDir)
	if err != nil {
		return nil, err
	}
	s := &Store{health: writehealth.Record{Classify: storageFailure}, dir: dir, path: filepath.Join(dir, DatabaseFileName), lock: lock, logger: opts.Logger,
		observe: opts.ObserveCommit,
		stop:    make(chan struct{}), written: make(chan struct{})}
	s.queue = groupcommit.NewQueue(s.stop)
	if err := s.open(ctx, opts); err != nil {
		s.release()
		return nil, err
	}
	go s.write()
	return s, nil
}

// ownDir creates dataDir if needed and takes its lock.
func ownDir(dataDir string) (string, *dirLock, error) {
	if dataDir == "" {
		return "", nil, errors.New("sqlite: no data directory given")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return "", nil, fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("create data directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return "", nil, err
	}
	return dir, lock, nil
}

func (s *Store) open(ctx context.Context, opts Options) error {
	var err error
	if s.writer, err = openDB(s.path, false); err != nil {
		return err
	}
	s.writer.SetMaxOpenConns(1)
	s.writer.SetMaxIdleConns(1)
	// Opening the writer first creates the database and turns on WAL mode, which the
	// read-only connections can then not need to do.
	if err := s.writer.PingContext(ctx); err != nil {
		return translate(fmt.Errorf("open %s: %w", s.path, err))
	}
	if opts.Migrate {
		if err := migrateUp(s.path); err != nil {
			return fmt.Errorf("apply migrations: %w", err)
		}
	}
	version, dirty, err := schemaVersion(ctx, s.writer)
	if err != nil {
		return translate(fmt.Errorf("read schema version: %w", err))
	}
	if dirty || version != SchemaVersion {
		return fmt.Errorf("%w: %s is at version %d%s, this build needs %d (apply the migrations)",
			ErrSchemaVersion, s.path, version, dirtyNote(dirty), SchemaVersion)
	}
	if s.reader, err = openDB(s.path, true); err != nil {
		return err
	}
	s.reader.SetMaxOpenConns(opts.ReadConns)
	s.reader.SetMaxIdleConns(opts.ReadConns)
	if err := s.reader.PingContext(ctx); err != nil {
		return translate(fmt.Errorf("open %s: %w", s.path, err))
	}
	// SQLite syncs the directory when it creates a journal, not when it creates the
	// database file: sync it once, so a power loss cannot drop the file's name.
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("sync data directory: %w", err)
	}
	s.logger.Debug("sqlite store open", "path", s.path, "schema_version", version)
	return nil
}

// syncDir makes the names of the files in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) { // EINVAL: the file system cannot sync a directory
		return err
	}
	return nil
}

func dirtyNote(dirty bool) string {
	if dirty {
		return " (dirty: a migration failed half-way)"
	}
	return ""
}

// dsn is the modernc.org/sqlite data source name of the database at path: WAL, fsync on
// every commit, foreign keys, a busy timeout; write connections begin IMMEDIATE, read
// connections refuse writes.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeout.Milliseconds()))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "1")
	if readOnly {
		q.Set("_query_only", "1")
	} else {
		q.Set("_txlock", "immediate")
	}
	// A file: URI, so that any character of the path (even '?' or '#') is escaped.
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path), OmitHost: true}).String() + "?" + q.Encode()
}

func openDB(path string, readOnly bool) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, readOnly))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// Dir is the data directory, as an absolute path.
func (s *Store) Dir() string { return s.dir }

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database and releases the data directory's lock. Waiters of
// Subscribe are woken. It is safe to call more than once; afterwards every method fails
// with an error wrapping coordinator.ErrUnavailable.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.written
		s.release()
		s.broker.NotifyAll()
	})
}

// release closes the databases (waiting for running statements) and then the lock.
func (s *Store) release() {
	for _, db := range []*sql.DB{s.reader, s.writer} {
		if db != nil {
			if err := db.Close(); err != nil {
				s.logger.Warn("close sqlite database", "path", s.path, "error", err)
			}
		}
	}
	if err := s.lock.release(); err != nil {
		s.logger.Warn("release data directory lock", "dir", s.dir, "error", err)
	}
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return coordinator.Unavailable(errClosed)
	}
	return nil
}

// now is the store's clock: UTC, to the microsecond the database keeps.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// Subscribe implements coordinator.Store. Only this process writes the database, so the
// waiters are woken by its own commits.
func (s *Store) Subscribe(job string, id int64) *coordinator.Subscription {
	return s.broker.Subscribe(job, id)
}

// Ready implements coordinator.Store: the database answers, its schema is current and
// no write failed for want of storage (a full disk, an I/O error, a read-only or corrupt
// file) in the last writehealth.Hold. It writes nothing itself. Otherwise it returns an
// error wrapping coordinator.ErrUnavailable whose message says which, without a path.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	version, dirty, err := schemaVersion(ctx, s.reader)
	if err != nil {
		return translate(fmt.Errorf("read schema version: %w", err))
	}
	if dirty || version != SchemaVersion {
		return &coordinator.Error{Code: coordinator.CodeUnavailable,
			Message: fmt.Sprintf("the schema is at version %d%s, this build needs %d", version, dirtyNote(dirty), SchemaVersion),
			Err:     ErrSchemaVersion}
	}
	return s.health.Check()
}

// maxAttempts bounds how often a transaction that met SQLITE_BUSY is run again.
const maxAttempts = 3

// Update implements coordinator.Store.
func (s *Store) Update(ctx context.Context, job string, checkpoint int64, fn func(tx coordinator.JobTx) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	err := s.update(ctx, job, checkpoint, fn)
	s.health.Note(err)
	return err
}

// GetCheckpoint implements coordinator.Store, in a read transaction.
func (s *Store) GetCheckpoint(ctx context.Context, job string, id int64) (*coordinator.Checkpoint, error) {
	var cp *coordinator.Checkpoint
	err := s.run(ctx, job, func(tx coordinator.JobTx) error {
		var err error
		cp, err = tx.Checkpoint(ctx, id)
		if err == coordinator.ErrNotFound {
			cp, err = nil, nil
			if coordinator.Gone(id, tx.Job().Seq) {
				err = coordinator.ErrGone
			}
		}
		return err
	})
	return cp, err
}

// View implements coordinator.Store.
func (s *Store) View(ctx context.Context, job string, fn func(tx coordinator.JobTx) error) error {
	return s.run(ctx, job, fn)
}

// Owing implements coordinator.Store, as a View: a read transaction costs no round trip.
func (s *Store) Owing(ctx context.Context, job, participant string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, error) {
	return coordinator.OwingByView(ctx, s, job, participant)
}

func (s *Store) run(ctx context.Context, job string, fn func(tx coordinator.JobTx) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := s.runOnce(ctx, job, fn)
		if retryable(err) && attempt < maxAttempts && ctx.Err() == nil {
			s.logger.Debug("sqlite busy; running the transaction again", "job", job, "attempt", attempt, "error", err)
			continue
		}
		return translate(err)
	}
}

// runOnce runs fn in a read-only transaction: writes go through the writer (committer.go).
func (s *Store) runOnce(ctx context.Context, job string, fn func(tx coordinator.JobTx) error) error {
	dbtx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer dbtx.Rollback() //nolint:errcheck // read-only: nothing to commit
	t := &jobTx{tx: dbtx}
	if err := t.load(ctx, job); err != nil {
		return err
	}
	return fn(t)
}

// PutJob implements coordinator.Store.
func (s *Store) PutJob(ctx context.Context, name string, cfg coordinator.JobConfig, audit *coordinator.AuditEntry) (*coordinator.Job, bool, error) {
	if err := s.checkOpen(); err != nil {
		return nil, false, err
	}
	participants, err := json.Marshal(cfg.Participants)
	if err != nil {
		return nil, false, fmt.Errorf("put job %s: %w", name, err)
	}
	if cfg.Participants == nil {
		participants = []byte("[]")
	}
	var job *coordinator.Job
	var created bool
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		var deleted bool
		err := tx.QueryRowContext(ctx, putJobDeletedSQL, name).Scan(&deleted)
		exists := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		at := now().UnixMicro()
		_, err = tx.ExecContext(ctx, putJobUpsertSQL,
			name, string(participants), cfg.CheckpointTimeout.Milliseconds(), cfg.MaxConcurrentCheckpoints, cfg.AutoCommit, at, cfg.Retention.Milliseconds())
		if err != nil {
			return err
		}
		created = !exists || deleted
		if audit != nil {
			a := *audit
			a.Action = coordinator.AuditJobUpdated
			if created {
				a.Action = coordinator.AuditJobCreated
			}
			if _, err := tx.ExecContext(ctx, insertAuditSQL, auditArgs(&a)...); err != nil {
				return fmt.Errorf("record %s: %w", a.Action, err)
			}
		}
		job, err = getJob(ctx, tx, name)
		return err
	})
	s.health.Note(err)
	if err != nil {
		return nil, false, translate(fmt.Errorf("put job %s: %w", name, err))
	}
	s.broker.NotifyJob(name) // its long-polls on pending look at it again
	return job, created, nil
}

// writeTx runs fn in a write transaction and commits it unless fn fails; it runs it again
// after SQLITE_BUSY.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := func() error {
			tx, err := s.writer.BeginTx(ctx, nil)
			if err != nil {
				return fmt.Errorf("begin: %w", err)
			}
			defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
			if err := fn(tx); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if retryable(err) && attempt < maxAttempts && ctx.Err() == nil {
			continue
		}
		return err
	}
}

// GetJob implements coordinator.Store.
func (s *Store) GetJob(ctx context.Context, name string) (*coordinator.Job, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	job, err := getJob(ctx, s.reader, name)
	if err != nil {
		return nil, translate(err)
	}
	return job, nil
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// scanner is what *sql.Row and *sql.Rows share.
type scanner interface{ Scan(dest ...any) error }

func scanJob(row scanner, view bool) (*coordinator.Job, error) {
	var j coordinator.Job
	var participants, epochs string
	var timeoutMS, retentionMS, createdAt, updatedAt int64
	dest := []any{&j.Name, &participants, &timeoutMS, &j.Config.MaxConcurrentCheckpoints, &j.Config.AutoCommit, &retentionMS,
		&j.Seq, &createdAt, &updatedAt, &epochs}
	if view {
		dest = append(dest, &j.LastCheckpoint, &j.LastCommitted)
	}
	if err := row.Scan(dest...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, coordinator.ErrNotFound
		}
		return nil, err
	}
	if err := json.Unmarshal([]byte(participants), &j.Config.Participants); err != nil {
		return nil, fmt.Errorf("job %s: participants: %w", j.Name, err)
	}
	j.Epochs = make(map[string]int64)
	if err := json.Unmarshal([]byte(epochs), &j.Epochs); err != nil {
		return nil, fmt.Errorf("job %s: epochs: %w", j.Name, err)
	}
	j.Config.CheckpointTimeout = time.Duration(timeoutMS) * time.Millisecond
	j.Config.Retention = time.Duration(retentionMS) * time.Millisecond
	j.CreatedAt, j.UpdatedAt = fromMicros(createdAt), fromMicros(updatedAt)
	return &j, nil
}

func getJob(ctx context.Context, q querier, name string) (*coordinator.Job, error) {
	return scanJob(q.QueryRowContext(ctx, getJobSQL, name), true)
}

// ListJobs implements coordinator.Store. Names are ordered byte by byte.
func (s *Store) ListJobs(ctx context.Context, pattern coordinator.JobPattern, after string, limit int) ([]*coordinator.Job, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	prefix, isPrefix := pattern.Prefix()
	exact := prefix
	if isPrefix {
		exact = ""
	}
	rows, err := s.reader.QueryContext(ctx, listJobsSQL, after, limit, prefix, exact)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var jobs []*coordinator.Job
	for rows.Next() {
		j, err := scanJob(rows, true)
		if err != nil {
			return nil, translate(err)
		}
		jobs = append(jobs, j)
	}
	return jobs, translate(rows.Err())
}

// ListCheckpoints implements coordinator.Store: within a job newest first, After an id
// (exclusive, from above); across jobs oldest first by Seq, After a Seq (exclusive, from
// below).
func (s *Store) ListCheckpoints(ctx context.Context, q coordinator.CheckpointQuery) ([]*coordinator.Checkpoint, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var query string
	var args []any
	if q.Job != "" {
		query = listJobCheckpointsSQL(q.After > 0, len(q.Statuses))
		args = append(args, q.Job)
	} else {
		prefix, isPrefix := q.Jobs.Prefix()
		ofJob, ofPrefix := !isPrefix && prefix != "", isPrefix && prefix != ""
		query = listAllCheckpointsSQL(ofJob, ofPrefix, q.After > 0, q.OlderThan > 0, len(q.Statuses))
		if q.OlderThan > 0 {
			args = append(args, now().Add(-q.OlderThan).UnixMicro())
		}
		switch {
		case ofJob:
			args = append(args, prefix)
		case ofPrefix:
			args = append(args, prefix, prefix)
		}
	}
	if q.After > 0 {
		args = append(args, q.After)
	}
	for _, st := range q.Statuses {
		args = append(args, string(st))
	}
	args = append(args, q.Limit)
	var out []*coordinator.Checkpoint
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		cps, err := queryCheckpoints(ctx, tx, query, args...)
		out = cps
		return err
	})
	return out, translate(err)
}

// readTx runs fn in a read-only transaction: one snapshot for all its queries.
func (s *Store) readTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// ExpiredJobs implements coordinator.Store, by the store's clock.
func (s *Store) ExpiredJobs(ctx context.Context) ([]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	jobs, err := s.readNames(ctx, expiredJobsSQL, now().UnixMicro())
	return jobs, translate(err)
}

// readNames runs a read whose rows are one name each, and returns them.
func (s *Store) readNames(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, rows.Err()
}

// fromMicros is a stored time: unix microseconds, in UTC.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// micros is the stored form of t, nil for nil.
func micros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

// optionalTime reads a nullable stored time.
func optionalTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// Participants implements coordinator.Store, one query a participant in one read
// transaction.
func (s *Store) Participants(ctx context.Context, job string, names []string) ([]coordinator.ParticipantActivity, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, translate(err)
	}
	defer func() { _ = tx.Rollback() }()
	out := make([]coordinator.ParticipantActivity, 0, len(names))
	for _, name := range names {
		p := coordinator.ParticipantActivity{Name: name}
		var registered, voted, voteMicros, acked sql.NullInt64
		var owed int64
		if err := tx.QueryRowContext(ctx, participantSQL, job, name, now().UnixMicro()).Scan(&p.Epoch, &registered, &voted, &voteMicros, &acked, &owed); err != nil {
			return nil, translate(err)
		}
		p.RegisteredAt, p.LastVoteAt, p.LastAckAt = microsTime(registered), microsTime(voted), microsTime(acked)
		if voteMicros.Valid {
			d := (time.Duration(voteMicros.Int64) * time.Microsecond).Truncate(time.Millisecond)
			p.LastVote = &d
		}
		p.Owed = int(owed)
		out = append(out, p)
	}
	return out, nil
}

func microsTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMicro(v.Int64).UTC()
	return &t
}
