package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

func testOwing(t *testing.T, b *bundle) {
	b.putJob("j", config("p1", "p2"))
	b.putJob("other", config("p1", "p2"))
	b.insert("other", nil) // another job's debts are not this job's
	// 1 committed and fully acked: nothing owed.
	b.insert("j", nil)
	b.saveAck("j", 1, "p1")
	b.saveAck("j", 1, "p2")
	b.decide("j", 1, coordinator.StatusCommitted, "")
	// 2 committing, p1 acked.
	b.insert("j", nil)
	b.decide("j", 2, coordinator.StatusCommitting, "")
	b.saveAck("j", 2, "p1")
	// 3 aborted, p1 voted prepared and has not acked, p2 acked.
	b.insert("j", nil)
	b.saveVote("j", 3, "p1", coordinator.VotePrepared, `["t3"]`)
	b.decide("j", 3, coordinator.StatusAborted, "x")
	b.saveAck("j", 3, "p2")
	// 4 preparing, p2 voted.
	b.insert("j", nil)
	b.saveVote("j", 4, "p2", coordinator.VotePrepared, `["t4"]`)
	// 5 committed with p2 unacked: committed is excluded whatever the acks say.
	b.insert("j", nil)
	b.saveAck("j", 5, "p1")
	b.decide("j", 5, coordinator.StatusCommitted, "")
	// 6 aborted, both acked.
	b.insert("j", nil)
	b.saveVote("j", 6, "p1", coordinator.VotePrepared, `["t6"]`)
	b.decide("j", 6, coordinator.StatusAborted, "x")
	b.saveAck("j", 6, "p1")
	b.saveAck("j", 6, "p2")

	cases := []struct {
		participant string
		want        []string
	}{
		{"p1", []string{"j/3", "j/4"}},
		{"p2", []string{"j/2", "j/4"}},
		{"", []string{"j/2", "j/3", "j/4"}},
		{"stranger", nil},
	}
	check := func(how string, c struct {
		participant string
		want        []string
	}, owing []*coordinator.Checkpoint) {
		t.Helper()
		wantIDs(t, fmt.Sprintf("%s Owing(%q)", how, c.participant), owing, c.want...)
		if c.participant == "p1" && len(owing) > 0 {
			if got := owing[0].Participant("p1"); string(got.Committables) != `["t3"]` || got.Vote != coordinator.VotePrepared {
				t.Errorf("%s Owing(p1) checkpoint 3: vote %q committables %s, want prepared [\"t3\"]", how, got.Vote, got.Committables)
			}
		}
	}
	// A View, an Update and Store.Owing may read them differently (the PostgreSQL store
	// reads what anyone owes with the job in a View, and Store.Owing in one statement):
	// all must say the same.
	for how, read := range map[string]func(string, func(coordinator.JobTx) error){"View": b.view, "Update": b.update} {
		read("j", func(tx coordinator.JobTx) error {
			for _, c := range cases {
				owing, err := tx.Owing(b.ctx, c.participant)
				if err != nil {
					return err
				}
				check(how, c, owing)
			}
			return nil
		})
	}
	var viewNow time.Time
	b.view("j", func(tx coordinator.JobTx) error { viewNow = tx.Now(); return nil })
	for _, c := range cases {
		job, now, owing, err := b.store.Owing(b.ctx, "j", c.participant)
		if err != nil {
			t.Fatalf("Store.Owing(j, %q): %v", c.participant, err)
		}
		check("Store", c, owing)
		if job.Name != "j" || !slices.Equal(job.Config.Participants, []string{"p1", "p2"}) || now.Before(viewNow) {
			t.Errorf("Store.Owing(j, %q): job %s %v, clock %v (a View before it read %v)", c.participant, job.Name, job.Config.Participants, now, viewNow)
		}
	}
	if _, _, _, err := b.store.Owing(b.ctx, "nope", "p1"); !errors.Is(err, coordinator.ErrNotFound) {
		t.Errorf("Store.Owing of a missing job: %v, want ErrNotFound", err)
	}
}

