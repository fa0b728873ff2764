package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/groupcommit"
)

// committer group-commits updates: a dispatcher takes every update queued, and whenever
// one of a few workers is free, hands it a batch of them; the worker runs them one after
// the other in one database transaction, each under its job's lock, and answers them all
// once that transaction has committed. One fsync then serves many requests, and no request
// is answered before the transaction holding its write is durable (rule 3).
//
// A job is in at most one batch at a time: its later updates join that batch if they come
// before it commits (the job's lock is held already), else wait for it to end. So workers
// never wait for each other's job locks, and a job's updates run in the order they came.
// While every worker is busy, updates pile up, and the next batch takes them all: the
// busier the coordinator, the more each transaction carries. Within a batch the jobs are
// locked in name order. If a batch fails, its updates are run again one by one, so that
// one failing update does not fail the others.
type committer struct {
	store    *Store
	queue    *groupcommit.Queue
	workers  int
	maxBatch int
	stop     chan struct{}
	done     chan struct{}
	join     chan joinRequest
	cache    *stateCache
}

// joinRequest asks the dispatcher, for a batch about to commit, for the updates that came
// meanwhile for its jobs (whose locks it holds), up to max. If none came, but the batch
// awaits some (await: jobs whose checkpoint still misses votes or acks), the dispatcher
// may hold the answer until one comes, or until until (lingerPolicy).
type joinRequest struct {
	jobs  map[string]bool
	await map[string]bool
	until time.Time
	max   int
	reply chan []*groupcommit.Op
}

// defaultWriters is how many batches commit at once unless Options.Writers says: on two
// cores with PostgreSQL on the same machine, 2 did 5-15 % more rounds at 16 jobs than 3,
// and 3 more than 5 or 8 (cmd/coordinator/BENCH.md); one would stall everything behind a
// batch waiting for a lock another process holds.
const defaultWriters = 2

// batchTimeout bounds one group commit; requests give up earlier on their own deadline.
const batchTimeout = 20 * time.Second

// maxAttempts bounds the retries of an update that hit a serialisation failure or deadlock.
const maxAttempts = 5

func newCommitter(s *Store, workers, maxBatch int) *committer {
	if workers <= 0 {
		workers = defaultWriters
	}
	if maxBatch <= 0 {
		maxBatch = 64
	}
	stop := make(chan struct{})
	c := &committer{store: s, queue: groupcommit.NewQueue(stop), workers: workers, maxBatch: maxBatch,
		stop: stop, done: make(chan struct{}), join: make(chan joinRequest), cache: newStateCache()}
	go c.dispatch()
	return c
}

func (c *committer) close() {
	close(c.stop)
	<-c.done
}

func (c *committer) update(ctx context.Context, job string, checkpoint int64, fn func(coordinator.JobTx) error) error {
	return c.queue.Submit(ctx, job, checkpoint, fn)
}

