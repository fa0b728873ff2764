package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// runProtocol carries out docs/protocol.md through coordinator.Service on the store: the
// rules are the domain's, but whether they hold depends on the store loading, locking and
// saving what they decide.
func runProtocol(t *testing.T, o opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *bundle)
	}{
		{"FullRound", testFullRound},
		{"Decisions/Causes", testDecisionCauses},
		{"Decisions/AckedByAndComplete", testAckedByAndComplete},
		{"Decisions/Audit", testAudit},
		{"Retention", testRetention},
		{"Retention/PassAcrossJobs", testRetentionPassAcrossJobs},
		{"Retention/AgreesWithDeletable", testRetentionAgreesWithDeletable},
		{"Vote/Idempotent", testVoteIdempotent},
		{"Vote/Conflict", testVoteConflict},
		{"Fencing/OldEpochFenced", testFencing},
		{"Fencing/RegisterAbortsUnvoted", testRegisterAbortsUnvoted},
		{"NotRegistered", testNotRegistered},
		{"UnknownParticipant", testUnknownParticipant},
		{"Deadline/LateVote", testDeadlineLateVote},
		{"Deadline/Sweep", testDeadlineSweep},
		{"Deadline/PendingHidesExpired", testDeadlinePendingHidesExpired},
		{"Rule9/HigherUnanimousWaits", testRule9HigherWaits},
		{"Rule9/AbortCascades", testRule9AbortCascades},
		{"Rule9/AbortCascadesPastItsVoters", testRule9AbortCascadesPastItsVoters},
		{"Commit/VotesMissing", testCommitVotesMissing},
		{"Abort", testAbort},
		{"Ack/OnPreparing", testAckOnPreparing},
		{"Ack/OnAborted", testAckOnAborted},
		{"Pending", testPending},
		{"DeleteJob/Busy", testDeleteJobBusy},
		{"DeleteJob/ExpiredCheckpointDoesNotBlock", testDeleteJobExpired},
		{"DeleteJob/IDsNeverReused", testIDsNeverReused},
		{"Prepare/TooManyCheckpoints", testTooManyCheckpoints},
		{"Prepare/IdempotencyKey", testIdempotencyKey},
		{"GetCheckpoint/LongPollWokenByVote", testLongPollWoken},
		{"GetCheckpoint/LongPollTimesOut", testLongPollTimesOut},
		{"Pending/LongPollWokenByJobChange", testPendingWokenByJobChange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, o.setup(t))
		})
	}
}

// job creates a job through the service and registers each participant once (epoch 1).
func (b *bundle) job(name string, cfg coordinator.JobConfig) {
	b.t.Helper()
	if _, _, err := b.svc.PutJob(b.ctx, name, cfg); err != nil {
		b.t.Fatalf("PutJob(%s): %v", name, err)
	}
	for _, p := range cfg.Participants {
		if e := b.register(name, p); e != 1 {
			b.t.Fatalf("first Register(%s, %s) gave epoch %d, want 1", name, p, e)
		}
	}
}

func withMax(cfg coordinator.JobConfig, n int) coordinator.JobConfig {
	cfg.MaxConcurrentCheckpoints = n
	return cfg
}

func wantItems(t *testing.T, what string, p *coordinator.Pending, want ...string) {
	t.Helper()
	got := []string{}
	for _, it := range p.Items {
		got = append(got, fmt.Sprintf("%d %s %s %s", it.Checkpoint, it.Status, it.Action, it.Committables))
	}
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: pending items %q, want %q", what, got, want)
	}
}

