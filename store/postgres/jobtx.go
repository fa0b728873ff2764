package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/twophase/coordinator/coordinator"
)

// jobTx is one job inside one database transaction; for writes it holds the job row's lock.
//
// Statements are pipelined: writes are queued and sent with the next read, or with COMMIT,
// so a vote costs one network round trip for its reads and shares the commit's round trip
// for its writes. Several jobTx of one group commit run in turn on the same connection and
// transaction, handing the queue of writes on.
type jobTx struct {
	// ctx is the transaction's own: a request's context (passed to the methods and ignored)
	// must not cut a group commit that other requests share.
	ctx       context.Context
	conn      *pgx.Conn
	write     bool
	job       *coordinator.Job
	now       time.Time
	preparing []*coordinator.Checkpoint // loaded with the lock
	hinted    *coordinator.Checkpoint   // the update's checkpoint, loaded with the lock if not preparing
	loaded    bool                      // preparing holds what begin loaded, not yet handed out
	wrote     bool                      // this update queued a write since begin
	queue     *writeQueue
	origin    string                    // names this process in announcements (channel)
	decided   []*coordinator.Checkpoint // as saved, published once committed
	announced bool                      // a checkpoint opened, an epoch changed or the job deleted: the job's waiters are told once committed
	lastWrite *participantWrite         // the last statement queued, if a participant write (queueStatus merges)
	// owing holds, in a View, the checkpoints anyone may still owe something on, as begin
	// read them (viewSQL); Owing answers from it.
	owing       []*coordinator.Checkpoint
	owingLoaded bool

	// checkpoints holds this transaction's own copies of the job's checkpoints that it read
	// (every preparing one among them), kept as it changes them (Apply), so that the next
	// update of the job in the same batch can start from them instead of reading (handOn),
	// and the cache can keep them once the batch commits. canHandOn is false once a write was
	// made that they cannot follow before the commit (a new checkpoint, whose Seq the
	// database assigns). canCache is false once they no longer tell the job's state (the job
	// deleted, a change to a checkpoint not read). nowAt is when now was read, by the local
	// monotonic clock. version is the job's version that the lock found, plus one.
	checkpoints map[int64]*coordinator.Checkpoint
	canHandOn   bool
	canCache    bool
	// owedOutside names the checkpoints on which something was owed that the read under
	// the lock did not select (owedElsewhereSQL); with each of them in checkpoints too (read
	// since), checkpoints holds every checkpoint of the job on which anyone may still owe
	// something (coordinator.MayOwe), and the cache may tell pending that a participant owes
	// nothing (DESIGN.md, invariant 14). That holds for as long as canCache does: what is
	// owed changes only by the rules' changes to checkpoints t holds, replayed by Apply.
	// Past maxCachedCheckpoints of them, the read gives up (knowsOwed false).
	owedOutside []int64
	knowsOwed   bool
	nowAt       time.Time
	version     int64
	cache       *stateCache
	// recorded names the checkpoints on which this update recorded a vote or an ack: the
	// other participants' may be on their way (awaited).
	recorded []recorded
	// touched names the checkpoints this update opened or changed, in order; changedJob is
	// true once it changed more of the job (an epoch, the job deleted): then the job's
	// waiters read what changed instead of being handed it.
	touched    []int64
	changedJob bool
	// since is a version from which every change to the job up to the one this update
	// began from was this process's and changed only checkpoints (coordinator.Changed), 0
	// if none is known: the version read under the lock, or the cached state's since.
	since int64
	// assumeKeys is set for an update that began from a cached state (or from the update
	// before it in the batch, which did): an Idempotency-Key is then taken for unused
	// without a read, checked by a statement that fails the transaction otherwise (DESIGN.md,
	// invariant 16). stale is the batch's: set once such a check fails.
	assumeKeys bool
	stale      *bool
}

// recorded is a vote (ack false) or an ack recorded on a checkpoint.
type recorded struct {
	job string
	id  int64
	ack bool
}