// dispatch hands batches to workers until the committer stops, then waits for the batches
// running and answers what was left as unavailable.
func (c *committer) dispatch() {
	defer close(c.done)
	finished := make(chan []*groupcommit.Op, c.workers)
	busy := map[string]bool{} // jobs in a running batch
	var waiting []*groupcommit.Op
	var parked []joinRequest            // join requests held for followers, oldest first
	linger := newLingerPolicy(time.Now) // whether they may be held
	running := 0
	arrivals := c.queue.Arrivals()
	for {
		for running < c.workers {
			batch := c.next(&waiting, busy)
			if len(batch) == 0 {
				break
			}
			running++
			go func() { finished <- c.run(batch) }()
		}
		take := func() {
			for len(waiting) < 4*c.maxBatch {
				select {
				case o := <-arrivals:
					if c.queue.Claim(o) {
						waiting = append(waiting, o)
					}
				default:
					return
				}
			}
		}
		// answer answers a join request with the updates waiting for its jobs; if there are
		// none, it parks the request instead while linger lets the batch wait, and answers it
		// empty once not.
		answer := func(req joinRequest) bool {
			var joined []*groupcommit.Op
			rest := waiting[:0]
			for _, o := range waiting {
				switch {
				case len(joined) >= req.max || !req.jobs[o.Job]:
					rest = append(rest, o)
				case o.Ctx.Err() != nil:
					o.Finish(o.Ctx.Err())
				default:
					joined = append(joined, o)
				}
			}
			clear(waiting[len(rest):])
			waiting = rest
			if len(joined) > 0 {
				linger.joined(req.await)
			} else if linger.keepWaiting(req.await, req.until) {
				return false
			}
			req.reply <- joined
			return true
		}
		reanswer := func() {
			still := parked[:0]
			for _, req := range parked {
				if !answer(req) {
					still = append(still, req)
				}
			}
			clear(parked[len(still):])
			parked = still
		}
		var wake <-chan time.Time
		if len(parked) > 0 {
			first := parked[0].until
			for _, req := range parked[1:] {
				if req.until.Before(first) {
					first = req.until
				}
			}
			wake = time.After(time.Until(first))
		}
		select {
		case o := <-arrivals:
			if c.queue.Claim(o) {
				waiting = append(waiting, o)
			}
			take()
			reanswer()
		case req := <-c.join:
			take()
			if !answer(req) {
				parked = append(parked, req)
			}
		case <-wake:
			reanswer()
		case batch := <-finished:
			running--
			for _, o := range batch {
				delete(busy, o.Job)
			}
		case <-c.stop:
			for _, req := range parked {
				req.reply <- nil
			}
			for ; running > 0; running-- {
				<-finished
			}
			for _, o := range waiting {
				o.Finish(coordinator.Unavailable(groupcommit.ErrClosed))
			}
			c.queue.Drain()
			return
		}
	}
}

// next takes from waiting, in order, up to maxBatch updates whose job is in no running
// batch, marks their jobs busy and returns them. Updates whose context ended are
// answered and dropped.
func (c *committer) next(waiting *[]*groupcommit.Op, busy map[string]bool) []*groupcommit.Op {
	var batch []*groupcommit.Op
	inBatch := map[string]bool{}
	rest := (*waiting)[:0]
	for _, o := range *waiting {
		switch {
		case len(batch) >= c.maxBatch || busy[o.Job] && !inBatch[o.Job]:
			rest = append(rest, o)
		case o.Ctx.Err() != nil:
			o.Finish(o.Ctx.Err())
		default:
			batch = append(batch, o)
			inBatch[o.Job] = true
			busy[o.Job] = true
		}
	}
	clear((*waiting)[len(rest):])
	*waiting = rest
	return batch
}

// run commits a batch, or its updates one by one if the batch fails, and returns its
// updates, with those that joined it.
func (c *committer) run(batch []*groupcommit.Op) []*groupcommit.Op {
	slices.SortStableFunc(batch, func(a, b *groupcommit.Op) int { return strings.Compare(a.Job, b.Job) })
	ops, err := c.commit(batch, true, true)
	if err == nil {
		return ops
	}
	// The jobs' cached states were taken by the batch, and are not put back: what follows
	// reads every job under its lock.
	if errors.Is(err, errStale) {
		// Another process changed a cached job: nothing was committed; run the batch again.
		// Its jobs are not cached for a while: another process is changing them too.
		for _, o := range ops {
			c.cache.contended(o.Job)
		}
		if _, err = c.commit(ops, false, false); err == nil {
			return ops
		}
	}
	for _, o := range ops {
		if len(ops) > 1 {
			_, err = c.commit([]*groupcommit.Op{o}, false, false)
		}
		for attempt := 1; retryable(err) && attempt < maxAttempts; attempt++ {
			_, err = c.commit([]*groupcommit.Op{o}, false, false)
		}
		if err != nil {
			o.Finish(translate(err))
		}
	}
	return ops
}

// more returns the updates that came, while the batch ops ran, for the jobs of ops: they
// join the batch before it commits (their jobs' locks are held already, so no lock is
// taken out of order), instead of waiting for a transaction of their own.
func (c *committer) more(ops []*groupcommit.Op, await map[string]bool, until time.Time) []*groupcommit.Op {
	if len(ops) >= c.maxBatch {
		return nil
	}
	jobs := make(map[string]bool, len(ops))
	for _, o := range ops {
		jobs[o.Job] = true
	}
	req := joinRequest{jobs: jobs, await: await, until: until, max: c.maxBatch - len(ops), reply: make(chan []*groupcommit.Op, 1)}
	select {
	case c.join <- req:
		return <-req.reply
	case <-c.stop:
		return nil
	}
}