func testFullRound(t *testing.T, b *bundle) {
	cfg := config("sink-a", "sink-b")
	if _, created, err := b.svc.PutJob(b.ctx, "orders", cfg); err != nil || !created {
		t.Fatalf("PutJob: created %v, err %v; want created", created, err)
	}
	if _, created, err := b.svc.PutJob(b.ctx, "orders", cfg); err != nil || created {
		t.Fatalf("PutJob again: created %v, err %v; want updated", created, err)
	}
	for _, p := range cfg.Participants {
		reg, err := b.svc.Register(b.ctx, "orders", p)
		if err != nil || reg.Epoch != 1 || len(reg.Items) != 0 {
			t.Fatalf("Register(%s) = %+v, %v; want epoch 1, nothing pending", p, reg, err)
		}
	}
	cp := b.prepare("orders")
	if cp.ID != 1 || cp.Status != coordinator.StatusPreparing || !slices.Equal(names(cp), cfg.Participants) {
		t.Fatalf("Prepare: checkpoint %d %s with %v, want 1 preparing with %v", cp.ID, cp.Status, names(cp), cfg.Participants)
	}
	if !sameTime(cp.Deadline, cp.CreatedAt.Add(time.Minute)) {
		t.Fatalf("Prepare: deadline %v, want created_at %v + the job's 1m timeout", cp.Deadline, cp.CreatedAt)
	}
	wantCheckpoint(t, "GetCheckpoint after Prepare", cp, b.get("orders", 1))

	after := b.vote("orders", 1, "sink-a", prepared(1, `[ {"txn" : "a-1"} ]`))
	wantStatus(t, "after sink-a's vote", after, coordinator.StatusPreparing)
	if got := string(after.Participant("sink-a").Committables); got != `[{"txn":"a-1"}]` {
		t.Fatalf("sink-a's committables %s, want [{\"txn\":\"a-1\"}]", got)
	}
	after = b.vote("orders", 1, "sink-b", prepared(1, `[{"file":"/out/.part-7"}]`))
	wantStatus(t, "the last voter's answer", after, coordinator.StatusCommitting)
	if after.DecidedAt == nil || after.CompletedAt != nil {
		t.Fatalf("committing: decided_at %s, completed_at %s; want set, nil", fmtTimePtr(after.DecidedAt), fmtTimePtr(after.CompletedAt))
	}
	wantCheckpoint(t, "GetCheckpoint after the decision", after, b.get("orders", 1))

	after = b.ack("orders", 1, "sink-a", 1)
	wantStatus(t, "after sink-a's ack", after, coordinator.StatusCommitting)
	after = b.ack("orders", 1, "sink-b", 1)
	wantStatus(t, "after the last ack", after, coordinator.StatusCommitted)
	if after.CompletedAt == nil || after.Participant("sink-a").AckedAt == nil || after.Participant("sink-b").AckedAt == nil {
		t.Fatalf("committed: completed_at %s, acks %v; want all set", fmtTimePtr(after.CompletedAt), after.Participants)
	}
	final := b.get("orders", 1)
	wantCheckpoint(t, "GetCheckpoint after the last ack", after, final)
	if got := string(final.Participant("sink-b").Committables); got != `[{"file":"/out/.part-7"}]` {
		t.Fatalf("sink-b's committables read back as %s", got)
	}

	job, err := b.svc.GetJob(b.ctx, "orders")
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	if fmtIDPtr(job.LastCheckpoint) != "1" || fmtIDPtr(job.LastCommitted) != "1" || !maps.Equal(job.Epochs, map[string]int64{"sink-a": 1, "sink-b": 1}) {
		t.Fatalf("GetJob: last_checkpoint %s, last_committed %s, epochs %v; want 1, 1, both 1",
			fmtIDPtr(job.LastCheckpoint), fmtIDPtr(job.LastCommitted), job.Epochs)
	}
	pending, err := b.svc.Pending(b.ctx, "orders", "sink-a", 0, 0)
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	wantItems(t, "Pending after the round", pending)
}

func testVoteIdempotent(t *testing.T, b *bundle) {
	b.job("j", config("a", "b"))
	b.prepare("j")
	first := b.vote("j", 1, "a", prepared(1, `[1, {"x": 2}]`))
	again := b.vote("j", 1, "a", prepared(1, `[1,{"x":2}]`))
	wantCheckpoint(t, "the same vote again", first, again)
	wantCheckpoint(t, "stored after the same vote again", first, b.get("j", 1))
	decided := b.vote("j", 1, "b", prepared(1, ""))
	wantStatus(t, "b's vote", decided, coordinator.StatusCommitting)
	if got := string(decided.Participant("b").Committables); got != "[]" {
		t.Fatalf("a prepared vote without committables stored %q, want []", got)
	}
	// After the decision, repeating a vote still answers the current state.
	wantCheckpoint(t, "b's vote again, after the decision", decided, b.vote("j", 1, "b", prepared(1, "[]")))
	wantCheckpoint(t, "a's vote again, after the decision", decided, b.vote("j", 1, "a", prepared(1, `[1,{"x":2}]`)))
}

func testVoteConflict(t *testing.T, b *bundle) {
	b.job("j", config("a", "b"))
	b.prepare("j")
	before := b.vote("j", 1, "a", prepared(1, `["t1"]`))
	for _, v := range []coordinator.Vote{prepared(1, `["t2"]`), prepared(1, ""), abortVote(1, "changed my mind")} {
		_, err := b.svc.Vote(b.ctx, "j", 1, "a", v)
		e := wantErr(t, fmt.Sprintf("a different vote %+v", v), err, coordinator.ErrVoteConflict)
		if e == nil || e.Checkpoint == nil || e.Checkpoint.ID != 1 {
			t.Fatalf("vote_conflict does not carry the checkpoint: %+v", e)
		}
	}
	wantCheckpoint(t, "after conflicting votes", before, b.get("j", 1))
}

func testFencing(t *testing.T, b *bundle) {
	b.job("j", config("a", "b"))
	b.prepare("j")
	b.vote("j", 1, "a", prepared(1, `["a1"]`))
	if e := b.register("j", "a"); e != 2 {
		t.Fatalf("second Register(a) gave epoch %d, want 2", e)
	}
	wantStatus(t, "a registered again after voting", b.get("j", 1), coordinator.StatusPreparing)
	before := b.get("j", 1)
	_, err := b.svc.Vote(b.ctx, "j", 1, "a", prepared(1, `["a1"]`))
	wantErr(t, "a's epoch-1 vote repeated word for word after epoch 2", err, coordinator.ErrFenced)
	_, err = b.svc.Vote(b.ctx, "j", 1, "a", prepared(3, `["a1"]`))
	wantErr(t, "a vote from a future epoch", err, coordinator.ErrFenced)
	_, err = b.svc.Vote(b.ctx, "j", 1, "b", prepared(2, `["b1"]`))
	wantErr(t, "b's vote with an epoch it never had", err, coordinator.ErrFenced)
	wantCheckpoint(t, "after fenced votes", before, b.get("j", 1))

	// a's prepared vote was recorded with its then-current epoch: it still counts.
	wantStatus(t, "b's vote", b.vote("j", 1, "b", prepared(1, `["b1"]`)), coordinator.StatusCommitting)
	_, err = b.svc.Ack(b.ctx, "j", 1, "a", 1)
	wantErr(t, "an ack from a's old epoch", err, coordinator.ErrFenced)
	if p := b.get("j", 1).Participant("a"); p.AckedAt != nil {
		t.Fatal("a fenced ack was recorded")
	}
	b.ack("j", 1, "a", 2)
}