// testOwingAbortedWithoutPreparedVote: JobTx.Owing leaves out aborted checkpoints without
// an unacked prepared vote (nothing can be owed there, by coordinator.Owed), so its cost does
// not grow with history, and keeps those where a prepared vote still waits for its rollback.
func testOwingAbortedWithoutPreparedVote(t *testing.T, b *bundle) {
	b.putJob("j", config("p1", "p2"))
	b.insert("j", nil)
	b.saveVote("j", 1, "p1", coordinator.VoteAbort, "")
	b.decide("j", 1, coordinator.StatusAborted, "p1 voted abort")
	b.insert("j", nil)
	b.saveVote("j", 2, "p1", coordinator.VotePrepared, `["t"]`)
	b.saveVote("j", 2, "p2", coordinator.VoteAbort, "")
	b.decide("j", 2, coordinator.StatusAborted, "p2 voted abort")
	want := map[string][]string{"p1": {"j/2"}, "p2": nil, "": {"j/2"}}
	for _, read := range []func(string, func(coordinator.JobTx) error){b.view, b.update} {
		read("j", func(tx coordinator.JobTx) error {
			for _, p := range []string{"p1", "p2", ""} {
				owing, err := tx.Owing(b.ctx, p)
				if err != nil {
					return err
				}
				wantIDs(t, fmt.Sprintf("Owing(%q) with checkpoints 1 (no prepared vote) and 2 (p1 prepared) aborted, unacked", p), owing, want[p]...)
			}
			return nil
		})
	}
}

func testExpiredJobs(t *testing.T, b *bundle) {
	if jobs, err := b.store.ExpiredJobs(b.ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("ExpiredJobs on an empty store: %v, %v", jobs, err)
	}
	past := func(d time.Duration) func(tx coordinator.JobTx, cp *coordinator.Checkpoint) {
		return func(tx coordinator.JobTx, cp *coordinator.Checkpoint) {
			cp.CreatedAt = tx.Now().Add(-time.Hour)
			cp.Deadline = tx.Now().Add(-d)
		}
	}
	for _, name := range []string{"exp-a", "exp-now", "exp-twice", "fresh", "decided", "gone"} {
		b.putJob(name, config("p"))
	}
	b.insert("exp-a", past(time.Second))
	b.insert("exp-now", past(0)) // deadline == the transaction's now: expired by the time we ask
	b.insert("exp-twice", past(time.Minute))
	b.insert("exp-twice", past(time.Second))
	b.insert("fresh", nil)
	b.insert("decided", past(time.Second))
	b.decide("decided", 1, coordinator.StatusAborted, "x")
	b.insert("decided", nil)
	b.insert("gone", past(time.Second))
	b.decide("gone", 1, coordinator.StatusAborted, "x")
	b.update("gone", func(tx coordinator.JobTx) error { return deleteJob(b.ctx, tx) })

	jobs, err := b.store.ExpiredJobs(b.ctx)
	if err != nil {
		t.Fatalf("ExpiredJobs: %v", err)
	}
	sorted := slices.Clone(jobs)
	slices.Sort(sorted)
	if want := []string{"exp-a", "exp-now", "exp-twice"}; !slices.Equal(sorted, want) {
		t.Fatalf("ExpiredJobs = %v, want %v, each once", jobs, want)
	}
	// A deadline a little ahead is not expired yet, and is once the database's clock passes it.
	b.putJob("soon", config("p"))
	b.insert("soon", func(tx coordinator.JobTx, cp *coordinator.Checkpoint) {
		cp.Deadline = tx.Now().Add(300 * time.Millisecond)
	})
	if jobs, _ := b.store.ExpiredJobs(b.ctx); slices.Contains(jobs, "soon") {
		t.Fatalf("ExpiredJobs = %v names soon, whose deadline is 300ms ahead", jobs)
	}
	time.Sleep(400 * time.Millisecond)
	if jobs, _ := b.store.ExpiredJobs(b.ctx); !slices.Contains(jobs, "soon") {
		t.Fatalf("ExpiredJobs = %v lacks soon, whose deadline passed 100ms ago", jobs)
	}
}