// commit runs the updates in one transaction, with those that join it if join is true.
// On success it answers every update and returns nil; on failure it answers none and
// returns the error. Either way it returns the updates it took.
func (c *committer) commit(ops []*groupcommit.Op, join, useCache bool) (_ []*groupcommit.Op, err error) {
	// A failed check fails the transaction, and every statement after it: whatever error
	// the batch ends with (a rule may have wrapped it, or not), it is errStale then.
	stale := false
	defer func() {
		if err != nil && stale && !errors.Is(err, errStale) {
			err = fmt.Errorf("%w (%w)", errStale, err)
		}
	}()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	pooled, err := c.store.pool.Acquire(ctx)
	if err != nil {
		return ops, fmt.Errorf("acquire connection: %w", err)
	}
	defer func() {
		// After a failed statement the transaction is aborted: end it, so that the pool
		// keeps the connection (one left inside a transaction is closed on release).
		if tx := pooled.Conn().PgConn().TxStatus(); tx == 'E' || tx == 'T' {
			_, _ = pooled.Conn().Exec(ctx, "ROLLBACK")
		}
		pooled.Release()
	}()
	conn := pooled.Conn()
	queue := &writeQueue{}
	queue.add("begin", "BEGIN")
	newTx := func() *jobTx {
		return &jobTx{ctx: ctx, conn: conn, write: true, queue: queue, origin: c.store.origin, cache: c.cache}
	}
	// The first update of each job (ops are sorted by job) begins from the job's cached
	// state if there is one (cache.go), else from what it reads under the lock.
	txs := make([]*jobTx, len(ops))
	errs := make([]error, len(ops))
	cached := make([]*jobState, len(ops))
	estimates := make([]time.Time, len(ops))
	reads := false
	for i, o := range ops {
		if i > 0 && ops[i-1].Job == o.Job {
			continue
		}
		txs[i] = newTx()
		if useCache {
			cached[i] = c.cache.take(o.Job)
		}
		if cached[i] == nil {
			reads = true
		} else {
			var ok bool
			if estimates[i], ok = c.cache.estimate(cached[i].lastNow); !ok {
				reads = true
			}
		}
	}
	if reads {
		if err := c.begin(ops, txs, cached); err != nil {
			return ops, err
		}
	} else {
		// Every job is cached: their checks go with the writes and COMMIT, in one round
		// trip, and the rules run on the estimated clock.
		for i, o := range ops {
			if st := cached[i]; st != nil {
				queue.addScan("check the cached state of job "+o.Job, func(row pgx.Row) error {
					var db time.Time
					err := scanCheck(row, &db)
					if err == nil {
						c.cache.observe(db, time.Now())
					}
					stale = stale || errors.Is(err, errStale)
					return err
				}, checkSQL, o.Job, st.version, estimates[i])
				txs[i].resume(st, estimates[i], time.Now(), o.Checkpoint)
				txs[i].version = st.version + 1
			}
		}
	}
	locked := make(map[string]bool, len(ops))
	var lingerUntil time.Time // how long the batch may wait for followers (joinWait), once it does
	var recs []recorded       // the votes and acks the batch recorded
	for i, o := range ops {
		if txs[i] != nil && txs[i].job != nil {
			locked[o.Job] = true
		} else if txs[i] != nil {
			errs[i] = coordinator.ErrNotFound
		}
	}
	last := make(map[string]*jobTx, len(ops)) // the job's latest update in the batch
	answers := make([]error, 0, len(ops))
	decided := make([][]*coordinator.Checkpoint, 0, len(ops))
	for i := 0; ; i++ {
		if i == len(ops) {
			more := []*groupcommit.Op(nil)
			if join {
				await := awaited(recs, last)
				if len(await) > 0 && lingerUntil.IsZero() {
					lingerUntil = time.Now().Add(joinWait)
				}
				more = c.more(ops, await, lingerUntil)
			}
			if len(more) == 0 {
				break
			}
			ops = append(ops, more...)
			txs = append(txs, make([]*jobTx, len(more))...)
			errs = append(errs, make([]error, len(more))...)
		}
		o, t := ops[i], txs[i]
		if t == nil {
			// An earlier update of the batch took this job's lock (or found it missing).
			t = newTx()
			if prev := last[o.Job]; prev == nil || !prev.carry(t, o.Checkpoint) {
				errs[i] = t.begin(o.Job, o.Checkpoint, locked[o.Job])
			}
		}
		if errs[i] == nil {
			locked[o.Job] = true
		}
		if errs[i] != nil {
			if errs[i] == coordinator.ErrNotFound {
				answers, decided = append(answers, errs[i]), append(decided, nil)
				continue
			}
			return ops, errs[i]
		}
		fnErr := o.Fn(t)
		if fnErr != nil && !coordinator.IsRejection(fnErr) {
			return ops, fnErr
		}
		answers, decided = append(answers, fnErr), append(decided, t.decided)
		last[o.Job] = t
		recs = append(recs, t.recorded...)
	}
	queue.add("commit", "COMMIT")
	if err := queue.flush(ctx, conn); err != nil {
		// The decisions may have committed: their waiters read to find out.
		for _, cps := range decided {
			for _, cp := range cps {
				c.store.broker.Notify(cp.Job, cp.ID)
			}
		}
		return ops, fmt.Errorf("commit: %w", err)
	}
	for _, o := range ops {
		if t := last[o.Job]; t != nil {
			last[o.Job] = nil
			c.cache.put(t, t.version, began)
		}
	}
	for i, o := range ops {
		for _, cp := range decided[i] {
			c.store.broker.Publish(cp)
		}
		o.Finish(answers[i])
	}
	return ops, nil
}