var _ coordinator.JobTx = (*jobTx)(nil)

var errReadOnly = errors.New("postgres: write in a read-only transaction")

// writeQueue holds statements not yet sent, shared by the jobTx of one transaction.
type writeQueue struct {
	batch pgx.Batch
	what  []string
	scans []func(pgx.Row) error // per statement: reads its one row, or nil to check it ran
	// notifies is set once a statement that notifies other processes (pg_notify) has been
	// queued in the transaction: its COMMIT then waits for PostgreSQL's notification lock.
	notifies bool
}

func (q *writeQueue) add(what, sql string, args ...any) {
	q.addScan(what, nil, sql, args...)
}

// addScan queues a statement returning one row, read by scan when the queue is sent: its
// results are needed only once the transaction commits, not before the next statement.
func (q *writeQueue) addScan(what string, scan func(pgx.Row) error, sql string, args ...any) {
	q.batch.Queue(sql, args...)
	q.what = append(q.what, what)
	q.scans = append(q.scans, scan)
}

// replaceLast replaces the last statement queued.
func (q *writeQueue) replaceLast(what, sql string, args ...any) {
	last := q.batch.QueuedQueries[len(q.batch.QueuedQueries)-1]
	last.SQL, last.Arguments = sql, args
	q.what[len(q.what)-1] = what
}

// send sends the queued writes followed by extra statements, in one round trip, checks
// every write's result and returns the batch's results positioned at the first extra.
func (q *writeQueue) send(ctx context.Context, conn *pgx.Conn, extra func(b *pgx.Batch)) (pgx.BatchResults, error) {
	b := q.batch
	what, scans := q.what, q.scans
	q.batch, q.what, q.scans = pgx.Batch{}, nil, nil
	if extra != nil {
		extra(&b)
	}
	results := conn.SendBatch(ctx, &b)
	for i, w := range what {
		var err error
		if scans[i] != nil {
			err = scans[i](results.QueryRow())
		} else {
			_, err = results.Exec()
		}
		if err != nil {
			results.Close()
			return nil, fmt.Errorf("%s: %w", w, err)
		}
	}
	return results, nil
}

// flush sends the queued writes, if any.
func (q *writeQueue) flush(ctx context.Context, conn *pgx.Conn) error {
	if len(q.what) == 0 {
		return nil
	}
	results, err := q.send(ctx, conn, nil)
	if err != nil {
		return err
	}
	return results.Close()
}

// jsonCheckpoint is a checkpoint as lockJobSQL returns it.
type jsonCheckpoint struct {
	Job          string           `json:"job"`
	ID           int64            `json:"id"`
	Seq          int64            `json:"seq"`
	Status       string           `json:"status"`
	AutoCommit   bool             `json:"auto_commit"`
	CreatedAt    time.Time        `json:"created_at"`
	Deadline     time.Time        `json:"deadline"`
	DecidedAt    *time.Time       `json:"decided_at"`
	CompletedAt  *time.Time       `json:"completed_at"`
	AbortReason  *string          `json:"abort_reason"`
	DecidedBy    *string          `json:"decided_by"`
	Cause        *string          `json:"decision_cause"`
	Participants []participantRow `json:"participants"`
}

func (j *jsonCheckpoint) checkpoint() *coordinator.Checkpoint {
	cp := &coordinator.Checkpoint{
		Job: j.Job, ID: j.ID, Seq: j.Seq, Status: coordinator.Status(j.Status), AutoCommit: j.AutoCommit,
		CreatedAt: j.CreatedAt.UTC(), Deadline: j.Deadline.UTC(), DecidedAt: utc(j.DecidedAt), CompletedAt: utc(j.CompletedAt),
		Participants: make([]coordinator.ParticipantState, len(j.Participants)),
	}
	if j.AbortReason != nil {
		cp.AbortReason = *j.AbortReason
	}
	if j.DecidedBy != nil {
		cp.DecidedBy = *j.DecidedBy
	}
	if j.Cause != nil {
		cp.DecisionCause = coordinator.Cause(*j.Cause)
	}
	for i := range j.Participants {
		cp.Participants[i] = j.Participants[i].state()
	}
	return cp
}

