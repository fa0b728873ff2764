package postgres

import "time"

// The bounds of lingerPolicy.
const (
	joinWait     = time.Millisecond // how long a batch may wait for the votes (or acks) it awaits
	vainTries    = 3                // vain waits in a row before a job is given up on
	lingerOff    = time.Second      // how long a job is given up on the first time
	maxLingerOff = time.Minute      // and at most, however often it is given up on
)

// lingerPolicy decides whether a batch about to commit, which recorded a vote (or an ack)
// on a checkpoint still missing others, may wait for them, up to joinWait, before it
// commits: the participants of a checkpoint often vote within a fraction of a millisecond
// of each other, and a vote that misses the batch of the one before waits for its commit,
// then takes one of its own. The vote (or ack) that completes a checkpoint never waits: its
// batch awaits nothing.
//
// A job whose batches waited in vain vainTries times in a row is given up on: it is not
// waited for during lingerOff (its participants vote apart: waiting would only delay
// them). Given up on again, it is given up on for twice as long as the last time, up to
// maxLingerOff: after vainTries vain waits in a row again, or after a single one if it
// comes within twice the last give-up period of its start. A wait that succeeds forgets
// all that. Past maxCachedJobs jobs, the policy forgets every job.
//
// The dispatcher alone uses it (it is not safe for concurrent use); its clock is now.
type lingerPolicy struct {
	now  func() time.Time
	jobs map[string]*lingerRecord // the jobs waited for in vain since their last success
}

// lingerRecord is what a lingerPolicy knows of a job waited for in vain.
type lingerRecord struct {
	vainInARow int           // vain waits since the job was first waited for, or last given up on
	givenUpAt  time.Time     // when the job was last given up on
	givenUpFor time.Duration // for how long; zero if it never was
}

func newLingerPolicy(now func() time.Time) *lingerPolicy {
	return &lingerPolicy{now: now, jobs: map[string]*lingerRecord{}}
}

// joined notes that updates came for a batch that awaited the jobs await: their waits
// succeeded, and they are waited for again as if they never had been in vain.
func (p *lingerPolicy) joined(await map[string]bool) {
	for job := range await {
		delete(p.jobs, job)
	}
}

// keepWaiting is asked when no update came for a batch that awaits the jobs await and may
// wait until until. It reports whether the batch may go on waiting: before until, if it
// awaits any job not given up on; once until has passed, never, and the wait counts as
// in vain for every one of the jobs (given up on or not). A batch that awaits no job never
// waits, and nothing is counted.
func (p *lingerPolicy) keepWaiting(await map[string]bool, until time.Time) bool {
	if len(await) == 0 {
		return false
	}
	now := p.now()
	if now.Before(until) {
		for job := range await {
			if r := p.jobs[job]; r == nil || now.Sub(r.givenUpAt) > r.givenUpFor {
				return true
			}
		}
		return false
	}
	if len(p.jobs) > maxCachedJobs {
		clear(p.jobs)
	}
	for job := range await {
		r := p.jobs[job]
		if r == nil {
			r = &lingerRecord{}
			p.jobs[job] = r
		}
		r.vainInARow++
		if r.vainInARow >= vainTries || r.givenUpFor > 0 && now.Sub(r.givenUpAt) < 2*r.givenUpFor {
			// Given up on: for twice as long as the last time, and at once if it was lately.
			r.vainInARow, r.givenUpAt = 0, now
			r.givenUpFor = min(max(2*r.givenUpFor, lingerOff), maxLingerOff)
		}
	}
	return false
}