// awaited returns the jobs on whose checkpoints the batch recorded a vote (or an ack) and
// that, as the batch left them, still miss votes (preparing) or acks (committing): the
// other participants' may be on their way, independently of this batch. (Not after a
// prepare or a decision: what follows those needs the batch's answer first.)
func awaited(recs []recorded, last map[string]*jobTx) map[string]bool {
	var await map[string]bool
	for _, r := range recs {
		t := last[r.job]
		if t == nil || t.known == nil || t.known[r.id] == nil {
			continue
		}
		cp := t.known[r.id]
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

// begin reads, in one round trip, the state of the first update of each job of ops (ops
// are sorted by job, and the locks are taken in that order): a cached job is checked
// (checkSQL), and begins from its cached state with the clock the check read; the others
// are locked and read. A job found missing leaves its jobTx without a job.
func (c *committer) begin(ops []*groupcommit.Op, txs []*jobTx, cached []*jobState) error {
	queue := txs[0].queue
	results, err := queue.send(txs[0].ctx, txs[0].conn, func(b *pgx.Batch) {
		for i, o := range ops {
			switch {
			case cached[i] != nil:
				b.Queue(checkSQL, o.Job, cached[i].version, nil)
			case txs[i] != nil:
				txs[i].queueBegin(b, o.Job, o.Checkpoint)
			}
		}
	})
	if err != nil {
		return err
	}
	stale := make([]bool, len(ops))
	for i, o := range ops {
		switch {
		case cached[i] != nil:
			var now time.Time
			if err := scanCheck(results.QueryRow(), &now); err != nil {
				results.Close()
				return err
			}
			at := time.Now()
			c.cache.observe(now, at)
			txs[i].resume(cached[i], now.UTC(), at, o.Checkpoint)
			txs[i].version = cached[i].version + 1
		case txs[i] != nil:
			var err error
			if stale[i], err = txs[i].readBegin(results, o.Checkpoint); err == coordinator.ErrNotFound {
				txs[i].job = nil
			} else if err != nil {
				results.Close()
				return err
			}
		}
	}
	if err := results.Close(); err != nil {
		return err
	}
	for i, o := range ops {
		if stale[i] {
			if err := txs[i].readState(o.Checkpoint); err != nil {
				return err
			}
		}
	}
	return nil
}
