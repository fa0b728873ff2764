package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/twophase/coordinator/coordinator"
)

// runProperty drives coordinator.Service with random sequences of requests (jobs created,
// changed and deleted; registrations; prepares with and without Idempotency-Keys; votes
// prepared and abort with the current, a stale, a future and no epoch, from participants of
// the checkpoint and from others; commits, aborts, acks; reads) on two stores side by side:
// the reference store (memStore) and the store under test. Every answer must be the same
// on both (values, and rejections by code, message and checkpoint), and so must the whole
// observable state after every step: each job, its checkpoints in full, what each of its
// participants owes, and the checkpoints of every job in the order they opened; at the end
// of each sequence, each job's checkpoints by every status too.
//
// Timestamps differ between stores, so answers compare whether each one is set and how
// they order (equal, earlier, later), not their values; Checkpoint.Seq, likewise, by the
// order in which the checkpoints opened. Time matters to the rules only through deadlines:
// a checkpoint opens either with an hour or more to go, far beyond the test, or with 100
// ms, and then the step waits until that deadline has passed on both stores before the
// next request, so that no answer depends on how fast a store is.
//
// Each check starts a new reference store and uses jobs of its own on the store under
// test, which all checks share.
func runProperty(t *testing.T, o opener) {
	propertyChecksOnce.Do(func() { setRapidDefault("rapid.checks", propertyChecks) })
	b := o.setup(t)
	stats := &propertyStats{answers: map[string]int{}}
	rapid.Check(t, func(rt *rapid.T) {
		stats.checks++
		r := newPropertyRun(rt, b.ctx, fmt.Sprintf("r%d-", stats.checks), newMemStore(), b.store, stats)
		r.start(rt)
		rt.Repeat(r.actions())
		r.compareState(true)
	})
	t.Logf("%d checks, %d steps, %d waits past a deadline; answers: %s", stats.checks, stats.steps, stats.sleeps, stats)
}

// propertyChecks is how many random sequences runProperty tries unless -rapid.checks says
// otherwise (rapid's own default is 100): a step costs tens of round trips to a database.
// Under -short, rapid tries a fifth of them, each half as long.
const propertyChecks = "10"

var propertyChecksOnce sync.Once

// setRapidDefault sets a rapid flag unless it was given on the command line, so that the
// default run stays short and -rapid.checks=1000 still works. rapid reads its flags in
// rapid.Check, so this races with any other test of the binary in rapid.Check at the same
// time (no store's tests have one).
func setRapidDefault(name, value string) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if !given {
		_ = flag.Set(name, value)
	}
}

type propertyStats struct {
	checks, steps, sleeps int
	answers               map[string]int
}

func (s *propertyStats) String() string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s.answers)) {
		out = append(out, fmt.Sprintf("%s %d", k, s.answers[k]))
	}
	return strings.Join(out, ", ")
}

// The names a check uses: jobs (prefixed with the check's own prefix), and participants,
// of which a job has one to three; "stranger" is never one.
var (
	propertyJobs         = []string{"a", "b"}
	propertyParticipants = []string{"p1", "p2", "p3"}
	propertyOthers       = append(slices.Clone(propertyParticipants), "stranger")
)

// side is one of the two stores, with the Service on it.
type side struct {
	name string
	svc  *coordinator.Service
	// seqs numbers the Seq of each checkpoint this check opened, in the order they opened.
	seqs     map[int64]int
	firstSeq int64
}

type propertyRun struct {
	t      *rapid.T
	ctx    context.Context
	prefix string
	ref    *side
	sut    *side
	stats  *propertyStats
	jobs   []string
	// What the reference store answered, to draw requests that are likely to matter.
	highest map[string]int64            // per job, the highest checkpoint id issued
	voters  map[string][]string         // per job, its participants; nil while it does not exist
	epochs  map[string]map[string]int64 // per job, each participant's epoch
	keys    map[string][]string         // per job, the Idempotency-Keys used
	log     []string                    // the steps so far, for failure messages
}