func testRegisterAbortsUnvoted(t *testing.T, b *bundle) {
	b.job("j", config("sink-a", "sink-b"))
	b.prepare("j")
	b.vote("j", 1, "sink-b", prepared(1, `["b1"]`))
	b.register("j", "sink-b") // it had voted: nothing aborted
	wantStatus(t, "after sink-b registered again having voted", b.get("j", 1), coordinator.StatusPreparing)

	reg, err := b.svc.Register(b.ctx, "j", "sink-a")
	if err != nil || reg.Epoch != 2 {
		t.Fatalf("Register(sink-a) again: %+v, %v; want epoch 2", reg, err)
	}
	cp := b.get("j", 1)
	wantStatus(t, "after sink-a, which had not voted, registered again", cp, coordinator.StatusAborted)
	if !strings.Contains(cp.AbortReason, "sink-a") || strings.Contains(cp.AbortReason, "sink-b") {
		t.Fatalf("abort reason %q, want it to name sink-a (and not sink-b)", cp.AbortReason)
	}
	wantItems(t, "sink-a's pending from its registration", reg)
	reg, err = b.svc.Register(b.ctx, "j", "sink-b")
	if err != nil {
		t.Fatalf("Register(sink-b): %v", err)
	}
	wantItems(t, "sink-b's pending from its registration", reg, `1 aborted abort ["b1"]`)
}

func testNotRegistered(t *testing.T, b *bundle) {
	if _, _, err := b.svc.PutJob(b.ctx, "j", config("a", "b")); err != nil {
		t.Fatal(err)
	}
	b.register("j", "a") // only a; registering b later would abort what b had not voted on
	b.prepare("j")
	_, err := b.svc.Vote(b.ctx, "j", 1, "b", prepared(1, `[]`))
	wantErr(t, "a vote before registering", err, coordinator.ErrNotRegistered)
	_, err = b.svc.Ack(b.ctx, "j", 1, "b", 1)
	wantErr(t, "an ack before registering", err, coordinator.ErrNotRegistered)
	if p := b.get("j", 1).Participant("b"); p.Vote != "" || p.AckedAt != nil {
		t.Fatalf("an unregistered participant's vote or ack was recorded: %+v", p)
	}
	wantStatus(t, "a's vote", b.vote("j", 1, "a", prepared(1, "")), coordinator.StatusPreparing)
}

func testUnknownParticipant(t *testing.T, b *bundle) {
	b.job("j", config("a"))
	b.prepare("j")
	_, err := b.svc.Vote(b.ctx, "j", 1, "stranger", prepared(1, ""))
	wantErr(t, "a vote from a stranger", err, coordinator.ErrNotFound)
	_, err = b.svc.Register(b.ctx, "j", "stranger")
	wantErr(t, "Register(stranger)", err, coordinator.ErrNotFound)
	_, err = b.svc.Pending(b.ctx, "j", "stranger", 0, 0)
	wantErr(t, "Pending(stranger)", err, coordinator.ErrNotFound)
	_, err = b.svc.Register(b.ctx, "nope", "a")
	wantErr(t, "Register on a missing job", err, coordinator.ErrNotFound)
	_, err = b.svc.Vote(b.ctx, "j", 2, "a", prepared(1, ""))
	wantErr(t, "a vote on a missing checkpoint", err, coordinator.ErrNotFound)
	if job := b.getJob("j"); job.Epochs["stranger"] != 0 {
		t.Fatalf("a stranger got epoch %d", job.Epochs["stranger"])
	}
}

