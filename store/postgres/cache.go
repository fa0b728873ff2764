package postgres

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twophase/coordinator/coordinator"
)

// The committer keeps, for each job it recently changed, the state its last committed batch
// left: the job's row, its preparing and committing checkpoints, and the job's version, so
// that the next batch can run the rules at once on an estimate of the database's clock and
// send the check with its writes and COMMIT. Why that is safe: DESIGN.md, invariants 1-6.

// errStale is a failed lockIfUnchangedSQL: the cached state is not the database's.
var errStale = errors.New("postgres: cached job state is stale")

// scanLockIfUnchanged reads lockIfUnchangedSQL's row: the clock, or errStale.
func scanLockIfUnchanged(row pgx.Row, now *time.Time) error {
	var one int64
	err := row.Scan(now, &one)
	if isDivisionByZero(err) {
		return fmt.Errorf("%w (%w)", errStale, err) // the database's answer: nothing committed
	}
	return err
}

// isDivisionByZero tells the error with which a check fails its transaction.
func isDivisionByZero(err error) bool {
	if err == nil {
		return false // and no PgError to escape to the heap: it is asked of every check's row
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22012"
}

// jobState is what a committed batch left of a job, valid while its version is version
// (DESIGN.md, invariant 1). Nothing in it changes once cached: readers share it.
type jobState struct {
	version     int64
	job         *coordinator.Job
	checkpoints map[int64]*coordinator.Checkpoint // every preparing checkpoint, and the others it read that anyone may owe on
	lastNow     time.Time                         // the clock its last update used
	// owedOutside and knowsOwed are the jobTx's: the checkpoints owed on that it does not
	// hold, whether that list is whole. With none, checkpoints holds every checkpoint on
	// which anyone may owe something.
	owedOutside []int64
	knowsOwed   bool
	// since is the jobTx's: every change from it to version was this process's and changed
	// only checkpoints (coordinator.Changed).
	since int64
}

// maxCachedJobs bounds the cache; past it, jobs not cached yet are not.
const maxCachedJobs = 10000

// maxCachedCheckpoints bounds one job's cached checkpoints; a job with more is not cached.
const maxCachedCheckpoints = 64

// clockAnchorAge is how long a reading of the database's clock may be used for estimates.
const clockAnchorAge = 5 * time.Second

// contendedFor is how long a job is not cached once its cached state was found stale:
// another process changes it too, and a check that fails costs a round trip.
const contendedFor = time.Second

type stateCache struct {
	mu   sync.Mutex
	jobs map[string]*jobState
	// busy holds the states that batches took and have not put back yet: a batch's
	// changes are published only after it puts back what it left (or after release), so
	// what pending is told of a job may come from the state it began from meanwhile
	// (DESIGN.md, invariant 14). The batch's own copies are its own; these stay unchanged.
	busy   map[string]*jobState
	stale  map[string]time.Time // jobs whose cached state was found stale, and when
	db, at time.Time            // the database's clock as last read, and when (local, monotonic)

	// What another process decided, as the listener hears it: per job, when it last
	// heard of one; everything, when it may have missed some (since until when it
	// listened again). A job's state is cached only from a batch that began after both.
	foreign    map[string]time.Time
	allForeign time.Time
	listening  bool
}

func newStateCache() *stateCache {
	return &stateCache{jobs: map[string]*jobState{}, busy: map[string]*jobState{}, stale: map[string]time.Time{}, foreign: map[string]time.Time{}}
}

// take removes and returns job's cached state, nil if none, for a batch, which puts back
// what it leaves (put), or releases the job if it fails (release). Until then the state
// stays busy: what pending may be told (knownOwing, knownVersion), not what another batch
// may take.
func (c *stateCache) take(job string) *jobState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.jobs[job]
	delete(c.jobs, job)
	if st != nil {
		c.busy[job] = st
	}
	return st
}

// release forgets the busy states of jobs whose batch failed: it may have committed
// something (its outcome unknown) that its waiters must read, or found the state stale.
// A batch that failed calls it before it wakes any waiter.
func (c *stateCache) release(jobs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, job := range jobs {
		delete(c.busy, job)
	}
}

// known returns what pending may be told of job: its cached state, or the one a batch
// took and has not put back; nil while the listener is not listening. c.mu is held.
func (c *stateCache) known(job string) *jobState {
	if !c.listening {
		return nil
	}
	if st := c.jobs[job]; st != nil {
		return st
	}
	return c.busy[job]
}

// put caches what t, the last update of its job in a committed batch begun at began, left,
// or forgets the job if that cannot be cached.
func (c *stateCache) put(t *jobTx, version int64, began time.Time) {
	st := t.cacheState(version)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.busy, t.job.Name)
	if c.allForeign.After(began) || c.foreign[t.job.Name].After(began) {
		// Another process may have decided on the job after the batch's lock: not cached,
		// so that knownPreparing never trusts a state older than a decision it heard of.
		st = nil
	}
	if at, ok := c.stale[t.job.Name]; ok {
		if time.Since(at) < contendedFor {
			st = nil
		} else {
			delete(c.stale, t.job.Name)
		}
	}
	switch {
	case st == nil:
		delete(c.jobs, t.job.Name)
	case len(c.jobs) < maxCachedJobs || c.jobs[t.job.Name] != nil:
		c.jobs[t.job.Name] = st
	}
}

// forget drops job's cached state: the job was changed outside the committer (PutJob).
func (c *stateCache) forget(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs, job)
	delete(c.busy, job)
}