func newPropertyRun(t *rapid.T, ctx context.Context, prefix string, ref, sut coordinator.Store, stats *propertyStats) *propertyRun {
	r := &propertyRun{
		t: t, ctx: ctx, prefix: prefix, stats: stats,
		ref:     &side{name: "reference store", svc: coordinator.NewService(ref, nil), seqs: map[int64]int{}},
		sut:     &side{name: "store under test", svc: coordinator.NewService(sut, nil), seqs: map[int64]int{}},
		highest: map[string]int64{},
		voters:  map[string][]string{},
		epochs:  map[string]map[string]int64{},
		keys:    map[string][]string{},
	}
	for _, j := range propertyJobs {
		r.jobs = append(r.jobs, prefix+j)
		r.epochs[prefix+j] = map[string]int64{}
	}
	return r
}

// start creates the check's jobs, registers most of their participants and mostly opens a
// checkpoint, so that the steps are mostly about checkpoints.
func (r *propertyRun) start(t *rapid.T) {
	r.compareState(false)
	for _, job := range r.jobs {
		r.putJobNamed(t, job)
		r.compareState(false)
		for _, p := range r.voters[job] {
			if !rarely(t, "leave "+p+" unregistered?", 5) {
				r.registerNamed(job, p)
				r.compareState(false)
			}
		}
		if !rarely(t, "no checkpoint yet?", 5) {
			r.prepareOn(t, job)
			r.compareState(false)
		}
	}
}

// actions are the steps rapid chooses from: a step listed n times is about n times as
// likely as one listed once. rapid favours the first names in sorted order, so the reads
// come first ("read ..." sorts before "write ...").
func (r *propertyRun) actions() map[string]func(*rapid.T) {
	weighted := []struct {
		name   string
		weight int
		action func(*rapid.T)
	}{
		{"read GetCheckpoint", 1, r.getCheckpoint},
		{"read GetJob", 1, r.getJob},
		{"read ListCheckpoints", 1, r.listCheckpoints},
		{"read Pending", 1, r.pending},
		{"write PutJob", 2, r.putJob},
		{"write Register", 1, r.register},
		{"write Prepare", 3, r.prepare},
		{"write Vote", 6, r.vote},
		{"write Commit", 2, r.commit},
		{"write Abort", 1, r.abort},
		{"write Ack", 3, r.ack},
		{"write DeleteJob", 1, r.deleteJob},
		{"write SweepExpired", 1, r.sweepExpired},
	}
	actions := map[string]func(*rapid.T){"": func(*rapid.T) { r.compareState(false) }}
	for _, w := range weighted {
		actions[w.name] = w.action
		for i := 2; i <= w.weight; i++ {
			actions[fmt.Sprintf("%s #%d", w.name, i)] = w.action
		}
	}
	return actions
}

// Drawing requests.

func (r *propertyRun) drawJob(t *rapid.T) string {
	return rapid.SampledFrom(r.jobs).Draw(t, "job")
}

// drawID is mostly the job's latest checkpoint, else one of the two before it, or the next,
// not opened yet.
func (r *propertyRun) drawID(t *rapid.T, job string) int64 {
	h := r.highest[job]
	if h == 0 || rarely(t, "a checkpoint not opened yet?", 10) {
		return h + 1
	}
	return h - rapid.Int64Range(0, min(2, h-1)).Draw(t, "how far back")
}

// drawParticipant is mostly one of the job's participants, else any name, the stranger
// included.
func (r *propertyRun) drawParticipant(t *rapid.T, job string) string {
	if voters := r.voters[job]; len(voters) > 0 && !rarely(t, "another name?", 5) {
		return rapid.SampledFrom(voters).Draw(t, "participant")
	}
	return rapid.SampledFrom(propertyOthers).Draw(t, "any participant")
}

// rarely is true about once in n draws. (rapid favours the ends of a range, so the rare
// case is one in the middle.)
func rarely(t *rapid.T, label string, n int) bool {
	return rapid.IntRange(0, n-1).Draw(t, label) == n/2
}