// The deadline tests act before the deadline, then after it: a second leaves room for a
// loaded machine.
func testDeadlineLateVote(t *testing.T, b *bundle) {
	b.job("j", config("prompt-sink", "late-sink"))
	cp, _, err := b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{Timeout: time.Second})
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if !sameTime(cp.Deadline, cp.CreatedAt.Add(time.Second)) {
		t.Fatalf("deadline %v, want created_at %v + 1s", cp.Deadline, cp.CreatedAt)
	}
	b.vote("j", 1, "prompt-sink", prepared(1, `["p"]`))
	time.Sleep(1250 * time.Millisecond)
	_, err = b.svc.Vote(b.ctx, "j", 1, "late-sink", prepared(1, `["l"]`))
	e := wantErr(t, "a vote after the deadline", err, coordinator.ErrAlreadyDecided)
	if e == nil || e.Checkpoint == nil || e.Checkpoint.Status != coordinator.StatusAborted {
		t.Fatalf("already_decided carries %+v, want the aborted checkpoint", e)
	}
	got := b.get("j", 1)
	wantStatus(t, "after the late vote", got, coordinator.StatusAborted)
	if !strings.Contains(got.AbortReason, "late-sink") || strings.Contains(got.AbortReason, "prompt-sink") {
		t.Fatalf("abort reason %q, want it to name late-sink and not prompt-sink", got.AbortReason)
	}
	if p := got.Participant("late-sink"); p.Vote != "" {
		t.Fatalf("the late vote was recorded: %+v", p)
	}
	if !sameTimePtr(got.DecidedAt, got.CompletedAt) || got.DecidedAt == nil || !got.DecidedAt.After(got.Deadline.Add(-time.Microsecond)) {
		t.Fatalf("aborted: decided_at %s, completed_at %s, deadline %v; want equal, not before the deadline",
			fmtTimePtr(got.DecidedAt), fmtTimePtr(got.CompletedAt), got.Deadline)
	}
}

func testDeadlineSweep(t *testing.T, b *bundle) {
	b.job("slow", config("sink-a"))
	b.prepare("slow") // one minute to go
	b.job("j", config("sink-a", "sink-b"))
	if n, err := b.svc.SweepExpired(b.ctx); err != nil || n != 0 {
		t.Fatalf("SweepExpired with nothing expired: %d, %v; want 0", n, err)
	}
	if _, _, err := b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{Timeout: time.Second}); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	b.vote("j", 1, "sink-a", prepared(1, ""))
	time.Sleep(1250 * time.Millisecond)
	if n, err := b.svc.SweepExpired(b.ctx); err != nil || n != 1 {
		t.Fatalf("SweepExpired: %d, %v; want 1 job swept", n, err)
	}
	cp := b.get("j", 1)
	wantStatus(t, "after the sweep", cp, coordinator.StatusAborted)
	if !strings.Contains(cp.AbortReason, "sink-b") || strings.Contains(cp.AbortReason, "sink-a") {
		t.Fatalf("abort reason %q, want it to name sink-b only", cp.AbortReason)
	}
	wantStatus(t, "the other job's checkpoint", b.get("slow", 1), coordinator.StatusPreparing)
	if n, err := b.svc.SweepExpired(b.ctx); err != nil || n != 0 {
		t.Fatalf("SweepExpired again: %d, %v; want 0", n, err)
	}
}

func testDeadlinePendingHidesExpired(t *testing.T, b *bundle) {
	b.job("j", config("a"))
	if _, _, err := b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{Timeout: time.Second}); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	p, err := b.svc.Pending(b.ctx, "j", "a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantItems(t, "before the deadline", p, "1 preparing vote []")
	time.Sleep(1250 * time.Millisecond)
	if p, err = b.svc.Pending(b.ctx, "j", "a", 0, 0); err != nil {
		t.Fatal(err)
	}
	wantItems(t, "after the deadline, before any sweep", p)
}

func testRule9HigherWaits(t *testing.T, b *bundle) {
	b.job("j", withMax(config("a", "b"), 3))
	for range 3 {
		b.prepare("j")
	}
	b.vote("j", 2, "a", prepared(1, `["a2"]`))
	wantStatus(t, "checkpoint 2 with every vote in while 1 is open", b.vote("j", 2, "b", prepared(1, `["b2"]`)), coordinator.StatusPreparing)
	_, err := b.svc.Commit(b.ctx, "j", 2, "")
	e := wantErr(t, "explicit commit of 2 while 1 is open", err, coordinator.ErrLowerCheckpointOpen)
	if e == nil || e.Checkpoint == nil || e.Checkpoint.ID != 2 || e.Checkpoint.Status != coordinator.StatusPreparing {
		t.Fatalf("lower_checkpoint_open carries %+v, want checkpoint 2 preparing", e)
	}
	wantStatus(t, "checkpoint 2 after the refused commit", b.get("j", 2), coordinator.StatusPreparing)
	b.vote("j", 1, "a", prepared(1, `["a1"]`))
	wantStatus(t, "checkpoint 1's last vote", b.vote("j", 1, "b", prepared(1, `["b1"]`)), coordinator.StatusCommitting)
	two := b.get("j", 2)
	wantStatus(t, "checkpoint 2 once 1 committed", two, coordinator.StatusCommitting)
	wantStatus(t, "checkpoint 3, without votes", b.get("j", 3), coordinator.StatusPreparing)
	if one := b.get("j", 1); one.DecidedAt == nil || two.DecidedAt == nil || two.DecidedAt.Before(*one.DecidedAt) {
		t.Fatalf("decided_at of 1 %s, of 2 %s: 2 must not be decided before 1", fmtTimePtr(one.DecidedAt), fmtTimePtr(two.DecidedAt))
	}
}