// queueBegin queues what begin reads: the job's lock and state (with the checkpoint hint,
// 0 for none). A View begins with beginView instead.
func (t *jobTx) queueBegin(b *pgx.Batch, name string, hint int64) {
	b.Queue(lockJobSQL, name, hint)
}

// readBegin reads the results of queueBegin, all of them even when the job is missing
// (coordinator.ErrNotFound), so that results stay in step for the statements after them.
// stale is true when the job's epochs and checkpoints must be read again (readState):
// another transaction changed them between the snapshot and the lock.
func (t *jobTx) readBegin(results pgx.BatchResults, hint int64) (stale bool, err error) {
	var row jobRow
	var version int64
	var seen *int64
	var names []string
	var epochs []int64
	var cpsJSON []byte
	var elsewhere []int64
	err = results.QueryRow().Scan(append(row.dest(), &version, &seen, &t.now, &names, &epochs, &cpsJSON, &elsewhere)...)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return false, coordinator.ErrNotFound
		}
		return false, err
	}
	t.job, t.now, t.nowAt, t.version = row.get(), t.now.UTC(), time.Now(), version+1
	t.cache.observe(t.now, t.nowAt)
	if seen == nil || *seen != version {
		return true, nil // readState reads under the lock, and sets since
	}
	var raw []jsonCheckpoint
	if err := json.Unmarshal(cpsJSON, &raw); err != nil {
		return false, fmt.Errorf("read checkpoints of job %s: %w", t.job.Name, err)
	}
	cps := make([]*coordinator.Checkpoint, len(raw))
	for i := range raw {
		cps[i] = raw[i].checkpoint()
	}
	t.startRead(names, epochs, cps, hint, elsewhere)
	t.since = version
	return false, nil
}

// startRead begins t from what it read under the job's lock: the job's epochs and
// checkpoints (with checkpoint hint whatever its status), and the checkpoints it did not
// read on which something is owed.
func (t *jobTx) startRead(names []string, epochs []int64, cps []*coordinator.Checkpoint, hint int64, owedOutside []int64) {
	t.job.Epochs = epochsOf(names, epochs)
	read := make(map[int64]*coordinator.Checkpoint, len(cps))
	for _, cp := range cps {
		read[cp.ID] = cp
	}
	t.start(t.job, read, t.now, t.nowAt, hint)
	t.owedOutside, t.knowsOwed = owedOutside, len(owedOutside) <= maxCachedCheckpoints
}

// handOn begins next, the next update of the same job in this transaction, from what this
// one leaves of the job, if it can: without a statement. The clock goes on from the one
// read under the lock, by the local monotonic clock. It returns false if next must read:
// this update made a write that its checkpoints do not follow, or hint is a checkpoint it
// did not read.
func (t *jobTx) handOn(next *jobTx, hint int64) bool {
	if !t.canHandOn || t.checkpoints == nil {
		return false
	}
	if _, ok := t.checkpoints[hint]; hint != 0 && !ok {
		return false
	}
	next.version = t.version
	next.start(coordinator.CloneJob(t.job), t.checkpoints, t.now.Add(time.Since(t.nowAt)).Truncate(time.Microsecond), t.nowAt, hint)
	next.owedOutside, next.knowsOwed, next.since = t.owedOutside, t.knowsOwed, t.since
	next.assumeKeys = t.assumeKeys
	t.checkpoints = nil
	return true
}