// testListCheckpointsPerJob: with Job set, newest first; After is an id, exclusive, and the
// next page holds lower ids.
func testListCheckpointsPerJob(t *testing.T, b *bundle) {
	b.putJob("lc", config("a"))
	b.putJob("other", config("a"))
	statuses := []coordinator.Status{"", coordinator.StatusCommitted, coordinator.StatusAborted, coordinator.StatusCommitting,
		coordinator.StatusAborted, coordinator.StatusPreparing, coordinator.StatusPreparing}
	for id := 1; id <= 6; id++ {
		b.insert("lc", nil)
		b.insert("other", nil)
		if s := statuses[id]; s != coordinator.StatusPreparing {
			b.decide("lc", int64(id), s, "")
		}
	}
	list := func(q coordinator.CheckpointQuery) []*coordinator.Checkpoint {
		t.Helper()
		q.Job = "lc"
		cps, err := b.store.ListCheckpoints(b.ctx, q)
		if err != nil {
			t.Fatalf("ListCheckpoints(%+v): %v", q, err)
		}
		return cps
	}
	aborted := []coordinator.Status{coordinator.StatusAborted}
	decided := []coordinator.Status{coordinator.StatusAborted, coordinator.StatusCommitting}
	cases := []struct {
		q    coordinator.CheckpointQuery
		want []string
	}{
		{coordinator.CheckpointQuery{Limit: 100}, []string{"lc/6", "lc/5", "lc/4", "lc/3", "lc/2", "lc/1"}},
		{coordinator.CheckpointQuery{Limit: 2}, []string{"lc/6", "lc/5"}},
		{coordinator.CheckpointQuery{Limit: 2, After: 5}, []string{"lc/4", "lc/3"}},
		{coordinator.CheckpointQuery{Limit: 2, After: 3}, []string{"lc/2", "lc/1"}},
		{coordinator.CheckpointQuery{Limit: 2, After: 1}, nil},
		{coordinator.CheckpointQuery{Limit: 100, Statuses: aborted}, []string{"lc/4", "lc/2"}},
		{coordinator.CheckpointQuery{Limit: 100, Statuses: decided}, []string{"lc/4", "lc/3", "lc/2"}},
		{coordinator.CheckpointQuery{Limit: 1, Statuses: decided}, []string{"lc/4"}},
		{coordinator.CheckpointQuery{Limit: 100, Statuses: decided, After: 4}, []string{"lc/3", "lc/2"}},
		{coordinator.CheckpointQuery{Limit: 100, Statuses: []coordinator.Status{coordinator.StatusCommitted}}, []string{"lc/1"}},
	}
	for _, c := range cases {
		wantIDs(t, fmt.Sprintf("ListCheckpoints(%+v)", c.q), list(c.q), c.want...)
	}
	// Listed checkpoints are whole, as Checkpoint reads them.
	for _, cp := range list(coordinator.CheckpointQuery{Limit: 100}) {
		wantCheckpoint(t, fmt.Sprintf("listed checkpoint %d", cp.ID), b.checkpoint("lc", cp.ID), cp)
	}
	if cps, err := b.store.ListCheckpoints(b.ctx, coordinator.CheckpointQuery{Job: "nope", Limit: 10}); err != nil || len(cps) != 0 {
		t.Fatalf("ListCheckpoints of a missing job: %v, %v; want none", ids(cps), err)
	}
}