// drawEpoch is mostly the participant's current epoch, else a stale one, 0 (never
// registered) or one ahead.
func (r *propertyRun) drawEpoch(t *rapid.T, job, participant string) int64 {
	current := r.epochs[job][participant]
	switch rapid.IntRange(0, 9).Draw(t, "epoch") {
	case 4:
		return max(current-1, 0)
	case 5:
		return 0
	case 6:
		return current + 1
	}
	return current
}

func (r *propertyRun) putJob(t *rapid.T) { r.putJobNamed(t, r.drawJob(t)) }

func (r *propertyRun) putJobNamed(t *rapid.T, job string) {
	n := rapid.IntRange(1, len(propertyParticipants)).Draw(t, "participants")
	cfg := coordinator.JobConfig{
		Participants:             rapid.Permutation(propertyParticipants).Draw(t, "order")[:n],
		CheckpointTimeout:        time.Hour,
		MaxConcurrentCheckpoints: rapid.IntRange(1, 3).Draw(t, "max_concurrent_checkpoints"),
		AutoCommit:               rapid.Bool().Draw(t, "auto_commit"),
	}
	if rarely(t, "short timeout?", 20) {
		cfg.CheckpointTimeout = coordinator.MinCheckpointTimeout
	}
	r.both(t, fmt.Sprintf("PutJob(%s, %+v)", job, cfg), func(s *side, w *writer) {
		j, created, err := s.svc.PutJob(r.ctx, job, cfg)
		if w.err(err) {
			w.line("created %v", created)
			w.job(j)
			if s == r.ref {
				r.voters[job] = j.Config.Participants
			}
		}
	})
}

func (r *propertyRun) register(t *rapid.T) {
	job := r.drawJob(t)
	r.registerNamed(job, r.drawParticipant(t, job))
}

func (r *propertyRun) registerNamed(job, p string) {
	r.both(r.t, fmt.Sprintf("Register(%s, %s)", job, p), func(s *side, w *writer) {
		pending, err := s.svc.Register(r.ctx, job, p)
		if w.err(err) {
			w.pending(pending)
		}
	})
}

func (r *propertyRun) prepare(t *rapid.T) { r.prepareOn(t, r.drawJob(t)) }

func (r *propertyRun) prepareOn(t *rapid.T, job string) {
	var req coordinator.PrepareRequest
	switch {
	case rarely(t, "short timeout?", 20):
		req.Timeout = coordinator.MinCheckpointTimeout
	case rarely(t, "long timeout?", 5):
		req.Timeout = 2 * time.Hour
	}
	switch rapid.IntRange(0, 3).Draw(t, "Idempotency-Key") {
	case 2:
		req.IdempotencyKey = fmt.Sprintf("key-%d", len(r.keys[job])+1)
		r.keys[job] = append(r.keys[job], req.IdempotencyKey)
	case 3:
		if len(r.keys[job]) > 0 {
			req.IdempotencyKey = rapid.SampledFrom(r.keys[job]).Draw(t, "key used before")
		}
	}
	// As the API does: the fingerprint is that of the request's body.
	req.Fingerprint = fmt.Sprintf("timeout=%v", req.Timeout)
	var deadlines []time.Time
	r.both(t, fmt.Sprintf("Prepare(%s, %+v)", job, req), func(s *side, w *writer) {
		cp, replayed, err := s.svc.Prepare(r.ctx, job, req)
		if !w.err(err) {
			return
		}
		if !replayed {
			if s.firstSeq == 0 {
				s.firstSeq = cp.Seq
			}
			s.seqs[cp.Seq] = len(s.seqs) + 1
		}
		deadlines = append(deadlines, cp.Deadline)
		w.line("replayed %v", replayed)
		w.checkpoint(cp)
	})
	r.waitPast(deadlines)
}