func testRule9AbortCascades(t *testing.T, b *bundle) {
	b.job("j", withMax(config("a", "b"), 3))
	for range 3 {
		b.prepare("j")
	}
	for _, id := range []int64{2, 3} {
		b.vote("j", id, "a", prepared(1, ""))
		b.vote("j", id, "b", prepared(1, ""))
	}
	wantStatus(t, "a's abort vote on 1", b.vote("j", 1, "a", abortVote(1, "disk full")), coordinator.StatusAborted)
	if cp := b.get("j", 1); !strings.Contains(cp.AbortReason, "disk full") {
		t.Fatalf("checkpoint 1's abort reason %q, want it to carry the vote's reason", cp.AbortReason)
	}
	for _, id := range []int64{2, 3} {
		cp := b.get("j", id)
		wantStatus(t, fmt.Sprintf("checkpoint %d, unanimous, above the aborted 1", id), cp, coordinator.StatusAborted)
		if !strings.Contains(cp.AbortReason, "1") {
			t.Fatalf("checkpoint %d's abort reason %q, want it to name checkpoint 1", id, cp.AbortReason)
		}
	}
	// An explicit abort cascades upwards only.
	for range 3 {
		b.prepare("j") // 4, 5, 6
	}
	if _, err := b.svc.Abort(b.ctx, "j", 5, "operator"); err != nil {
		t.Fatalf("Abort(5): %v", err)
	}
	wantStatus(t, "checkpoint 4, below the aborted 5", b.get("j", 4), coordinator.StatusPreparing)
	wantStatus(t, "checkpoint 6, above the aborted 5", b.get("j", 6), coordinator.StatusAborted)
}

// testRule9AbortCascadesPastItsVoters: a participant's abort also aborts the higher
// checkpoints that do not expect it (opened after the job's participants changed). This is
// intended: the pipeline's data is ordered job-wide, so what a higher checkpoint holds
// follows data that will be replayed, whoever votes on it.
func testRule9AbortCascadesPastItsVoters(t *testing.T, b *bundle) {
	b.job("j", withMax(config("a", "b"), 3))
	b.prepare("j") // 1: expects a and b
	if _, _, err := b.svc.PutJob(b.ctx, "j", withMax(config("b", "c"), 3)); err != nil {
		t.Fatal(err)
	}
	if e := b.register("j", "c"); e != 1 {
		t.Fatalf("Register(c): epoch %d", e)
	}
	b.prepare("j") // 2: expects b and c, not a
	b.vote("j", 2, "b", prepared(1, ""))
	b.vote("j", 2, "c", prepared(1, ""))
	wantStatus(t, "checkpoint 2, unanimous above the open 1", b.get("j", 2), coordinator.StatusPreparing)
	wantStatus(t, "a's abort vote on 1", b.vote("j", 1, "a", abortVote(1, "disk full")), coordinator.StatusAborted)
	cp := b.get("j", 2)
	wantStatus(t, "checkpoint 2, which does not expect a, above the aborted 1", cp, coordinator.StatusAborted)
	if cp.DecisionCause != coordinator.CauseLowerAborted {
		t.Fatalf("checkpoint 2's decision cause %q, want %q", cp.DecisionCause, coordinator.CauseLowerAborted)
	}
}

func testCommitVotesMissing(t *testing.T, b *bundle) {
	cfg := config("a", "b", "c")
	cfg.AutoCommit = false
	b.job("j", cfg)
	b.prepare("j")
	_, err := b.svc.Commit(b.ctx, "j", 1, "")
	if e := wantErr(t, "commit without votes", err, coordinator.ErrVotesMissing); e == nil || !slices.Equal(e.Missing, []string{"a", "b", "c"}) {
		t.Fatalf("votes_missing names %v, want [a b c]", e)
	}
	b.vote("j", 1, "b", prepared(1, ""))
	_, err = b.svc.Commit(b.ctx, "j", 1, "")
	if e := wantErr(t, "commit with b's vote only", err, coordinator.ErrVotesMissing); e == nil || !slices.Equal(e.Missing, []string{"a", "c"}) {
		t.Fatalf("votes_missing names %v, want [a c]", e)
	}
	b.vote("j", 1, "a", prepared(1, ""))
	wantStatus(t, "every vote in, auto_commit false", b.vote("j", 1, "c", prepared(1, "")), coordinator.StatusPreparing)
	cp, err := b.svc.Commit(b.ctx, "j", 1, "")
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	wantStatus(t, "Commit's answer", cp, coordinator.StatusCommitting)
	wantStatus(t, "after Commit", b.get("j", 1), coordinator.StatusCommitting)
	if cp, err = b.svc.Commit(b.ctx, "j", 1, ""); err != nil || cp.Status != coordinator.StatusCommitting {
		t.Fatalf("Commit again: %v; want committing, no error", err)
	}
	_, err = b.svc.Abort(b.ctx, "j", 1, "too late")
	if e := wantErr(t, "abort after commit", err, coordinator.ErrAlreadyDecided); e == nil || e.Checkpoint == nil || e.Checkpoint.Status != coordinator.StatusCommitting {
		t.Fatalf("already_decided carries %+v, want the committing checkpoint", e)
	}
	wantStatus(t, "after the refused abort", b.get("j", 1), coordinator.StatusCommitting)
}