// heardForeign notes that another process decided on job: what is cached of it may be
// stale (the committer's check would find out; knownPreparing cannot).
func (c *stateCache) heardForeign(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs, job)
	delete(c.busy, job)
	if len(c.foreign) >= maxCachedJobs {
		clear(c.foreign)
		clear(c.jobs)
		clear(c.busy)
		c.allForeign = time.Now()
	}
	c.foreign[job] = time.Now()
}

// listen notes whether the listener is listening; when it starts again, decisions of
// other processes may have been missed meanwhile, so nothing cached before is kept.
func (c *stateCache) listen(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listening = on
	clear(c.jobs)
	clear(c.busy)
	clear(c.foreign)
	c.allForeign = time.Now()
}

// knownPreparing reports whether checkpoint id of job is preparing by what this process
// knows, without a read (knownCheckpoint).
func (c *stateCache) knownPreparing(job string, id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := c.knownCheckpoint(job, id)
	return cp != nil && cp.Status == coordinator.StatusPreparing
}

// knownDecided returns a copy of checkpoint id of job if, by what this process knows
// without a read (knownCheckpoint), it is decided; nil otherwise.
func (c *stateCache) knownDecided(job string, id int64) *coordinator.Checkpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := c.knownCheckpoint(job, id)
	if cp == nil || cp.Status == coordinator.StatusPreparing {
		return nil
	}
	return cp.Clone()
}

// knownCheckpoint returns checkpoint id of job as this process knows it without a read: in
// its cached state, or in the state a batch took and has not put back, while the listener
// is listening (DESIGN.md, invariant 6); nil if it does not. Shared: read only. c.mu is
// held.
func (c *stateCache) knownCheckpoint(job string, id int64) *coordinator.Checkpoint {
	if st := c.known(job); st != nil {
		return st.checkpoints[id]
	}
	return nil
}

// knownVersion returns job's version by what this process knows, without a read: its
// cached state's, while the listener is listening (DESIGN.md, invariant 6).
func (c *stateCache) knownVersion(job string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.known(job)
	if st == nil {
		return 0, false
	}
	return st.version, true
}

// knownOwing returns job as this process knows it without a read, while the listener is
// listening: the job at its cached version, the clock its last update used and the
// checkpoints on which anyone may owe something, lowest id first, if the cache holds every
// such checkpoint (DESIGN.md, invariant 14). What it returns is shared: read only.
func (c *stateCache) knownOwing(job string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, bool) {
	c.mu.Lock()
	st := c.known(job)
	c.mu.Unlock()
	if st == nil || !st.knowsOwed || len(st.owedOutside) > 0 {
		return nil, time.Time{}, nil, false
	}
	var owing []*coordinator.Checkpoint
	for _, cp := range st.checkpoints {
		if coordinator.MayOwe(cp, "") {
			owing = append(owing, cp)
		}
	}
	slices.SortFunc(owing, func(a, b *coordinator.Checkpoint) int { return cmp.Compare(a.ID, b.ID) })
	j := *st.job
	j.Version = st.version
	return &j, st.lastNow, owing, true
}

// contended notes that job's cached state was found stale (or may have been: the batch
// that found it had other jobs too); the job is not cached for contendedFor.
func (c *stateCache) contended(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.stale) >= maxCachedJobs {
		clear(c.stale)
	}
	c.stale[job] = time.Now()
}

// observe notes a reading of the database's clock, received at local time at; of the
// readings of the last second, it keeps the one that shows the database's clock furthest
// ahead of the local one (DESIGN.md, invariant 3).
func (c *stateCache) observe(db, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || at.Sub(c.at) > time.Second || db.Sub(at) > c.db.Sub(c.at) {
		c.db, c.at = db, at
	}
}

// estimate returns the database's clock estimated from the last reading, not before
// notBefore, and false if there is no recent reading.
func (c *stateCache) estimate(notBefore time.Time) (time.Time, bool) {
	c.mu.Lock()
	db, at := c.db, c.at
	c.mu.Unlock()
	elapsed := time.Since(at)
	if at.IsZero() || elapsed > clockAnchorAge {
		return time.Time{}, false
	}
	now := db.Add(elapsed).Truncate(time.Microsecond)
	if now.Before(notBefore) {
		now = notBefore
	}
	return now, true
}

// cacheState returns what the cache keeps of t once its batch has committed, nil if it
// cannot be kept.
func (t *jobTx) cacheState(version int64) *jobState {
	if !t.canCache || t.checkpoints == nil || version == 0 {
		return nil
	}
	open := make(map[int64]*coordinator.Checkpoint)
	for id, cp := range t.checkpoints {
		if cp.Status == coordinator.StatusPreparing || cp.Status == coordinator.StatusCommitting || coordinator.MayOwe(cp, "") {
			open[id] = cp
		}
	}
	if len(open) > maxCachedCheckpoints {
		return nil
	}
	var outside []int64
	for _, id := range t.owedOutside {
		if t.checkpoints[id] == nil {
			outside = append(outside, id) // not read since: what it owes is not known here
		}
	}
	since := t.since
	if since == 0 {
		since = version // a change to more than checkpoints, or no known start: from here on
	}
	return &jobState{version: version, job: coordinator.CloneJob(t.job), checkpoints: open, lastNow: t.now,
		owedOutside: outside, knowsOwed: t.knowsOwed, since: since}
}

// resume begins t from a cached state, as handOn does from the update before it.
func (t *jobTx) resume(st *jobState, now, nowAt time.Time, hint int64) {
	cps := make(map[int64]*coordinator.Checkpoint, len(st.checkpoints))
	for id, cp := range st.checkpoints {
		cps[id] = cp.Clone()
	}
	t.start(coordinator.CloneJob(st.job), cps, now, nowAt, hint)
	t.owedOutside, t.knowsOwed, t.since = st.owedOutside, st.knowsOwed, st.since
	t.assumeKeys = true
}