// waitPast sleeps until every deadline that falls within the test has passed, on both
// stores, so that the next request finds the checkpoints expired on both.
func (r *propertyRun) waitPast(deadlines []time.Time) {
	var last time.Time
	for _, d := range deadlines {
		if time.Until(d) < time.Minute && d.After(last) {
			last = d
		}
	}
	// With a margin for a database clock a little behind this process's.
	if wait := time.Until(last) + 20*time.Millisecond; wait > 0 {
		time.Sleep(wait)
		r.stats.sleeps++
	}
}

var propertyCommittables = []string{"", "[]", "[1]", `[{"k":"v","n":1.50}]`, `[ "x" , "y" ]`}

func (r *propertyRun) vote(t *rapid.T) {
	job := r.drawJob(t)
	id, p := r.drawID(t, job), r.drawParticipant(t, job)
	v := coordinator.Vote{Epoch: r.drawEpoch(t, job, p), Kind: coordinator.VotePrepared}
	if rarely(t, "abort?", 5) {
		v.Kind, v.Reason = coordinator.VoteAbort, rapid.SampledFrom([]string{"", "disk full"}).Draw(t, "reason")
	} else if c := rapid.SampledFrom(propertyCommittables).Draw(t, "committables"); c != "" {
		v.Committables = json.RawMessage(c)
	}
	what := fmt.Sprintf("Vote(%s, %d, %s, epoch %d, %s %s)", job, id, p, v.Epoch, v.Kind, v.Committables)
	if v.Kind == coordinator.VoteAbort {
		what = fmt.Sprintf("Vote(%s, %d, %s, epoch %d, %s %q)", job, id, p, v.Epoch, v.Kind, v.Reason)
	}
	r.both(t, what, func(s *side, w *writer) {
		// A store may keep the vote's committables: each gets its own.
		vote := v
		vote.Committables = slices.Clone(v.Committables)
		cp, err := s.svc.Vote(r.ctx, job, id, p, vote)
		if w.err(err) {
			w.checkpoint(cp)
		}
	})
}

func (r *propertyRun) commit(t *rapid.T) {
	job := r.drawJob(t)
	id := r.drawID(t, job)
	r.both(t, fmt.Sprintf("Commit(%s, %d)", job, id), func(s *side, w *writer) {
		cp, err := s.svc.Commit(r.ctx, job, id, "")
		if w.err(err) {
			w.checkpoint(cp)
		}
	})
}

func (r *propertyRun) abort(t *rapid.T) {
	job := r.drawJob(t)
	id := r.drawID(t, job)
	reason := rapid.SampledFrom([]string{"", "operator"}).Draw(t, "reason")
	r.both(t, fmt.Sprintf("Abort(%s, %d, %q)", job, id, reason), func(s *side, w *writer) {
		cp, err := s.svc.Abort(r.ctx, job, id, reason)
		if w.err(err) {
			w.checkpoint(cp)
		}
	})
}

func (r *propertyRun) ack(t *rapid.T) {
	job := r.drawJob(t)
	id, p := r.drawID(t, job), r.drawParticipant(t, job)
	epoch := r.drawEpoch(t, job, p)
	r.both(t, fmt.Sprintf("Ack(%s, %d, %s, epoch %d)", job, id, p, epoch), func(s *side, w *writer) {
		cp, err := s.svc.Ack(r.ctx, job, id, p, epoch)
		if w.err(err) {
			w.checkpoint(cp)
		}
	})
}

func (r *propertyRun) pending(t *rapid.T) {
	job := r.drawJob(t)
	p := r.drawParticipant(t, job)
	r.both(t, fmt.Sprintf("Pending(%s, %s)", job, p), func(s *side, w *writer) {
		pending, err := s.svc.Pending(r.ctx, job, p, 0, 0)
		if w.err(err) {
			w.pending(pending)
		}
	})
}

func (r *propertyRun) getCheckpoint(t *rapid.T) {
	job := r.drawJob(t)
	id := r.drawID(t, job)
	// A short wait on a preparing checkpoint waits it out (nothing else decides it); on a
	// decided one it answers at once.
	wait := rapid.SampledFrom([]time.Duration{0, 0, 0, 5 * time.Millisecond}).Draw(t, "wait")
	r.both(t, fmt.Sprintf("GetCheckpoint(%s, %d, wait %v)", job, id, wait), func(s *side, w *writer) {
		cp, err := s.svc.GetCheckpoint(r.ctx, job, id, wait)
		if w.err(err) {
			w.checkpoint(cp)
		}
	})
}