func testAbort(t *testing.T, b *bundle) {
	b.job("j", config("a", "b"))
	b.prepare("j")
	b.vote("j", 1, "a", prepared(1, `["a1"]`))
	cp, err := b.svc.Abort(b.ctx, "j", 1, "operator says no")
	if err != nil {
		t.Fatalf("Abort: %v", err)
	}
	wantStatus(t, "Abort's answer", cp, coordinator.StatusAborted)
	got := b.get("j", 1)
	wantCheckpoint(t, "after Abort", cp, got)
	if got.AbortReason != "operator says no" || got.DecidedAt == nil || !sameTimePtr(got.DecidedAt, got.CompletedAt) {
		t.Fatalf("aborted: reason %q, decided_at %s, completed_at %s; want the given reason, both set and equal",
			got.AbortReason, fmtTimePtr(got.DecidedAt), fmtTimePtr(got.CompletedAt))
	}
	if again, err := b.svc.Abort(b.ctx, "j", 1, "another reason"); err != nil {
		t.Fatalf("Abort again: %v", err)
	} else {
		wantCheckpoint(t, "Abort again", got, again)
	}
	_, err = b.svc.Commit(b.ctx, "j", 1, "")
	wantErr(t, "commit after abort", err, coordinator.ErrAlreadyDecided)
	_, err = b.svc.Vote(b.ctx, "j", 1, "b", prepared(1, ""))
	wantErr(t, "a vote after abort", err, coordinator.ErrAlreadyDecided)
	wantCheckpoint(t, "a's vote repeated after abort", got, b.vote("j", 1, "a", prepared(1, `["a1"]`)))
	wantCheckpoint(t, "after the refused requests", got, b.get("j", 1))
	_, err = b.svc.Abort(b.ctx, "j", 99, "")
	wantErr(t, "abort of a missing checkpoint", err, coordinator.ErrNotFound)
	_, err = b.svc.Abort(b.ctx, "nope", 1, "")
	wantErr(t, "abort on a missing job", err, coordinator.ErrNotFound)
	b.prepare("j")
	if cp, err := b.svc.Abort(b.ctx, "j", 2, ""); err != nil || cp.AbortReason == "" {
		t.Fatalf("Abort without a reason: %+v, %v; want aborted with a default reason", cp, err)
	}
}

func testAckOnPreparing(t *testing.T, b *bundle) {
	b.job("j", config("a", "b"))
	b.prepare("j")
	b.vote("j", 1, "a", prepared(1, ""))
	_, err := b.svc.Ack(b.ctx, "j", 1, "a", 1)
	if e := wantErr(t, "ack on a preparing checkpoint", err, coordinator.ErrNotDecided); e == nil || e.Checkpoint == nil || e.Checkpoint.ID != 1 {
		t.Fatalf("not_decided carries %+v, want checkpoint 1", e)
	}
	if p := b.get("j", 1).Participant("a"); p.AckedAt != nil {
		t.Fatal("the refused ack was recorded")
	}
}