// start is where every update begins, whatever its state comes from (read under the lock,
// handed on by the update before it, or cached from an earlier batch): the job, its
// checkpoints (which t takes: every preparing one, and hint's if it has it), the clock now,
// read or estimated at local time nowAt. The rules get copies of the checkpoints, so that
// t's own follow only what is written (Apply).
func (t *jobTx) start(job *coordinator.Job, checkpoints map[int64]*coordinator.Checkpoint, now, nowAt time.Time, hint int64) {
	t.job, t.now, t.nowAt = job, now, nowAt
	t.checkpoints, t.canHandOn, t.canCache = checkpoints, true, true
	t.owedOutside, t.knowsOwed, t.since = nil, false, 0
	t.preparing, t.hinted, t.loaded = nil, nil, true
	for _, id := range slices.Sorted(maps.Keys(checkpoints)) {
		cp := checkpoints[id]
		if cp.Status == coordinator.StatusPreparing {
			t.preparing = append(t.preparing, cp.Clone())
		} else if id == hint {
			t.hinted = cp.Clone()
		}
	}
}

// remember keeps a copy of checkpoints read under the lock in t.checkpoints.
func (t *jobTx) remember(cps ...*coordinator.Checkpoint) {
	if t.checkpoints != nil {
		for _, cp := range cps {
			t.checkpoints[cp.ID] = cp.Clone()
		}
	}
}

// readState reads the job's epochs and checkpoints again, under its lock (stateSQL), when
// what the lock statement read was stale.
func (t *jobTx) readState(hint int64) error {
	var now time.Time
	var names []string
	var epochs []int64
	var elsewhere []int64
	cps, _, err := t.query(stateSQL, []any{t.job.Name, hint}, &now, &names, &epochs, &elsewhere)
	if err != nil {
		return err
	}
	t.startRead(names, epochs, cps, hint, elsewhere)
	t.since = t.version - 1 // the version the lock found
	return nil
}

// begin locks the job (for writes) and reads it, the clock and its preparing checkpoints
// (with checkpoint hint, if not 0), in one round trip that also carries the writes queued
// so far. The commit reads the first update of each job of a batch at once instead.
// locked says that this transaction holds the job's lock already: then it only reads.
func (t *jobTx) begin(name string, hint int64, locked bool) error {
	if locked && t.write {
		return t.readLocked(name, hint)
	}
	results, err := t.queue.send(t.ctx, t.conn, func(b *pgx.Batch) { t.queueBegin(b, name, hint) })
	if err != nil {
		return err
	}
	stale, err := t.readBegin(results, hint)
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	if err == nil && stale {
		err = t.readState(hint)
	}
	return err
}

// beginView is begin for a View: the job, its epochs, the clock and what anyone owes on
// it, in one statement sent with the queued BEGIN.
func (t *jobTx) beginView(name string) error {
	var row viewRow
	cps, found, err := t.query(viewSQL, []any{name}, row.dest()...)
	if err != nil {
		return err
	}
	if !found {
		return coordinator.ErrNotFound
	}
	t.job, t.now, t.nowAt = row.get(), row.now.UTC(), time.Now()
	t.owing, t.owingLoaded = cps, true
	return nil
}

// viewRow scans the columns viewSQL reads before the checkpoints': the job's, the clock,
// the epochs.
type viewRow struct {
	job     jobRow
	version int64
	now     time.Time
	names   []string
	epochs  []int64
}

func (r *viewRow) dest() []any {
	return append(r.job.dest(), &r.version, &r.now, &r.names, &r.epochs)
}

// get returns the job scanned, with its epochs and version.
func (r *viewRow) get() *coordinator.Job {
	j := r.job.get()
	j.Epochs = epochsOf(r.names, r.epochs)
	j.Version = r.version
	return j
}

// epochsOf pairs the participants and epochs of a row (epochsSQL's two arrays).
func epochsOf(names []string, epochs []int64) map[string]int64 {
	out := make(map[string]int64, len(names))
	for i, n := range names {
		out[n] = epochs[i]
	}
	return out
}