func (r *propertyRun) listCheckpoints(t *rapid.T) {
	q := coordinator.CheckpointQuery{Job: r.drawJob(t)}
	for _, st := range []coordinator.Status{coordinator.StatusPreparing, coordinator.StatusCommitting, coordinator.StatusCommitted, coordinator.StatusAborted} {
		if rapid.IntRange(0, 2).Draw(t, "with "+string(st)) == 2 {
			q.Statuses = append(q.Statuses, st)
		}
	}
	q.Limit = rapid.SampledFrom([]int{0, 1, 2, 3, coordinator.DefaultPageSize}).Draw(t, "limit")
	if rapid.Bool().Draw(t, "after?") {
		q.After = r.drawID(t, q.Job)
	}
	r.both(t, fmt.Sprintf("ListCheckpoints(%+v)", q), func(s *side, w *writer) {
		cps, more, err := s.svc.ListCheckpoints(r.ctx, q)
		if w.err(err) {
			w.line("more %v", more)
			for _, cp := range cps {
				w.checkpoint(cp)
			}
		}
	})
}

func (r *propertyRun) getJob(t *rapid.T) {
	job := r.drawJob(t)
	r.both(t, fmt.Sprintf("GetJob(%s)", job), func(s *side, w *writer) {
		j, err := s.svc.GetJob(r.ctx, job)
		if w.err(err) {
			w.job(j)
		}
	})
}

func (r *propertyRun) deleteJob(t *rapid.T) {
	job := r.drawJob(t)
	r.both(t, fmt.Sprintf("DeleteJob(%s)", job), func(s *side, w *writer) {
		w.err(s.svc.DeleteJob(r.ctx, job))
	})
}

// sweepExpired runs the sweeper's pass; how many jobs it swept is not compared, since the
// store under test holds the jobs of earlier checks too.
func (r *propertyRun) sweepExpired(t *rapid.T) {
	r.both(t, "SweepExpired", func(s *side, w *writer) {
		_, err := s.svc.SweepExpired(r.ctx)
		w.err(err)
	})
}

// compareState compares everything a client can see of this check's jobs; by status too
// if byStatus (at the end of a check: the ListCheckpoints step filters by status as well).
func (r *propertyRun) compareState(byStatus bool) {
	r.both(r.t, "the state after the step", func(s *side, w *writer) {
		for _, job := range r.jobs {
			// Who may be owed something: the job's participants, and those of its
			// checkpoints (a participant removed from the job still settles its debts).
			concerned := map[string]bool{}
			w.line("GetJob(%s)", job)
			j, err := s.svc.GetJob(r.ctx, job)
			if s == r.ref {
				r.voters[job] = nil
			}
			if w.err(err) {
				w.job(j)
				for _, p := range j.Config.Participants {
					concerned[p] = true
				}
				if s == r.ref {
					r.highest[job] = max(r.highest[job], j.Seq)
					r.voters[job] = j.Config.Participants
					maps.Copy(r.epochs[job], j.Epochs)
				}
			}
			statuses := []coordinator.Status{""}
			if byStatus {
				statuses = append(statuses, coordinator.StatusPreparing, coordinator.StatusCommitting, coordinator.StatusCommitted, coordinator.StatusAborted)
			}
			for _, st := range statuses {
				q := coordinator.CheckpointQuery{Job: job, Limit: coordinator.MaxPageSize}
				if st != "" {
					q.Statuses = []coordinator.Status{st}
				}
				w.line("ListCheckpoints(%s, %q)", job, st)
				cps, more, err := s.svc.ListCheckpoints(r.ctx, q)
				if w.err(err) {
					w.line("more %v", more)
					for _, cp := range cps {
						w.checkpoint(cp)
						for _, p := range cp.Participants {
							concerned[p.Name] = true
						}
					}
				}
			}
			for _, p := range propertyOthers {
				if !concerned[p] {
					continue // not_found; the Pending step asks that too
				}
				w.line("Pending(%s, %s)", job, p)
				pending, err := s.svc.Pending(r.ctx, job, p, 0, 0)
				if w.err(err) {
					w.pending(pending)
					if s == r.ref {
						r.epochs[job][p] = pending.Epoch
					}
				}
			}
		}
		// Every job's checkpoints, oldest first, from this check's first one on (those of
		// earlier checks have lower Seqs).
		if s.firstSeq == 0 {
			return
		}
		w.line("ListCheckpoints(every job)")
		cps, more, err := s.svc.ListCheckpoints(r.ctx, coordinator.CheckpointQuery{After: s.firstSeq - 1, Limit: coordinator.MaxPageSize})
		if w.err(err) {
			w.line("more %v", more)
			for _, cp := range cps {
				w.checkpoint(cp)
			}
		}
	})
}