func testAckOnAborted(t *testing.T, b *bundle) {
	b.job("j", config("a", "b"))
	b.prepare("j")
	b.vote("j", 1, "a", prepared(1, `["a1"]`))
	b.vote("j", 1, "b", abortVote(1, "no"))
	p, err := b.svc.Pending(b.ctx, "j", "a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantItems(t, "a before acking the abort", p, `1 aborted abort ["a1"]`)
	cp := b.ack("j", 1, "a", 1)
	wantStatus(t, "ack on an aborted checkpoint", cp, coordinator.StatusAborted)
	got := b.get("j", 1)
	wantCheckpoint(t, "after the ack", cp, got)
	if got.Participant("a").AckedAt == nil {
		t.Fatal("the ack on the aborted checkpoint was not recorded")
	}
	wantCheckpoint(t, "the same ack again", got, b.ack("j", 1, "a", 1))
	wantStatus(t, "b's ack", b.ack("j", 1, "b", 1), coordinator.StatusAborted)
	if p, err = b.svc.Pending(b.ctx, "j", "a", 0, 0); err != nil {
		t.Fatal(err)
	}
	wantItems(t, "a after acking the abort", p)
}

func testPending(t *testing.T, b *bundle) {
	b.job("j", withMax(config("a", "b"), 3))
	b.prepare("j")
	b.vote("j", 1, "a", prepared(1, `["a1"]`))
	b.vote("j", 1, "b", prepared(1, `["b1"]`)) // 1 committing
	b.prepare("j")
	b.vote("j", 2, "a", prepared(1, `["a2"]`))
	b.vote("j", 2, "b", abortVote(1, "no")) // 2 aborted
	b.prepare("j")                          // 3 preparing
	b.ack("j", 1, "b", 1)

	pa, err := b.svc.Pending(b.ctx, "j", "a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if pa.Epoch != 1 || pa.Job != "j" || pa.Participant != "a" {
		t.Fatalf("Pending(a): %+v, want job j, participant a, epoch 1", pa)
	}
	wantItems(t, "Pending(a)", pa, `1 committing commit ["a1"]`, `2 aborted abort ["a2"]`, `3 preparing vote []`)
	pb, err := b.svc.Pending(b.ctx, "j", "b", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantItems(t, "Pending(b)", pb, `3 preparing vote []`)

	reg, err := b.svc.Register(b.ctx, "j", "a") // aborts 3, which a had not voted on
	if err != nil {
		t.Fatal(err)
	}
	if reg.Epoch != 2 {
		t.Fatalf("Register(a) again: epoch %d, want 2", reg.Epoch)
	}
	wantItems(t, "Register(a)'s pending", reg, `1 committing commit ["a1"]`, `2 aborted abort ["a2"]`)
	if pb, err = b.svc.Pending(b.ctx, "j", "b", 0, 0); err != nil {
		t.Fatal(err)
	}
	wantItems(t, "Pending(b) once 3 aborted", pb)
}

func testDeleteJobBusy(t *testing.T, b *bundle) {
	b.job("empty", config("a"))
	if err := b.svc.DeleteJob(b.ctx, "empty"); err != nil {
		t.Fatalf("DeleteJob of a job without checkpoints: %v", err)
	}
	b.job("j", config("a", "b"))
	busy := func(why string) {
		t.Helper()
		wantErr(t, "DeleteJob with "+why, b.svc.DeleteJob(b.ctx, "j"), coordinator.ErrJobBusy)
		b.getJob("j")
	}
	b.prepare("j")
	busy("a preparing checkpoint")
	b.vote("j", 1, "a", prepared(1, ""))
	b.vote("j", 1, "b", prepared(1, ""))
	busy("a committing checkpoint")
	b.ack("j", 1, "a", 1)
	busy("a committing checkpoint acked by one participant")
	b.ack("j", 1, "b", 1)
	b.prepare("j")
	b.vote("j", 2, "a", prepared(1, `["a2"]`))
	if _, err := b.svc.Abort(b.ctx, "j", 2, ""); err != nil {
		t.Fatal(err)
	}
	busy("an aborted checkpoint whose prepared vote is not acked")
	b.ack("j", 2, "a", 1)
	if err := b.svc.DeleteJob(b.ctx, "j"); err != nil {
		t.Fatalf("DeleteJob with nothing owed: %v", err)
	}
	_, err := b.svc.GetJob(b.ctx, "j")
	wantErr(t, "GetJob after DeleteJob", err, coordinator.ErrNotFound)
	wantErr(t, "DeleteJob again", b.svc.DeleteJob(b.ctx, "j"), coordinator.ErrNotFound)
}

// testDeleteJobExpired: DeleteJob first aborts the expired checkpoint, then finds nothing
// owed, in one transaction: the store's reads see the transaction's own writes.
func testDeleteJobExpired(t *testing.T, b *bundle) {
	b.job("j", config("a"))
	if _, _, err := b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{Timeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	if err := b.svc.DeleteJob(b.ctx, "j"); err != nil {
		t.Fatalf("DeleteJob whose only checkpoint expired unvoted: %v, want success", err)
	}
	_, err := b.store.GetJob(b.ctx, "j")
	wantNotFound(t, "GetJob after DeleteJob", err)
}

func testIDsNeverReused(t *testing.T, b *bundle) {
	b.job("j", config("a"))
	b.prepare("j")
	b.vote("j", 1, "a", prepared(1, ""))
	b.ack("j", 1, "a", 1)
	b.prepare("j")
	if _, err := b.svc.Abort(b.ctx, "j", 2, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.svc.DeleteJob(b.ctx, "j"); err != nil {
		t.Fatalf("DeleteJob: %v", err)
	}
	if _, created, err := b.svc.PutJob(b.ctx, "j", config("a")); err != nil || !created {
		t.Fatalf("PutJob after delete: created %v, err %v; want created", created, err)
	}
	job, err := b.svc.GetJob(b.ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if job.LastCheckpoint != nil || job.Epochs["a"] != 1 {
		t.Fatalf("job created again: last_checkpoint %s, epoch of a %d; want null, 1 (kept)", fmtIDPtr(job.LastCheckpoint), job.Epochs["a"])
	}
	if e := b.register("j", "a"); e != 2 {
		t.Fatalf("Register after delete and create: epoch %d, want 2 (higher than any before)", e)
	}
	if cp := b.prepare("j"); cp.ID != 3 {
		t.Fatalf("first checkpoint after delete and create: id %d, want 3", cp.ID)
	}
	// Its id was issued once: it is gone, not unknown.
	_, err = b.svc.GetCheckpoint(b.ctx, "j", 1, 0)
	wantErr(t, "checkpoint 1 of the deleted job", err, coordinator.ErrGone)
	_, err = b.svc.GetCheckpoint(b.ctx, "j", 4, 0)
	wantErr(t, "checkpoint 4, never issued", err, coordinator.ErrNotFound)
}

func testTooManyCheckpoints(t *testing.T, b *bundle) {
	b.job("j", config("a"))
	b.prepare("j")
	_, _, err := b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{})
	if e := wantErr(t, "a second Prepare under max_concurrent_checkpoints 1", err, coordinator.ErrTooManyCheckpoints); e == nil || e.Checkpoint == nil || e.Checkpoint.ID != 1 {
		t.Fatalf("too_many_checkpoints carries %+v, want checkpoint 1", e)
	}
	if _, err := b.svc.Abort(b.ctx, "j", 1, ""); err != nil {
		t.Fatal(err)
	}
	if cp := b.prepare("j"); cp.ID != 2 {
		t.Fatalf("Prepare after the refused one: id %d, want 2 (a refused Prepare uses no id)", cp.ID)
	}
	if _, _, err := b.svc.PutJob(b.ctx, "j", withMax(config("a"), 2)); err != nil {
		t.Fatal(err)
	}
	b.prepare("j")
	_, _, err = b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{})
	if e := wantErr(t, "a third Prepare under max 2", err, coordinator.ErrTooManyCheckpoints); e == nil || e.Checkpoint == nil || e.Checkpoint.ID != 3 {
		t.Fatalf("too_many_checkpoints carries %+v, want checkpoint 3", e)
	}
}

func testIdempotencyKey(t *testing.T, b *bundle) {
	b.job("j", config("a"))
	b.job("k", config("a"))
	req := coordinator.PrepareRequest{IdempotencyKey: "key-1", Fingerprint: "f1"}
	first, replayed, err := b.svc.Prepare(b.ctx, "j", req)
	if err != nil || replayed || first.ID != 1 {
		t.Fatalf("Prepare with a new key: %v, replayed %v, %v; want checkpoint 1, not replayed", first, replayed, err)
	}
	again, replayed, err := b.svc.Prepare(b.ctx, "j", req)
	if err != nil || !replayed {
		t.Fatalf("Prepare retried with the same key: replayed %v, %v; want replayed (before any capacity check)", replayed, err)
	}
	wantCheckpoint(t, "the retried Prepare", first, again)
	_, _, err = b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{IdempotencyKey: "key-1", Fingerprint: "f2"})
	wantErr(t, "the same key with another fingerprint", err, coordinator.ErrIdempotencyConflict)
	if _, err := b.svc.Abort(b.ctx, "j", 1, ""); err != nil {
		t.Fatal(err)
	}
	again, replayed, err = b.svc.Prepare(b.ctx, "j", req)
	if err != nil || !replayed || again.ID != 1 || again.Status != coordinator.StatusAborted {
		t.Fatalf("retry after the abort: %+v, replayed %v, %v; want checkpoint 1 as it stands (aborted)", again, replayed, err)
	}
	second, replayed, err := b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{IdempotencyKey: "key-2", Fingerprint: "f1"})
	if err != nil || replayed || second.ID != 2 {
		t.Fatalf("Prepare with another key: %+v, replayed %v, %v; want checkpoint 2", second, replayed, err)
	}
	other, replayed, err := b.svc.Prepare(b.ctx, "k", req)
	if err != nil || replayed || other.Job != "k" || other.ID != 1 {
		t.Fatalf("the same key on another job: %+v, replayed %v, %v; want k's checkpoint 1, new", other, replayed, err)
	}
}

func testLongPollWoken(t *testing.T, b *bundle) {
	b.job("j", config("a", "b"))
	b.prepare("j")
	b.vote("j", 1, "a", prepared(1, ""))
	voted := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := b.svc.Vote(b.ctx, "j", 1, "b", prepared(1, ""))
		voted <- err
	}()
	start := time.Now()
	cp, err := b.svc.GetCheckpoint(b.ctx, "j", 1, 10*time.Second)
	elapsed := time.Since(start)
	if err := <-voted; err != nil {
		t.Fatalf("the other goroutine's vote: %v", err)
	}
	if err != nil {
		t.Fatalf("GetCheckpoint with wait: %v", err)
	}
	wantStatus(t, "long poll woken by the deciding vote", cp, coordinator.StatusCommitting)
	if elapsed > 3*time.Second {
		t.Fatalf("long poll answered after %v; the decision at 300ms should have woken it", elapsed)
	}
}