// readLocked is begin for a job whose lock this transaction holds.
func (t *jobTx) readLocked(name string, hint int64) error {
	var row jobRow
	var names []string
	var epochs []int64
	var elsewhere []int64
	cps, found, err := t.query(lockedJobSQL, []any{name, hint}, append(row.dest(), &t.now, &names, &epochs, &elsewhere)...)
	if err != nil {
		return err
	}
	if !found {
		return coordinator.ErrNotFound
	}
	t.job, t.now, t.nowAt = row.get(), t.now.UTC(), time.Now()
	t.startRead(names, epochs, cps, hint, elsewhere)
	return nil
}

// jobRow scans the jobRowColumns of a row.
type jobRow struct {
	job         coordinator.Job
	timeoutMS   int64
	retentionMS int64
}

func (r *jobRow) dest() []any {
	return []any{&r.job.Name, &r.job.Config.Participants, &r.timeoutMS, &r.job.Config.MaxConcurrentCheckpoints,
		&r.job.Config.AutoCommit, &r.retentionMS, &r.job.Seq, &r.job.CreatedAt, &r.job.UpdatedAt}
}

// get returns the job scanned; its Epochs are left nil.
func (r *jobRow) get() *coordinator.Job {
	r.job.Config.CheckpointTimeout = time.Duration(r.timeoutMS) * time.Millisecond
	r.job.Config.Retention = time.Duration(r.retentionMS) * time.Millisecond
	r.job.CreatedAt, r.job.UpdatedAt = r.job.CreatedAt.UTC(), r.job.UpdatedAt.UTC()
	return &r.job
}

// rowsSeen notes whether any row came.
type rowsSeen struct {
	pgx.Rows
	seen *bool
}

func (r *rowsSeen) Next() bool {
	if r.Rows.Next() {
		*r.seen = true
		return true
	}
	return false
}

func (t *jobTx) Now() time.Time        { return t.now }
func (t *jobTx) Job() *coordinator.Job { return t.job }

// writable refuses writes in a read-only transaction, and notes that this update wrote.
func (t *jobTx) writable() error {
	if !t.write {
		return errReadOnly
	}
	t.wrote = true
	return nil
}