// both makes the same request of both stores and fails the check unless they answer
// alike. do writes what its side answered.
func (r *propertyRun) both(t *rapid.T, what string, do func(s *side, w *writer)) {
	t.Helper()
	what = strings.ReplaceAll(what, r.prefix, "")
	if !strings.HasPrefix(what, "the state") {
		r.log = append(r.log, what)
		r.stats.steps++
	}
	var out [2]string
	for i, s := range []*side{r.ref, r.sut} {
		w := &writer{side: s}
		do(s, w)
		if w.unexpected != nil {
			t.Fatalf("%s: the %s failed: %v\nsteps:\n  %s", what, s.name, w.unexpected, strings.Join(r.log, "\n  "))
		}
		out[i] = strings.ReplaceAll(w.String(), r.prefix, "")
	}
	if out[0] != out[1] {
		t.Fatalf("%s: the stores answer differently (lines marked !):\n%s\nsteps:\n  %s",
			what, diffLines(r.ref.name, out[0], r.sut.name, out[1]), strings.Join(r.log, "\n  "))
	}
	if !strings.HasPrefix(what, "the state") {
		name, _, _ := strings.Cut(what, "(")
		answer, _, _ := strings.Cut(out[0], "\n")
		if code, ok := strings.CutPrefix(answer, "rejected "); ok {
			answer, _, _ = strings.Cut(code, ":")
		} else {
			answer = "ok"
		}
		r.stats.answers[name+" "+answer]++
	}
}

