package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/groupcommit"
)

// batch is one group commit: its updates, sorted by job, run one after the other in one
// transaction on one connection, each under its job's lock, and are answered once the
// transaction has committed. Its phases: start (a connection, BEGIN, each job's cached
// state or none), begin (the first update of each job locked and read, or checked against
// its cached state), run (every update, with those that join the batch meanwhile), finish
// (COMMIT, then the cache, the waiters and the answers).
type batch struct {
	c     *committer
	ctx   context.Context
	conn  *pgx.Conn
	queue *writeQueue
	join  bool // updates that come for the batch's jobs may join it

	ops       []*groupcommit.Op
	txs       []*jobTx          // per update: its jobTx, set for the first of each job by start
	errs      []error           // per update: why it could not begin
	cached    []*jobState       // per first update of a job: the job's cached state, if any
	estimates []time.Time       // per cached job: the clock estimated for its rules
	locked    map[string]bool   // jobs whose lock the transaction holds
	last      map[string]*jobTx // per job, its latest update in the batch
	answers   []error           // per update run: its answer once committed
	decided   [][]*coordinator.Checkpoint
	announced []string             // jobs whose waiters on any change are told once committed
	handovers map[string]*handover // per job, what its waiters on any change may be handed
	recorded  []recorded           // the votes and acks the batch recorded
	lingerEnd time.Time            // how long the batch may wait for followers, once it does
	stale     *bool                // a cached state's check failed: the transaction is lost
	elsewhere map[string]bool      // jobs whose row another transaction holds locked
	deferred  []*groupcommit.Op    // their updates, not run, for the dispatcher to run again
}

// errDeferred marks, in batch.answers, an update set aside because its job's row is locked
// elsewhere: it is not answered but handed back to the dispatcher.
var errDeferred = errors.New("postgres: job locked elsewhere")

// errSkipped marks an update whose caller gave up on it before it started: it did not run
// and is not answered (groupcommit.Op.Start).
var errSkipped = errors.New("postgres: update given up on")

// errOutcomeUnknown is a batch whose COMMIT was sent but whose answer did not come: it may
// have committed. Its updates have been answered so (DESIGN.md, invariant 13).
var errOutcomeUnknown = errors.New("postgres: commit outcome unknown")