// scanCheckpoints reads the rows of a checkpointsSQL query, or of stateSQL with its first
// columns scanned into prefix (rows whose checkpoint columns are NULL carry only those).
// Those first columns are the job's, the same on every row: only the first row's are
// decoded (the later rows skip them), which spares decoding the job's arrays once per
// participant of every checkpoint read.
func scanCheckpoints(rows pgx.Rows, prefix ...any) ([]*coordinator.Checkpoint, error) {
	defer rows.Close()
	var cps []*coordinator.Checkpoint
	var cur *coordinator.Checkpoint
	var (
		job                    pgtype.Text
		id, seq                pgtype.Int8
		status                 pgtype.Text
		autoCommit             pgtype.Bool
		createdAt, deadline    pgtype.Timestamptz
		decidedAt, completedAt *time.Time
		reason, decidedBy      *string
		cause                  *string
		p                      participantRow
	)
	pdest := p.dest()
	dest := make([]any, 0, len(prefix)+12+len(pdest))
	dest = append(append(dest, prefix...), &job, &id, &seq, &status, &autoCommit, &createdAt, &deadline, &decidedAt, &completedAt, &reason, &decidedBy, &cause)
	dest = append(dest, pdest...)
	for n := 0; rows.Next(); n++ {
		if n == 1 {
			clear(dest[:len(prefix)]) // nil: pgx skips the column
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if !job.Valid {
			continue
		}
		if cur == nil || cur.Job != job.String || cur.ID != id.Int64 {
			cur = &coordinator.Checkpoint{
				Job:         job.String,
				ID:          id.Int64,
				Seq:         seq.Int64,
				Status:      coordinator.Status(status.String),
				AutoCommit:  autoCommit.Bool,
				CreatedAt:   createdAt.Time.UTC(),
				Deadline:    deadline.Time.UTC(),
				DecidedAt:   utc(decidedAt),
				CompletedAt: utc(completedAt),
			}
			if reason != nil {
				cur.AbortReason = *reason
			}
			if decidedBy != nil {
				cur.DecidedBy = *decidedBy
			}
			if cause != nil {
				cur.DecisionCause = coordinator.Cause(*cause)
			}
			cps = append(cps, cur)
		}
		cur.Participants = append(cur.Participants, p.state())
	}
	return cps, rows.Err()
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// query sends the queued writes and sql, and scans its checkpoints (scanCheckpoints, the
// first columns into prefix). found is false if no row came.
func (t *jobTx) query(sql string, args []any, prefix ...any) (cps []*coordinator.Checkpoint, found bool, err error) {
	results, err := t.queue.send(t.ctx, t.conn, func(b *pgx.Batch) { b.Queue(sql, args...) })
	if err != nil {
		return nil, false, err
	}
	defer results.Close()
	rows, err := results.Query()
	if err != nil {
		return nil, false, err
	}
	if cps, err = scanCheckpoints(&rowsSeen{Rows: rows, seen: &found}, prefix...); err != nil {
		return nil, false, err
	}
	return cps, found, results.Close()
}

// queryCheckpoints is query for statements that select checkpoints only.
func (t *jobTx) queryCheckpoints(sql string, args ...any) ([]*coordinator.Checkpoint, error) {
	cps, _, err := t.query(sql, args)
	return cps, err
}

func (t *jobTx) Preparing(ctx context.Context) ([]*coordinator.Checkpoint, error) {
	// What begin loaded still stands if this update wrote nothing since: the other
	// updates of the transaction are on other jobs.
	if t.loaded && !t.wrote {
		cps := t.preparing
		t.preparing, t.loaded = nil, false
		return cps, nil
	}
	t.preparing, t.loaded = nil, false
	cps, err := t.queryCheckpoints(preparingSQL, t.job.Name)
	t.remember(cps...)
	return cps, err
}

func (t *jobTx) Checkpoint(ctx context.Context, id int64) (*coordinator.Checkpoint, error) {
	if t.hinted != nil && t.hinted.ID == id && !t.wrote {
		cp := t.hinted
		t.hinted = nil
		return cp, nil
	}
	cps, err := t.queryCheckpoints(checkpointSQL, t.job.Name, id)
	if err != nil {
		return nil, err
	}
	if len(cps) == 0 {
		return nil, coordinator.ErrNotFound
	}
	t.remember(cps[0])
	return cps[0], nil
}

// Owing selects, through the partial index of checkpoints on which something is owed
// (mayOweSQL), the checkpoints where the participant may owe something: preparing or
// committing and not acked, or aborted with a prepared vote not acked. coordinator.Owed
// decides on each.
func (t *jobTx) Owing(ctx context.Context, participant string) ([]*coordinator.Checkpoint, error) {
	if t.owingLoaded {
		return coordinator.OwingOf(t.owing, participant), nil
	}
	return t.queryCheckpoints(owingSQL, t.job.Name, participant)
}

func (t *jobTx) Idempotency(ctx context.Context, key string) (coordinator.IdempotencyRecord, bool, error) {
	rec := coordinator.IdempotencyRecord{Key: key}
	if t.assumeKeys {
		// A key is used again only when a client retries a prepare: assume it is not, and
		// let the check, sent with the writes, fail the batch if it is. The batch then runs
		// again reading every job (its jobs no longer cached for a while), and this reads.
		stale := t.stale
		t.queue.addScan("check that Idempotency-Key "+key+" is unused", func(row pgx.Row) error {
			var one int64
			err := row.Scan(&one)
			if isDivisionByZero(err) {
				*stale = true
				return fmt.Errorf("%w (Idempotency-Key used: %w)", errStale, err)
			}
			return err
		}, keyUnusedSQL, t.job.Name, key)
		return rec, false, nil
	}
	results, err := t.queue.send(t.ctx, t.conn, func(b *pgx.Batch) {
		b.Queue(idempotencyKeySQL, t.job.Name, key)
	})
	if err != nil {
		return rec, false, err
	}
	defer results.Close()
	err = results.QueryRow().Scan(&rec.Fingerprint, &rec.Checkpoint)
	if errors.Is(err, pgx.ErrNoRows) {
		return rec, false, results.Close()
	}
	if err != nil {
		return rec, false, err
	}
	return rec, true, results.Close()
}

// Apply queues the statements that write what the rules decided, to go with the next read
// or with COMMIT, and replays m on t's checkpoints (coordinator.Mutation.Apply), so that they
// follow the job's state without rebuilding any of the rules' results.
func (t *jobTx) Apply(ctx context.Context, m *coordinator.Mutation) error {
	if err := t.writable(); err != nil {
		return err
	}
	if m.Empty() {
		return nil
	}
	cps := t.checkpoints
	if cps == nil {
		cps = map[int64]*coordinator.Checkpoint{}
	}
	if !m.Apply(t.job, cps) {
		// A change to a checkpoint this transaction did not read: its checkpoints no longer
		// tell the job's state.
		t.canHandOn, t.canCache = false, false
	}
	if m.Opened != nil {
		t.queueInsert(m.Opened, m.Idempotency, cps[m.Opened.ID])
		t.touched = append(t.touched, m.Opened.ID)
	}
	if m.ChangesJob() {
		t.changedJob, t.since = true, 0
	}
	for _, v := range m.Votes {
		t.touched = append(t.touched, v.Checkpoint)
	}
	for _, a := range m.Acks {
		t.touched = append(t.touched, a.Checkpoint)
	}
	for _, cp := range m.Statuses {
		t.touched = append(t.touched, cp.ID)
	}
	for _, e := range m.Epochs {
		t.queue.add("set epoch of "+e.Participant, setEpochSQL, t.job.Name, e.Participant, e.Epoch, t.now)
	}
	if (m.Opened != nil || len(m.Epochs) > 0 || m.JobDeleted) && !t.announced {
		// Participants waiting on pending, here and in other processes, read again; other
		// processes drop what they cached of the job.
		t.announced = true
		t.queue.notifies = true
		t.queue.add("announce the job", announceSQL, t.origin+" "+coordinator.BrokerKey(t.job.Name, coordinator.AnyCheckpoint))
	}
	for _, v := range m.Votes {
		t.recorded = append(t.recorded, recorded{job: t.job.Name, id: v.Checkpoint})
		t.addParticipantWrite(fmt.Sprintf("save vote of %s on %d", v.Participant.Name, v.Checkpoint), v.Checkpoint, saveVoteSQL,
			saveVoteArgs(t.job.Name, v.Checkpoint, &v.Participant)...)
	}
	for _, a := range m.Acks {
		t.recorded = append(t.recorded, recorded{job: t.job.Name, id: a.Checkpoint, ack: true})
		t.addParticipantWrite(fmt.Sprintf("save ack of %s on %d", a.Participant.Name, a.Checkpoint), a.Checkpoint, saveAckSQL,
			saveAckArgs(t.job.Name, a.Checkpoint, &a.Participant)...)
	}
	for _, cp := range m.Statuses {
		t.queueStatus(cp)
	}
	t.queueRollbackOwed(m, cps)
	if m.JobDeleted {
		t.canHandOn, t.canCache = false, false
		t.queue.add("delete checkpoints", deleteCheckpointsSQL, t.job.Name)
		t.queue.add("delete job", markJobDeletedSQL, t.job.Name)
	}
	for i := range m.Audit {
		t.queue.add("record "+string(m.Audit[i].Action), insertAuditSQL, auditArgs(&m.Audit[i])...)
	}
	return nil
}

// queueRollbackOwed queues, after m's writes, the statement that keeps owes_rollback of
// each aborted checkpoint m changed: one it aborted, one on which it recorded an ack (cps
// holds the checkpoints as m left them; one not there may be aborted too). An ack of a
// commit, the common case, queues nothing.
func (t *jobTx) queueRollbackOwed(m *coordinator.Mutation, cps map[int64]*coordinator.Checkpoint) {
	var ids []int64
	for _, cp := range m.Statuses {
		if cp.Status == coordinator.StatusAborted {
			ids = append(ids, cp.ID)
		}
	}
	for _, a := range m.Acks {
		if cp, ok := cps[a.Checkpoint]; !ok || cp.Status == coordinator.StatusAborted {
			ids = append(ids, a.Checkpoint)
		}
	}
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		t.queue.add(fmt.Sprintf("keep whether %d is owed a rollback", id), rollbackOwedSQL, t.job.Name, id)
	}
}

// queueInsert queues a new checkpoint, its participants, the job's seq if it grows, and the
// Idempotency-Key that opened it (rec, if not nil). Its Seq is known only once the statement
// ran, when it is set on cp and on t's copy (k, if not nil): no update of this batch can
// start from t's checkpoints after this one (canHandOn), but the batch's successor can.
func (t *jobTx) queueInsert(cp *coordinator.Checkpoint, rec *coordinator.IdempotencyRecord, k *coordinator.Checkpoint) {
	t.canHandOn = false
	names := make([]string, len(cp.Participants))
	for i, p := range cp.Participants {
		names[i] = p.Name
	}
	t.queue.addScan(fmt.Sprintf("insert checkpoint %d", cp.ID), func(row pgx.Row) error {
		err := row.Scan(&cp.Seq)
		if k != nil {
			k.Seq = cp.Seq
		}
		return err
	}, insertCheckpointSQL,
		t.job.Name, cp.ID, string(cp.Status), cp.AutoCommit, cp.CreatedAt, cp.Deadline, cp.DecidedAt, cp.CompletedAt, nullable(cp.AbortReason), names, nullable(cp.DecidedBy),
		nullable(string(cp.DecisionCause)))
	if rec != nil {
		t.queue.add("record idempotency key", recordIdempotencyKeySQL,
			t.job.Name, rec.Key, rec.Fingerprint, rec.Checkpoint)
	}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// participantWrite is the last statement queued, when it is a participant write.
type participantWrite struct {
	id     int64
	sql    string
	args   []any
	queued int // the queue's length once it was queued
}

func (t *jobTx) addParticipantWrite(what string, id int64, sql string, args ...any) {
	t.queue.add(what, sql, args...)
	t.lastWrite = &participantWrite{id: id, sql: sql, args: args, queued: len(t.queue.what)}
}

// queueStatus queues cp's status and decision fields, and the announcement of the change
// to other processes, and keeps cp to publish to this process's waiters once committed.
func (t *jobTx) queueStatus(cp *coordinator.Checkpoint) {
	key := t.origin + " " + coordinator.BrokerKey(cp.Job, cp.ID)
	what := fmt.Sprintf("save status of %d", cp.ID)
	args := []any{cp.Job, cp.ID, string(cp.Status), cp.DecidedAt, cp.CompletedAt, nullable(cp.AbortReason), nullable(cp.DecidedBy),
		nullable(string(cp.DecisionCause)), key}
	if w := t.lastWrite; w != nil && w.id == cp.ID && w.queued == len(t.queue.what) && w.queued > 0 {
		// The vote or ack that caused it was the last statement queued: one statement for
		// both (they change different tables, so neither needs to see the other).
		t.queue.replaceLast(what+" with "+t.queue.what[w.queued-1], saveStatusWithSQL(w.sql, len(w.args)), append(w.args, args[2:]...)...)
	} else {
		t.queue.add(what, saveStatusSQL, args...)
	}
	t.queue.notifies = true
	t.lastWrite = nil
	t.decided = append(t.decided, cp.Clone())
}
