package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// Decision records and operator actions, through the service, on the real store: every
// decision_cause from the request sequence that produces it, decided_by and acked_by with
// and without a token, complete on each status, and the audit of what was done by request.

func testDecisionCauses(t *testing.T, b *bundle) {
	b.job("j", withMax(config("a", "b"), 3))
	want := func(id int64, status coordinator.Status, cause coordinator.Cause, by string) {
		t.Helper()
		cp := b.get("j", id)
		if cp.Status != status || cp.DecisionCause != cause || cp.DecidedBy != by {
			t.Fatalf("checkpoint %d: %s, cause %q, by %q; want %s, %q, %q", id, cp.Status, cp.DecisionCause, cp.DecidedBy, status, cause, by)
		}
	}
	as := func(token string) *bundle {
		c := *b
		c.ctx = coordinator.WithActor(b.ctx, token)
		return &c
	}
	// all_prepared, by the last voter's token.
	b.prepare("j")
	as("tok-a").vote("j", 1, "a", prepared(1, ""))
	want(1, coordinator.StatusPreparing, "", "")
	as("tok-b").vote("j", 1, "b", prepared(1, ""))
	want(1, coordinator.StatusCommitting, coordinator.CauseAllPrepared, "tok-b")
	// abort_vote, and lower_aborted for the higher ones, by the same token.
	b.prepare("j")
	b.prepare("j")
	as("tok-a").vote("j", 2, "a", abortVote(1, "disk full"))
	want(2, coordinator.StatusAborted, coordinator.CauseAbortVote, "tok-a")
	want(3, coordinator.StatusAborted, coordinator.CauseLowerAborted, "tok-a")
	// abort_request, without a token: by nobody.
	b.prepare("j")
	if _, err := b.svc.Abort(b.ctx, "j", 4, "maintenance"); err != nil {
		t.Fatal(err)
	}
	want(4, coordinator.StatusAborted, coordinator.CauseAbortRequest, "")
	// commit_request, with auto_commit off.
	cfg := withMax(config("a", "b"), 3)
	cfg.AutoCommit = false
	if _, _, err := b.svc.PutJob(b.ctx, "j", cfg); err != nil {
		t.Fatal(err)
	}
	b.prepare("j")
	b.vote("j", 5, "a", prepared(1, ""))
	b.vote("j", 5, "b", prepared(1, ""))
	want(5, coordinator.StatusPreparing, "", "")
	if _, err := as("operator-1").svc.Commit(coordinator.WithActor(b.ctx, "operator-1"), "j", 5, "checked by hand"); err != nil {
		t.Fatal(err)
	}
	want(5, coordinator.StatusCommitting, coordinator.CauseCommitRequest, "operator-1")
	// registration: a participant that had not voted registers again.
	b.prepare("j")
	if _, err := as("tok-b").svc.Register(coordinator.WithActor(b.ctx, "tok-b"), "j", "b"); err != nil {
		t.Fatal(err)
	}
	want(6, coordinator.StatusAborted, coordinator.CauseRegistration, "tok-b")
	// deadline: by nobody, whoever's request found it expired.
	cp, _, err := b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{Timeout: coordinator.MinCheckpointTimeout})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(coordinator.MinCheckpointTimeout + 20*time.Millisecond)
	_, err = b.svc.Vote(coordinator.WithActor(b.ctx, "tok-a"), "j", cp.ID, "a", prepared(1, ""))
	if !errors.Is(err, coordinator.ErrAlreadyDecided) {
		t.Fatalf("a late vote: %v, want already_decided", err)
	}
	want(cp.ID, coordinator.StatusAborted, coordinator.CauseDeadline, "")
}