// commit runs the updates in one transaction, with those that join it if join is true,
// starting cached jobs from their cached state if useCache is true. On success it answers
// every update it ran and returns nil, with the updates it set aside (deferred: their job
// is locked elsewhere); on failure it answers none and returns the error, wrapping errStale
// if a cached state was found stale (DESIGN.md, invariant 2), except errOutcomeUnknown, after
// which every update it ran has been answered. Either way it returns the updates it took.
func (c *committer) commit(ops []*groupcommit.Op, join, useCache bool) (_, deferred []*groupcommit.Op, err error) {
	// By job, keeping each job's updates in the order they came (DESIGN.md, invariant 8):
	// start gives each job one jobTx, which the job's later updates follow. A batch run
	// again after a failure comes with its joiners after the others, so it is sorted here.
	slices.SortStableFunc(ops, func(a, b *groupcommit.Op) int { return strings.Compare(a.Job, b.Job) })
	began := time.Now()
	if observe := c.store.observe; observe != nil {
		defer func() {
			if err == nil {
				observe(time.Since(began))
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	pooled, err := c.store.pool.Acquire(ctx)
	if err != nil {
		return ops, nil, fmt.Errorf("acquire connection: %w", err)
	}
	defer func() {
		// After a failed statement the transaction is aborted: end it, so that the pool
		// keeps the connection (one left inside a transaction is closed on release).
		if tx := pooled.Conn().PgConn().TxStatus(); tx == 'E' || tx == 'T' {
			_, _ = pooled.Conn().Exec(ctx, "ROLLBACK")
		}
		pooled.Release()
	}()
	stale := false
	n := len(ops)
	b := &batch{c: c, ctx: ctx, conn: pooled.Conn(), queue: &writeQueue{}, join: join, ops: ops, stale: &stale,
		txs: make([]*jobTx, n), errs: make([]error, n), cached: make([]*jobState, n), estimates: make([]time.Time, n),
		locked: make(map[string]bool, n), last: make(map[string]*jobTx, n), elsewhere: map[string]bool{},
		answers: make([]error, 0, n), decided: make([][]*coordinator.Checkpoint, 0, n)}
	defer func() {
		// A failed check fails the transaction, and every statement after it: whatever error
		// the batch ends with (a rule may have wrapped it, or not), it is errStale then.
		if err != nil && stale && !errors.Is(err, errStale) {
			err = fmt.Errorf("%w (%w)", errStale, err)
		}
		if err != nil {
			b.releaseCached()
		}
	}()
	b.queue.add("begin", "BEGIN")
	if err := b.start(useCache); err != nil {
		return b.ops, nil, err
	}
	if err := b.run(); err != nil {
		return b.ops, nil, err
	}
	err = b.finish(began)
	return b.ops, b.deferred, err
}

func (b *batch) newTx() *jobTx {
	return &jobTx{ctx: b.ctx, conn: b.conn, write: true, queue: b.queue, origin: b.c.store.origin, cache: b.c.cache, stale: b.stale}
}

// start gives the first update of each job its jobTx, and begins them: from the job's
// cached state if there is one (cache.go), else from what they read under the lock.
func (b *batch) start(useCache bool) error {
	reads := false
	for i, o := range b.ops {
		if i > 0 && b.ops[i-1].Job == o.Job {
			continue
		}
		b.txs[i] = b.newTx()
		if useCache {
			b.cached[i] = b.c.cache.take(o.Job)
		}
		if b.cached[i] == nil {
			reads = true
		} else {
			var ok bool
			if b.estimates[i], ok = b.c.cache.estimate(b.cached[i].lastNow); !ok {
				reads = true
			}
		}
	}
	if reads {
		if err := b.begin(); err != nil {
			return err
		}
	} else {
		b.resumeCached()
	}
	for i, o := range b.ops {
		switch {
		case b.txs[i] == nil:
		case b.txs[i].job != nil:
			b.locked[o.Job] = true
		case b.elsewhere[o.Job]:
			b.errs[i] = errDeferred
		default:
			b.errs[i] = coordinator.ErrNotFound
		}
	}
	return nil
}

// resumeCached begins every job of a batch whose jobs are all cached on its estimated
// clock: the checks go with the writes and COMMIT, in one round trip (invariants 1-3).
func (b *batch) resumeCached() {
	cache, stale := b.c.cache, b.stale
	for i, o := range b.ops {
		st := b.cached[i]
		if st == nil {
			continue
		}
		b.queue.addScan("check the cached state of job "+o.Job, func(row pgx.Row) error {
			var db time.Time
			err := scanLockIfUnchanged(row, &db)
			if err == nil {
				cache.observe(db, time.Now())
			}
			*stale = *stale || errors.Is(err, errStale)
			return err
		}, lockIfUnchangedSQL, o.Job, st.version, b.estimates[i])
		b.txs[i].resume(st, b.estimates[i], time.Now(), o.Checkpoint)
		b.txs[i].version = st.version + 1
	}
}

// begin reads, in one round trip, the state of the first update of each job (the ops are
// sorted by job, and the locks are taken in that order): a cached job is checked
// (lockIfUnchangedSQL), and begins from its cached state with the clock the check read;
// the others are locked and read. A job found missing leaves its jobTx without a job.
func (b *batch) begin() error {
	results, err := b.queue.send(b.ctx, b.conn, func(q *pgx.Batch) {
		for i, o := range b.ops {
			switch {
			case b.cached[i] != nil:
				q.Queue(lockIfUnchangedSQL, o.Job, b.cached[i].version, nil)
			case b.txs[i] != nil:
				b.txs[i].queueBegin(q, o.Job, o.Checkpoint)
			}
		}
	})
	if err != nil {
		return err
	}
	stale := make([]bool, len(b.ops))
	for i, o := range b.ops {
		switch {
		case b.cached[i] != nil:
			var now time.Time
			if err := scanLockIfUnchanged(results.QueryRow(), &now); err != nil {
				results.Close()
				return err
			}
			at := time.Now()
			b.c.cache.observe(now, at)
			b.txs[i].resume(b.cached[i], now.UTC(), at, o.Checkpoint)
			b.txs[i].version = b.cached[i].version + 1
		case b.txs[i] != nil:
			var err error
			if stale[i], err = b.txs[i].readBegin(results, o.Checkpoint); err == coordinator.ErrNotFound {
				b.txs[i].job = nil
			} else if err != nil {
				results.Close()
				return err
			}
		}
	}
	if err := results.Close(); err != nil {
		return err
	}
	var notLocked []string
	for i, o := range b.ops {
		if b.txs[i] != nil && b.txs[i].job == nil {
			notLocked = append(notLocked, o.Job)
		}
	}
	if err := b.findLockedElsewhere(notLocked...); err != nil {
		return err
	}
	for i, o := range b.ops {
		if stale[i] {
			if err := b.txs[i].readState(o.Checkpoint); err != nil {
				return err
			}
		}
	}
	return nil
}

// run runs every update of the batch in turn, and those that join it before it commits.
// A rejection is an answer; any other error fails the batch.
func (b *batch) run() error {
	for i := 0; ; i++ {
		if i == len(b.ops) && !b.takeJoiners() {
			return nil
		}
		o, t := b.ops[i], b.txs[i]
		if b.elsewhere[o.Job] {
			b.setAside(o)
			continue
		}
		if t == nil {
			// An earlier update of the batch took this job's lock (or found it missing).
			t = b.newTx()
			if prev := b.last[o.Job]; prev == nil || !prev.handOn(t, o.Checkpoint) {
				b.errs[i] = t.begin(o.Job, o.Checkpoint, b.locked[o.Job])
			}
			if b.errs[i] == coordinator.ErrNotFound && !b.locked[o.Job] {
				if err := b.findLockedElsewhere(o.Job); err != nil {
					return err
				}
				if b.elsewhere[o.Job] {
					b.setAside(o)
					continue
				}
			}
		}
		switch {
		case b.errs[i] == errDeferred:
			b.setAside(o)
			continue
		case b.errs[i] == coordinator.ErrNotFound:
			b.answers, b.decided = append(b.answers, b.errs[i]), append(b.decided, nil)
			continue
		case b.errs[i] != nil:
			return b.errs[i]
		}
		b.locked[o.Job] = true
		if !o.Start() {
			b.answers, b.decided = append(b.answers, errSkipped), append(b.decided, nil)
			continue
		}
		fnErr := o.Fn(t)
		if fnErr != nil && !coordinator.IsRejection(fnErr) {
			return fnErr
		}
		b.answers, b.decided = append(b.answers, fnErr), append(b.decided, t.decided)
		if t.announced {
			b.announced = append(b.announced, o.Job)
		}
		b.handOver(o.Job, t)
		b.last[o.Job] = t
		b.recorded = append(b.recorded, t.recorded...)
	}
}

// setAside hands an update of a job locked elsewhere back to the dispatcher, unanswered,
// with every later update of the job in the batch, so that they keep their order.
func (b *batch) setAside(o *groupcommit.Op) {
	b.elsewhere[o.Job] = true
	b.deferred = append(b.deferred, o)
	b.answers, b.decided = append(b.answers, errDeferred), append(b.decided, nil)
}

// findLockedElsewhere notes, among jobs whose lock statement found no row to lock, those
// that exist: another transaction holds their row locked (lockJobSQL skips a locked row
// rather than wait for it: DESIGN.md, invariant 12).
func (b *batch) findLockedElsewhere(jobs ...string) error {
	if len(jobs) == 0 {
		return nil
	}
	results, err := b.queue.send(b.ctx, b.conn, func(q *pgx.Batch) {
		for _, job := range jobs {
			q.Queue(jobExistsSQL, job)
		}
	})
	if err != nil {
		return err
	}
	for _, job := range jobs {
		var exists bool
		if err := results.QueryRow().Scan(&exists); err != nil {
			results.Close()
			return err
		}
		if exists {
			b.elsewhere[job] = true
		}
	}
	return results.Close()
}

// handover is what a batch did to one job, as far as the job's waiters on any change need
// to know: the job's version before the batch's first update of it that ran (from), with
// the since that update began with, and after its last (to); the checkpoints it opened
// or changed; whether that wakes those waiters (a checkpoint opened or decided); and
// whether the batch changed nothing of the job but its checkpoints.
type handover struct {
	since, from, to int64
	now             time.Time
	touched         []int64
	wakes           bool
	onlyCheckpoints bool
}

// handOver notes what update t, which ran, did to job. The versions of one job's updates
// in a batch follow one another (the batch holds the job's lock): t.version is the one
// its update leaves, one above the one it began from, or the same as the update before
// it when it was handed on. An update before t that did not run (given up on) may have
// raised the version already: from is then above the version before the batch, which
// the waiters may have read, and since is not known (the update that did not run changed
// nothing else, but nothing tells it here): the hand-over follows from alone.
func (b *batch) handOver(job string, t *jobTx) {
	h := b.handovers[job]
	if h == nil {
		if b.handovers == nil {
			b.handovers = map[string]*handover{}
		}
		h = &handover{since: t.since, from: t.version - 1, onlyCheckpoints: true}
		b.handovers[job] = h
	}
	h.to, h.now = t.version, t.now
	h.touched = append(h.touched, t.touched...)
	h.wakes = h.wakes || t.announced || len(t.decided) > 0
	h.onlyCheckpoints = h.onlyCheckpoints && !t.changedJob && t.version > 0
}

// changes returns, per job whose waiters on any change this batch wakes, what they are
// handed (coordinator.Changed): the checkpoints it opened or changed, copied from what its
// last update of the job holds, if the batch changed nothing else of the job and that
// update holds them all; jobs it cannot tell so are not in it (their waiters read).
func (b *batch) changes() map[string]*coordinator.Changed {
	var out map[string]*coordinator.Changed
	for job, h := range b.handovers {
		t := b.last[job]
		if !h.wakes || !h.onlyCheckpoints || t == nil || t.checkpoints == nil || !t.canCache {
			continue
		}
		c := &coordinator.Changed{Since: h.since, From: h.from, To: h.to, Now: h.now}
		if c.Since == 0 || c.Since > c.From {
			c.Since = c.From // nothing known before the batch: only a waiter that read from follows
		}
		for _, id := range h.touched {
			cp := t.checkpoints[id]
			if cp == nil {
				c = nil
				break
			}
			if !slices.ContainsFunc(c.Checkpoints, func(k *coordinator.Checkpoint) bool { return k.ID == id }) {
				c.Checkpoints = append(c.Checkpoints, cp.Clone()) // with the Seq the database gave it
			}
		}
		if c != nil {
			if out == nil {
				out = map[string]*coordinator.Changed{}
			}
			out[job] = c
		}
	}
	return out
}

// takeJoiners asks the dispatcher for the updates that came for the batch's jobs, waiting
// for followers as the linger policy allows, and adds them; false if none came.
func (b *batch) takeJoiners() bool {
	if !b.join {
		return false
	}
	await := awaited(b.recorded, b.last)
	if len(await) > 0 && b.lingerEnd.IsZero() {
		b.lingerEnd = time.Now().Add(joinWait)
	}
	more := b.c.more(len(b.ops), b.locked, await, b.lingerEnd)
	if len(more) == 0 {
		return false
	}
	b.ops = append(b.ops, more...)
	b.txs = append(b.txs, make([]*jobTx, len(more))...)
	b.errs = append(b.errs, make([]error, len(more))...)
	return true
}

// finish commits, then caches what each job's last update left, tells this process's
// waiters of the decisions and answers every update.
func (b *batch) finish(began time.Time) error {
	if b.queue.notifies {
		b.queue.add("wait for the notification lock", commitLockWaitSQL)
	}
	b.queue.add("commit", "COMMIT")
	if err := b.queue.flush(b.ctx, b.conn); err != nil {
		// The decisions may have committed: their waiters read to find out, not from the
		// states the batch began from.
		b.releaseCached()
		for _, cps := range b.decided {
			for _, cp := range cps {
				b.c.store.broker.Notify(cp.Job, cp.ID)
			}
		}
		for _, job := range b.announced {
			b.c.store.broker.NotifyJob(job)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) || pgconn.SafeToRetry(err) {
			// The database refused, or nothing reached it: nothing was committed.
			return fmt.Errorf("commit: %w", err)
		}
		// The connection broke once COMMIT may have reached the database: it may have
		// committed. Running the updates again could apply one twice (a second checkpoint
		// for one prepare, an epoch moved by two): each is answered that its outcome is
		// unknown instead (DESIGN.md, invariant 13).
		for i, o := range b.ops {
			if a := b.answers[i]; a != errDeferred && a != errSkipped {
				o.Finish(outcomeUnknown(err))
			}
		}
		return fmt.Errorf("%w: %w", errOutcomeUnknown, err)
	}
	changes := b.changes() // before the cache takes what the jobs' last updates hold
	for _, o := range b.ops {
		if t := b.last[o.Job]; t != nil {
			b.last[o.Job] = nil
			b.c.cache.put(t, t.version, began)
		}
	}
	b.releaseCached() // the jobs taken whose updates did not run (given up on, set aside)
	// The waiters of any change of a job are handed what changed, or told to read; then
	// the waiters of each decided checkpoint get it.
	for job, c := range changes {
		b.c.store.broker.PublishChanged(job, c)
	}
	for _, job := range b.announced {
		if changes[job] == nil {
			b.c.store.broker.NotifyJob(job)
		}
	}
	for i, o := range b.ops {
		for _, cp := range b.decided[i] {
			if changes[cp.Job] != nil {
				b.c.store.broker.PublishDecided(cp)
			} else {
				b.c.store.broker.Publish(cp)
			}
		}
		if a := b.answers[i]; a != errDeferred && a != errSkipped {
			o.Finish(a)
		}
	}
	return nil
}

// releaseCached gives up the busy states the batch took and did not put back: it failed,
// or none of a job's updates ran.
func (b *batch) releaseCached() {
	for i, st := range b.cached {
		if st != nil {
			b.c.cache.release(b.ops[i].Job)
		}
	}
}

// outcomeUnknown is the answer to an update whose transaction's COMMIT got no answer.
func outcomeUnknown(cause error) error {
	return &coordinator.Error{Code: coordinator.CodeUnavailable, Err: cause,
		Message: "the connection to the database broke while the request's transaction was committing: " +
			"it may have been applied; retry it (a prepare with the same Idempotency-Key), or read the state"}
}

// awaited returns the jobs on whose checkpoints the batch recorded a vote (or an ack) and
// that, as the batch left them, still miss votes (preparing) or acks (committing): the
// other participants' may be on their way, independently of this batch. (Not after a
// prepare or a decision: what follows those needs the batch's answer first.)
func awaited(recs []recorded, last map[string]*jobTx) map[string]bool {
	var await map[string]bool
	for _, r := range recs {
		t := last[r.job]
		if t == nil || t.checkpoints == nil || t.checkpoints[r.id] == nil {
			continue
		}
		cp := t.checkpoints[r.id]
		for _, p := range cp.Participants {
			if !r.ack && cp.Status == coordinator.StatusPreparing && p.Vote == "" || r.ack && cp.Status == coordinator.StatusCommitting && p.AckedAt == nil {
				if await == nil {
					await = map[string]bool{}
				}
				await[r.job] = true
				break
			}
		}
	}
	return await
}