// testListCheckpointsGlobal: without Job, every job's checkpoints oldest first by Seq; After
// is a Seq, exclusive.
func testListCheckpointsGlobal(t *testing.T, b *bundle) {
	if cps, err := b.store.ListCheckpoints(b.ctx, coordinator.CheckpointQuery{Limit: 10}); err != nil || len(cps) != 0 {
		t.Fatalf("ListCheckpoints on an empty store: %v, %v", ids(cps), err)
	}
	b.putJob("beta", config("a"))
	b.putJob("alpha", config("a"))
	b.putJob("gone", config("a"))
	b.insert("gone", nil)
	b.decide("gone", 1, coordinator.StatusCommitting, "")
	// Created alternately, so creation order is neither by job nor by id.
	order := []struct {
		job    string
		status coordinator.Status
	}{
		{"alpha", coordinator.StatusCommitted}, {"beta", coordinator.StatusPreparing},
		{"alpha", coordinator.StatusCommitting}, {"beta", coordinator.StatusAborted},
		{"beta", coordinator.StatusCommitting}, {"alpha", coordinator.StatusPreparing},
	}
	var seqs []int64
	for _, o := range order {
		cp := b.insert(o.job, nil)
		seqs = append(seqs, cp.Seq)
		if o.status != coordinator.StatusPreparing {
			b.decide(o.job, cp.ID, o.status, "")
		}
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("Seq of checkpoints in creation order: %v, want increasing", seqs)
		}
	}
	b.update("gone", func(tx coordinator.JobTx) error { return deleteJob(b.ctx, tx) })

	list := func(q coordinator.CheckpointQuery) []*coordinator.Checkpoint {
		t.Helper()
		cps, err := b.store.ListCheckpoints(b.ctx, q)
		if err != nil {
			t.Fatalf("ListCheckpoints(%+v): %v", q, err)
		}
		return cps
	}
	open := []coordinator.Status{coordinator.StatusPreparing, coordinator.StatusCommitting}
	all := list(coordinator.CheckpointQuery{Limit: 100})
	wantIDs(t, "global list", all, "alpha/1", "beta/1", "alpha/2", "beta/2", "beta/3", "alpha/3")
	for i, cp := range all {
		if cp.Seq != seqs[i] {
			t.Fatalf("global list item %d (%s/%d) has Seq %d, InsertCheckpoint assigned %d", i, cp.Job, cp.ID, cp.Seq, seqs[i])
		}
		wantCheckpoint(t, "listed checkpoint", b.checkpoint(cp.Job, cp.ID), cp)
	}
	wantIDs(t, "global list of preparing and committing", list(coordinator.CheckpointQuery{Limit: 100, Statuses: open}),
		"beta/1", "alpha/2", "beta/3", "alpha/3")
	page := list(coordinator.CheckpointQuery{Limit: 2, Statuses: open})
	wantIDs(t, "global page 1", page, "beta/1", "alpha/2")
	page = list(coordinator.CheckpointQuery{Limit: 2, Statuses: open, After: page[1].Seq})
	wantIDs(t, "global page 2 (After = Seq of alpha/2)", page, "beta/3", "alpha/3")
	page = list(coordinator.CheckpointQuery{Limit: 2, Statuses: open, After: page[1].Seq})
	wantIDs(t, "global page 3", page)
	wantIDs(t, "global list after alpha/1's Seq", list(coordinator.CheckpointQuery{Limit: 3, After: seqs[0]}), "beta/1", "alpha/2", "beta/2")
}