func testAckedByAndComplete(t *testing.T, b *bundle) {
	b.job("j", config("a", "b", "c"))
	b.prepare("j")
	for _, p := range []string{"a", "b", "c"} {
		b.vote("j", 1, p, prepared(1, ""))
	}
	b.ack("j", 1, "a", 1)
	// Preparing: not decided.
	b.prepare("j")
	if _, err := b.svc.Complete(b.ctx, "j", 2, ""); !errors.Is(err, coordinator.ErrNotDecided) {
		t.Fatalf("Complete of a preparing checkpoint: %v, want not_decided", err)
	}
	if cp := b.get("j", 2); cp.Status != coordinator.StatusPreparing {
		t.Fatalf("a refused Complete left checkpoint 2 %s", cp.Status)
	}
	// Committing: every missing ack, by the operator's token; then committed, nothing owed.
	ctx := coordinator.WithActor(b.ctx, "ops-alice")
	cp, err := b.svc.Complete(ctx, "j", 1, "b and c were decommissioned")
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if cp.Status != coordinator.StatusCommitted || cp.CompletedAt == nil {
		t.Fatalf("after Complete checkpoint 1 is %s, want committed", cp.Status)
	}
	stored := b.get("j", 1)
	for _, p := range stored.Participants {
		wantBy := map[string]string{"a": "a", "b": "ops-alice", "c": "ops-alice"}[p.Name]
		if p.AckedAt == nil || p.AckedBy != wantBy {
			t.Errorf("participant %s: acked at %v by %q, want by %q", p.Name, p.AckedAt, p.AckedBy, wantBy)
		}
	}
	for _, p := range []string{"a", "b", "c"} {
		if pending, err := b.svc.Pending(b.ctx, "j", p, 0, 0); err != nil || len(pending.Items) > 1 {
			t.Fatalf("pending of %s after Complete: %+v, %v; want only checkpoint 2's vote", p, pending, err)
		}
	}
	// Repeating it changes nothing.
	before := b.get("j", 1)
	if _, err := b.svc.Complete(ctx, "j", 1, ""); err != nil {
		t.Fatalf("Complete again: %v", err)
	}
	wantCheckpoint(t, "checkpoint 1 after a second Complete", before, b.get("j", 1))
	// Aborted: every unacked prepared vote, without a token by "operator".
	b.vote("j", 2, "a", prepared(1, `["a-2"]`))
	b.vote("j", 2, "b", abortVote(1, "no"))
	if _, err := b.svc.Complete(b.ctx, "j", 2, ""); err != nil {
		t.Fatalf("Complete of an aborted checkpoint: %v", err)
	}
	for _, p := range b.get("j", 2).Participants {
		switch p.Name {
		case "a":
			if p.AckedAt == nil || p.AckedBy != coordinator.OperatorAcker {
				t.Errorf("a's prepared vote on aborted 2: acked at %v by %q, want by %q", p.AckedAt, p.AckedBy, coordinator.OperatorAcker)
			}
		default:
			if p.AckedAt != nil {
				t.Errorf("%s, which did not vote prepared, was acked by Complete", p.Name)
			}
		}
	}
	if err := b.svc.DeleteJob(b.ctx, "j"); err != nil {
		t.Fatalf("DeleteJob once nothing is owed: %v", err)
	}
}