// diffLines shows a and b as one listing: the lines both have, then each line only one of
// them has, marked with the store's name (a longest common subsequence of lines).
func diffLines(aName, a, bName, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	// common[i][j] is the length of the longest common subsequence of al[i:] and bl[j:].
	common := make([][]int, len(al)+1)
	for i := range common {
		common[i] = make([]int, len(bl)+1)
	}
	for i := len(al) - 1; i >= 0; i-- {
		for j := len(bl) - 1; j >= 0; j-- {
			if al[i] == bl[j] {
				common[i][j] = common[i+1][j+1] + 1
			} else {
				common[i][j] = max(common[i+1][j], common[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(al) || j < len(bl) {
		switch {
		case i < len(al) && j < len(bl) && al[i] == bl[j]:
			fmt.Fprintf(&out, "    %s\n", al[i])
			i, j = i+1, j+1
		case j == len(bl) || i < len(al) && common[i+1][j] >= common[i][j+1]:
			fmt.Fprintf(&out, "  ! only the %s: %s\n", aName, al[i])
			i++
		default:
			fmt.Fprintf(&out, "  ! only the %s: %s\n", bName, bl[j])
			j++
		}
	}
	return out.String()
}

// writer renders answers as text that does not depend on the store: a timestamp becomes
// its rank among the distinct timestamps of the same answer, a Seq the order in which
// its checkpoint opened.
type writer struct {
	side       *side
	b          strings.Builder
	times      []time.Time
	unexpected error
}

func (w *writer) line(format string, args ...any) {
	fmt.Fprintf(&w.b, format, args...)
	w.b.WriteByte('\n')
}

// err writes a rejection and reports whether there was no error. Any other error fails
// the check: neither store should have one.
func (w *writer) err(err error) bool {
	if err == nil {
		return true
	}
	var e *coordinator.Error
	if !errors.As(err, &e) || e.Code == coordinator.CodeUnavailable {
		w.unexpected = errors.Join(w.unexpected, err)
		return false
	}
	w.line("rejected %s: %s; missing %v; fields %v", e.Code, e.Message, e.Missing, e.Fields)
	if e.Checkpoint != nil {
		w.checkpoint(e.Checkpoint)
	}
	return false
}

// time writes a placeholder that String replaces with the timestamp's rank.
func (w *writer) time(t *time.Time) string {
	if t == nil {
		return "-"
	}
	w.times = append(w.times, *t)
	return fmt.Sprintf("\x00%d\x00", len(w.times)-1)
}

func (w *writer) seq(seq int64) string {
	if n, ok := w.side.seqs[seq]; ok {
		return fmt.Sprintf("#%d", n)
	}
	return fmt.Sprintf("%d (not a Seq this check's prepares answered)", seq)
}

func (w *writer) job(j *coordinator.Job) {
	c := j.Config
	var epochs []string
	for _, p := range slices.Sorted(maps.Keys(j.Epochs)) {
		epochs = append(epochs, fmt.Sprintf("%s=%d", p, j.Epochs[p]))
	}
	w.line("job %s: participants %v, timeout %v, max %d, auto-commit %v; seq %d, epochs %v, last %s, last committed %s; created %s, updated %s",
		j.Name, c.Participants, c.CheckpointTimeout, c.MaxConcurrentCheckpoints, c.AutoCommit,
		j.Seq, epochs, fmtIDPtr(j.LastCheckpoint), fmtIDPtr(j.LastCommitted), w.time(&j.CreatedAt), w.time(&j.UpdatedAt))
}

func (w *writer) checkpoint(cp *coordinator.Checkpoint) {
	w.line("checkpoint %s/%d %s: created %s, deadline %s, decided %s, completed %s, abort reason %q, auto-commit %v, seq %s",
		cp.Job, cp.ID, cp.Status, w.time(&cp.CreatedAt), w.time(&cp.Deadline), w.time(cp.DecidedAt), w.time(cp.CompletedAt),
		cp.AbortReason, cp.AutoCommit, w.seq(cp.Seq))
	for _, p := range cp.Participants {
		committables := string(p.Committables)
		if p.Committables == nil {
			committables = "none"
		}
		w.line("  %s: epoch %d, vote %q, reason %q, committables %s, voted %s, acked %s",
			p.Name, p.Epoch, p.Vote, p.Reason, committables, w.time(p.VotedAt), w.time(p.AckedAt))
	}
}

func (w *writer) pending(p *coordinator.Pending) {
	w.line("pending %s/%s: epoch %d", p.Job, p.Participant, p.Epoch)
	for _, it := range p.Items {
		w.line("  %d %s: %s %s", it.Checkpoint, it.Status, it.Action, it.Committables)
	}
}

// String returns the text with each timestamp replaced by its rank: t1 the earliest, the
// same rank for the same instant.
func (w *writer) String() string {
	distinct := slices.Clone(w.times)
	slices.SortFunc(distinct, func(a, b time.Time) int { return a.Compare(b) })
	distinct = slices.CompactFunc(distinct, time.Time.Equal)
	parts := strings.Split(w.b.String(), "\x00")
	for i := 1; i < len(parts); i += 2 {
		var n int
		fmt.Sscan(parts[i], &n)
		rank := sort.Search(len(distinct), func(k int) bool { return !distinct[k].Before(w.times[n]) })
		parts[i] = fmt.Sprintf("t%d", rank+1)
	}
	return strings.Join(parts, "")
}