// Participants shows each configured participant's epoch and registration, its last vote
// and how long after its checkpoint's opening it came, its last ack, and what it owes: as
// many items as its pending holds.
func testParticipantsAtAGlance(t *testing.T, b *bundle) {
	b.putJob("glance", config("a", "b"))
	ea, eb := b.register("glance", "a"), b.register("glance", "b")
	cp1 := b.prepare("glance")
	b.vote("glance", cp1.ID, "a", prepared(ea, `["a1"]`))
	b.vote("glance", cp1.ID, "b", prepared(eb, `["b1"]`))
	acked := b.ack("glance", cp1.ID, "a", ea)
	cp2 := b.prepare("glance")
	b.vote("glance", cp2.ID, "a", abortVote(ea, "no"))
	b.putJob("glance", config("a", "b", "c"))
	cp3 := b.prepare("glance")

	got, err := b.svc.Participants(b.ctx, "glance")
	if err != nil {
		t.Fatalf("Participants: %v", err)
	}
	if len(got) != 3 || got[0].Name != "a" || got[1].Name != "b" || got[2].Name != "c" {
		t.Fatalf("Participants = %+v, want a, b, c in the configuration's order", got)
	}
	a, bb, c := got[0], got[1], got[2]
	if a.Epoch != ea || bb.Epoch != eb || c.Epoch != 0 {
		t.Errorf("epochs = %d %d %d, want %d %d 0", a.Epoch, bb.Epoch, c.Epoch, ea, eb)
	}
	if a.RegisteredAt == nil || bb.RegisteredAt == nil || c.RegisteredAt != nil {
		t.Errorf("registered_at = %s %s %s, want set, set, nil", fmtTimePtr(a.RegisteredAt), fmtTimePtr(bb.RegisteredAt), fmtTimePtr(c.RegisteredAt))
	}
	if a.RegisteredAt != nil && a.RegisteredAt.After(cp1.CreatedAt) {
		t.Errorf("a registered at %s, after checkpoint %d opened at %s", a.RegisteredAt, cp1.ID, cp1.CreatedAt)
	}
	cp2now := b.get("glance", cp2.ID)
	if a.LastVoteAt == nil || !sameTimePtr(a.LastVoteAt, cp2now.Participants[0].VotedAt) || a.LastVote == nil ||
		*a.LastVote != cp2now.Participants[0].VotedAt.Sub(cp2now.CreatedAt).Truncate(time.Millisecond) {
		t.Errorf("a's last vote = %s after %v, want checkpoint %d's at %s", fmtTimePtr(a.LastVoteAt), a.LastVote, cp2.ID, fmtTimePtr(cp2now.Participants[0].VotedAt))
	}
	cp1now := b.get("glance", cp1.ID)
	if !sameTimePtr(bb.LastVoteAt, cp1now.Participants[1].VotedAt) || c.LastVoteAt != nil || c.LastVote != nil {
		t.Errorf("last votes of b, c = %s, %s; want checkpoint %d's, none", fmtTimePtr(bb.LastVoteAt), fmtTimePtr(c.LastVoteAt), cp1.ID)
	}
	if !sameTimePtr(a.LastAckAt, acked.Participants[0].AckedAt) || bb.LastAckAt != nil || c.LastAckAt != nil {
		t.Errorf("last acks = %s %s %s, want a's of checkpoint %d, none, none", fmtTimePtr(a.LastAckAt), fmtTimePtr(bb.LastAckAt), fmtTimePtr(c.LastAckAt), cp1.ID)
	}
	// a owes its vote on cp3; b the commit of cp1 and its vote on cp3; c its vote on cp3.
	for _, p := range got {
		pending, err := b.svc.Pending(b.ctx, "glance", p.Name, 0, 0)
		if err != nil {
			t.Fatalf("Pending(%s): %v", p.Name, err)
		}
		if p.Owed != len(pending.Items) {
			t.Errorf("%s owes %d, but its pending holds %d items", p.Name, p.Owed, len(pending.Items))
		}
	}
	if a.Owed != 1 || bb.Owed != 2 || c.Owed != 1 {
		t.Errorf("owed = %d %d %d, want 1 2 1 (checkpoint %d open)", a.Owed, bb.Owed, c.Owed, cp3.ID)
	}
	if _, err := b.svc.Participants(b.ctx, "no-such-job"); !errors.Is(err, coordinator.ErrNotFound) {
		t.Errorf("Participants of a missing job: %v, want ErrNotFound", err)
	}
}