func testAudit(t *testing.T, b *bundle) {
	ctx := coordinator.WithRequestID(coordinator.WithActor(b.ctx, "ops-bob"), "req-1")
	cfg := config("a", "b")
	cfg.MaxConcurrentCheckpoints = 2
	if _, _, err := b.svc.PutJob(ctx, "j", cfg); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.svc.PutJob(ctx, "j", cfg); err != nil {
		t.Fatal(err)
	}
	b.register("j", "a")
	b.register("j", "b")
	// Protocol decisions are not audited: a round that commits by its votes, an abort vote.
	b.prepare("j")
	b.vote("j", 1, "a", prepared(1, ""))
	b.vote("j", 1, "b", prepared(1, ""))
	b.prepare("j")
	b.vote("j", 2, "a", abortVote(1, "x"))
	// Requests are: an abort, a commit, a complete; a repeat that changes nothing is not.
	b.prepare("j")
	if _, err := b.svc.Abort(ctx, "j", 3, "bad data"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Abort(ctx, "j", 3, "bad data"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Commit(ctx, "j", 1, "already"); err != nil { // committing already
		t.Fatal(err)
	}
	if _, err := b.svc.Complete(ctx, "j", 1, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.svc.PutJob(b.ctx, "other", config("x")); err != nil {
		t.Fatal(err)
	}
	got, more, err := b.svc.ListAudit(b.ctx, coordinator.AuditQuery{Jobs: "j", Limit: 100})
	if err != nil || more {
		t.Fatalf("ListAudit: %v, more %v", err, more)
	}
	var lines []string
	for _, e := range got {
		lines = append(lines, fmt.Sprintf("%s %s %d %s %s %s", e.Action, e.Job, e.Checkpoint, e.Token, e.Reason, e.RequestID))
		if e.At.IsZero() || time.Since(e.At) > time.Minute {
			t.Errorf("entry %s at %v, want about now", e.Action, e.At)
		}
	}
	want := []string{
		"checkpoint_completed j 1 ops-bob gone req-1",
		"checkpoint_aborted j 3 ops-bob bad data req-1",
		"job_updated j 0 ops-bob  req-1",
		"job_created j 0 ops-bob  req-1",
	}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("audit of j, newest first:\n%q\nwant\n%q", lines, want)
	}
	// Deleting a job is audited too, and paging goes on below the last id.
	if err := b.svc.DeleteJob(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	all, more, err := b.svc.ListAudit(b.ctx, coordinator.AuditQuery{Limit: 2})
	if err != nil || !more || len(all) != 2 || all[0].Action != coordinator.AuditJobDeleted || all[0].Job != "other" {
		t.Fatalf("the first page of the whole audit: %+v, more %v, %v", all, more, err)
	}
	rest, _, err := b.svc.ListAudit(b.ctx, coordinator.AuditQuery{Limit: 100, Before: all[1].ID})
	if err != nil || len(rest) != 4 {
		t.Fatalf("the rest of the audit: %d entries, %v; want 4", len(rest), err)
	}
	// A cursor past every id the database has issued, up to the largest an id can be, is a
	// position like any other: it starts at the newest entry.
	for _, before := range []int64{1<<31 - 1, 1 << 31, 1<<32 + 1, math.MaxInt64} {
		got, _, err := b.svc.ListAudit(b.ctx, coordinator.AuditQuery{Limit: 100, Before: before})
		if err != nil || len(got) != 6 {
			t.Fatalf("the audit below id %d: %d entries, %v; want all 6", before, len(got), err)
		}
	}
	// Tokens' actions belong to no job: listed only when asked for.
	if ts, ok := b.store.(coordinator.TokenStore); ok {
		tokens := coordinator.NewTokens(ts)
		if _, _, err := tokens.Create(ctx, coordinator.Token{Name: "r", Scopes: []coordinator.Scope{coordinator.ScopeRead}, Job: "*"}); err != nil {
			t.Fatal(err)
		}
		if err := tokens.Revoke(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		withTokens, _, err := b.svc.ListAudit(b.ctx, coordinator.AuditQuery{Limit: 2, WithTokens: true})
		if err != nil || len(withTokens) != 2 || withTokens[0].Action != coordinator.AuditTokenRevoked || withTokens[0].Subject != "r" ||
			withTokens[1].Action != coordinator.AuditTokenCreated || withTokens[0].Token != "ops-bob" {
			t.Fatalf("token actions: %+v, %v", withTokens, err)
		}
		without, _, err := b.svc.ListAudit(b.ctx, coordinator.AuditQuery{Limit: 1})
		if err != nil || len(without) != 1 || without[0].Action != coordinator.AuditJobDeleted {
			t.Fatalf("the audit without token actions starts with %+v, %v; want the job deletion", without, err)
		}
	}
}

// testRetentionPassAcrossJobs: one pass of Service.RunRetention deletes what expired in
// every job, with batches that end inside a job and go on from there.
func testRetentionPassAcrossJobs(t *testing.T, b *bundle) {
	cfg := config("a")
	cfg.Retention = coordinator.MinRetention
	jobs := []string{"r-a", "r-b", "r-c"}
	for _, job := range jobs {
		b.job(job, cfg)
		for id := int64(1); id <= 3; id++ { // 1 and 2 expire; 3, the last committed, stays
			b.prepare(job)
			b.vote(job, id, "a", prepared(1, ""))
			b.ack(job, id, "a", 1)
		}
	}
	time.Sleep(coordinator.MinRetention + 100*time.Millisecond)
	// Batches of 3: r-a's two and r-b's first; r-b's second and r-c's two; then nothing.
	// The next pass would come after an hour: the first must do it all.
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var deleted atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.svc.RunRetention(ctx, coordinator.RetentionOptions{Interval: time.Hour, Batch: 3, Deleted: func(n int) {
			deleted.Add(int64(n))
		}})
	}()
	for end := time.Now().Add(10 * time.Second); deleted.Load() < 6 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if n := deleted.Load(); n != 6 {
		t.Fatalf("the first retention pass deleted %d checkpoints; want 6 (two in each of three jobs)", n)
	}
	for _, job := range jobs {
		for id := int64(1); id <= 3; id++ {
			cp, err := b.store.GetCheckpoint(b.ctx, job, id)
			switch {
			case id == 3 && (err != nil || cp == nil):
				t.Errorf("%s's last committed checkpoint: %v, %v; want it kept", job, cp, err)
			case id < 3 && err != coordinator.ErrGone:
				t.Errorf("%s's checkpoint %d: %v, %v; want ErrGone", job, id, cp, err)
			}
		}
	}
}

// testRetention: what retention deletes and what it keeps, and 410 for what is no more.
func testRetention(t *testing.T, b *bundle) {
	cfg := withMax(config("a", "b"), 10)
	cfg.Retention = coordinator.MinRetention
	b.job("j", cfg)
	key := coordinator.PrepareRequest{IdempotencyKey: "k-1", Fingerprint: "f"}
	if _, _, err := b.svc.Prepare(b.ctx, "j", key); err != nil { // 1: committed, acked by both: deleted
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		b.vote("j", 1, p, prepared(1, ""))
	}
	b.ack("j", 1, "a", 1)
	b.ack("j", 1, "b", 1)
	b.prepare("j") // 2: aborted, with a prepared vote never acked: kept (owed)
	b.vote("j", 2, "a", prepared(1, `["a-2"]`))
	b.vote("j", 2, "b", abortVote(1, "no"))
	b.prepare("j") // 3: aborted, no prepared vote: deleted
	b.vote("j", 3, "a", abortVote(1, "no"))
	// Nothing has expired yet: 1 and 3 completed less than the retention ago (checked at
	// once, so that a slow machine does not let the retention pass meanwhile).
	checkPrune := func(after string, limit int, want ...string) {
		t.Helper()
		got, err := b.store.JobsToPrune(b.ctx, after, limit)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("JobsToPrune(%q, %d): %q, %v; want %q", after, limit, got, err, want)
		}
	}
	if n, last, _, err := b.store.DeleteExpired(b.ctx, []string{"j"}, 100); err != nil || n != 0 || last != "" {
		t.Fatalf("DeleteExpired before anything expired: %d, %q, %v", n, last, err)
	}
	checkPrune("", 100)
	b.prepare("j") // 4: committed, but not the last committed (5 is): deleted
	for _, p := range []string{"a", "b"} {
		b.vote("j", 4, p, prepared(1, ""))
	}
	b.ack("j", 4, "a", 1)
	b.ack("j", 4, "b", 1)
	b.prepare("j") // 5: committing (b never acks): kept
	for _, p := range []string{"a", "b"} {
		b.vote("j", 5, p, prepared(1, ""))
	}
	b.ack("j", 5, "a", 1)
	b.prepare("j") // 6: preparing: kept
	// Another job that keeps everything.
	keep := config("a")
	keep.Retention = 0
	b.job("forever", keep)
	b.prepare("forever")
	b.vote("forever", 1, "a", abortVote(1, "x"))
	// A job whose only committed checkpoint is its last committed: kept, whatever its age.
	last := config("a")
	last.Retention = coordinator.MinRetention
	b.job("last", last)
	b.prepare("last")
	b.vote("last", 1, "a", prepared(1, ""))
	b.ack("last", 1, "a", 1)
	b.prepare("last")
	b.vote("last", 2, "a", abortVote(1, "x"))

	time.Sleep(coordinator.MinRetention + 100*time.Millisecond)
	// j has 1, 3 and 4 to delete, last its 2; forever keeps everything.
	checkPrune("", 100, "j", "last")
	checkPrune("", 1, "j")
	checkPrune("j", 100, "last")
	// A batch takes the jobs in order: j's three, then last's one.
	both := []string{"j", "last"}
	n, from, skipped, err := b.store.DeleteExpired(b.ctx, both, 1)
	if err != nil || n != 1 || from != "j" || skipped {
		t.Fatalf("DeleteExpired(limit 1): %d, last %q, skipped %v, %v; want 1, from j", n, from, skipped, err)
	}
	n, from, _, err = b.store.DeleteExpired(b.ctx, both, 2)
	if err != nil || n != 2 || from != "j" {
		t.Fatalf("DeleteExpired(limit 2): %d, last %q, %v; want 2 more from j (1, 3 and 4 in all)", n, from, err)
	}
	if cp, err := b.store.GetCheckpoint(b.ctx, "last", 2); err != nil || cp == nil {
		t.Fatalf("checkpoint 2 of job last after a batch that j filled: %v, %v; want it still there", cp, err)
	}
	if n, from, _, err := b.store.DeleteExpired(b.ctx, both, 100); err != nil || n != 1 || from != "" {
		t.Fatalf("DeleteExpired of the rest: %d, last %q, %v; want 1 (last's aborted 2, not its last committed 1), and every job looked at", n, from, err)
	}
	if cp, err := b.store.GetCheckpoint(b.ctx, "last", 1); err != nil || cp == nil {
		t.Fatalf("the last committed checkpoint of job last: %v, %v; want it kept", cp, err)
	}
	// Retention deleted last's highest checkpoint (2, aborted, owing nothing): the job still
	// shows it as its last checkpoint, in its view and in the list, and the next is 3.
	for _, j := range func() []*coordinator.Job {
		one, err := b.svc.GetJob(b.ctx, "last")
		if err != nil {
			t.Fatal(err)
		}
		all, _, err := b.svc.ListJobs(b.ctx, "last", "", 10)
		if err != nil || len(all) != 1 {
			t.Fatalf("ListJobs(last): %v, %v", all, err)
		}
		return []*coordinator.Job{one, all[0]}
	}() {
		if fmtIDPtr(j.LastCheckpoint) != "2" || fmtIDPtr(j.LastCommitted) != "1" {
			t.Fatalf("job last after retention deleted its checkpoint 2: last_checkpoint %s, last_committed %s; want 2, 1",
				fmtIDPtr(j.LastCheckpoint), fmtIDPtr(j.LastCommitted))
		}
	}
	if id := b.prepare("last").ID; id != 3 {
		t.Fatalf("the checkpoint opened after retention deleted 2: %d, want 3", id)
	}
	if n, _, _, _ := b.store.DeleteExpired(b.ctx, []string{"forever"}, 100); n != 0 {
		t.Fatalf("retention 0 deleted %d", n)
	}
	// What is left is owed (j's 2), open (5, 6) or a last committed (last's 1): nothing to prune.
	checkPrune("", 100)
	for id, kept := range map[int64]bool{1: false, 2: true, 3: false, 4: false, 5: true, 6: true} {
		cp, err := b.store.GetCheckpoint(b.ctx, "j", id)
		switch {
		case kept && (err != nil || cp == nil):
			t.Errorf("checkpoint %d: %v, %v; want it kept", id, cp, err)
		case !kept && err != coordinator.ErrGone:
			t.Errorf("checkpoint %d: %v, %v; want ErrGone", id, cp, err)
		}
	}
	if cp, err := b.store.GetCheckpoint(b.ctx, "j", 99); cp != nil || err != nil {
		t.Errorf("a checkpoint never issued: %v, %v; want nil, nil", cp, err)
	}
	// 410 for reads, votes and acks of what is no more; the ids go on.
	for what, err := range map[string]error{
		"read": func() error { _, err := b.svc.GetCheckpoint(b.ctx, "j", 1, 0); return err }(),
		"vote": func() error { _, err := b.svc.Vote(b.ctx, "j", 3, "b", prepared(1, "")); return err }(),
		"ack":  func() error { _, err := b.svc.Ack(b.ctx, "j", 1, "a", 1); return err }(),
	} {
		if !errors.Is(err, coordinator.ErrGone) {
			t.Errorf("%s of a deleted checkpoint: %v, want gone", what, err)
		}
	}
	if _, err := b.svc.GetCheckpoint(b.ctx, "j", 7, 0); !errors.Is(err, coordinator.ErrNotFound) {
		t.Errorf("a read of a checkpoint never issued: %v, want not_found", err)
	}
	if cp := b.prepare("j"); cp.ID != 7 {
		t.Fatalf("the next checkpoint is %d, want 7", cp.ID)
	}
	// The Idempotency-Key went with its checkpoint: the same key opens a new one.
	b.vote("j", 6, "a", abortVote(1, "x")) // and 7 with it (rule 9), which makes room for one more
	cp, replayed, err := b.svc.Prepare(b.ctx, "j", key)
	if err != nil || replayed || cp.ID != 8 {
		t.Fatalf("prepare with the deleted checkpoint's key: %v, replayed %v, %v; want a new checkpoint 8", cp, replayed, err)
	}
	// The job's view still shows its last committed checkpoint.
	if j := b.getJob("j"); j.LastCommitted == nil || *j.LastCommitted != 5 {
		t.Fatalf("last committed %v, want 5", j.LastCommitted)
	}
}

// testRetentionAgreesWithDeletable: what the store's deletion removes is exactly what
// coordinator.Deletable (rule 12) says it may, over checkpoints of every kind: committed and
// acked, the last committed, committing, aborted with a prepared vote rolled back or not,
// aborted with none, not expired yet, preparing.
func testRetentionAgreesWithDeletable(t *testing.T, b *bundle) {
	cfg := withMax(config("a", "b"), 10)
	cfg.Retention = coordinator.MinRetention
	b.job("j", cfg)
	commit := func(ackB bool) {
		id := b.prepare("j").ID
		b.vote("j", id, "a", prepared(1, ""))
		b.vote("j", id, "b", prepared(1, ""))
		b.ack("j", id, "a", 1)
		if ackB {
			b.ack("j", id, "b", 1)
		}
	}
	commit(true)   // 1: committed
	b.prepare("j") // 2: aborted, a's prepared vote not rolled back
	b.vote("j", 2, "a", prepared(1, `["a-2"]`))
	b.vote("j", 2, "b", abortVote(1, "no"))
	b.prepare("j") // 3: aborted, a's prepared vote rolled back
	b.vote("j", 3, "a", prepared(1, `["a-3"]`))
	b.vote("j", 3, "b", abortVote(1, "no"))
	b.ack("j", 3, "a", 1)
	b.prepare("j") // 4: aborted, no prepared vote
	b.vote("j", 4, "a", abortVote(1, "no"))
	commit(true)  // 5: committed
	commit(false) // 6: committing (b never acks): the last committed
	time.Sleep(coordinator.MinRetention + 200*time.Millisecond)
	commit(true)   // 7: committed just now, not expired
	b.prepare("j") // 8: preparing
	var lastCommitted int64
	cps := map[int64]*coordinator.Checkpoint{}
	for id := int64(1); id <= 8; id++ {
		cp, err := b.store.GetCheckpoint(b.ctx, "j", id)
		if err != nil || cp == nil {
			t.Fatalf("checkpoint %d: %v, %v", id, cp, err)
		}
		cps[id] = cp
		if cp.Status == coordinator.StatusCommitting || cp.Status == coordinator.StatusCommitted {
			lastCommitted = id
		}
	}
	now := time.Now()
	want := map[int64]bool{}
	for id, cp := range cps {
		want[id] = coordinator.Deletable(cp, now, cfg.Retention, lastCommitted)
	}
	if fmt.Sprint(want) != fmt.Sprint(map[int64]bool{1: true, 2: false, 3: true, 4: true, 5: true, 6: false, 7: false, 8: false}) {
		t.Fatalf("Deletable over the history: %v", want) // the premise of the comparison below
	}
	if _, _, _, err := b.store.DeleteExpired(b.ctx, []string{"j"}, 100); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 8; id++ {
		cp, err := b.store.GetCheckpoint(b.ctx, "j", id)
		deleted := errors.Is(err, coordinator.ErrGone)
		if !deleted && (err != nil || cp == nil) {
			t.Fatalf("checkpoint %d after the deletion: %v, %v", id, cp, err)
		}
		if deleted != want[id] {
			t.Errorf("checkpoint %d (%s): deleted %v, but Deletable says %v", id, cps[id].Status, deleted, want[id])
		}
	}
}