// A long-poll on pending ends when the job changes: a participant taken out of the job,
// or any participant of a deleted job, is answered not found then, not at the end of its
// wait (which answers what it last knew: nothing owed).
func testPendingWokenByJobChange(t *testing.T, b *bundle) {
	b.job("j", config("a", "b"))
	changed := make(chan error, 1)
	change := func(fn func() error) {
		go func() {
			time.Sleep(300 * time.Millisecond)
			changed <- fn()
		}()
	}
	change(func() error {
		_, _, err := b.svc.PutJob(b.ctx, "j", config("a"))
		return err
	})
	_, err := b.svc.Pending(b.ctx, "j", "b", 20*time.Second, 0)
	if cerr := <-changed; cerr != nil {
		t.Fatalf("PutJob without b: %v", cerr)
	}
	wantErr(t, "b's long-poll once b was taken out of the job", err, coordinator.ErrNotFound)

	change(func() error { return b.svc.DeleteJob(b.ctx, "j") })
	_, err = b.svc.Pending(b.ctx, "j", "a", 20*time.Second, 0)
	if cerr := <-changed; cerr != nil {
		t.Fatalf("DeleteJob: %v", cerr)
	}
	wantErr(t, "a's long-poll once the job was deleted", err, coordinator.ErrNotFound)
}

func testLongPollTimesOut(t *testing.T, b *bundle) {
	b.job("j", config("a"))
	b.prepare("j")
	start := time.Now()
	cp, err := b.svc.GetCheckpoint(b.ctx, "j", 1, 300*time.Millisecond)
	if err != nil {
		t.Fatalf("GetCheckpoint with wait: %v", err)
	}
	wantStatus(t, "long poll with nothing happening", cp, coordinator.StatusPreparing)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("a 300ms long poll answered after %v", elapsed)
	}
}
