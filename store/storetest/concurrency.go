package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/twophase/coordinator/coordinator"
)

// runConcurrency sends requests at once, each on its own connection, and checks the rules
// that only a store that locks correctly keeps: one decision, no lost votes, no duplicate ids.
func runConcurrency(t *testing.T, o opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *bundle)
	}{
		{"SixteenVotersAtOnce", testSixteenVoters},
		{"ConcurrentPrepare", testConcurrentPrepare},
		{"ConcurrentPrepareSameIdempotencyKey", testConcurrentIdempotentPrepare},
		{"LastVoteRacesAbort", testLastVoteRacesAbort},
		{"ConcurrentRegister", testConcurrentRegister},
		{"AckRacesRegister", testAckRacesRegister},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, o.setup(t))
		})
	}
}

// race runs fn(0) .. fn(n-1) in goroutines released at the same moment and waits for all.
func race(n int, fn func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

func testSixteenVoters(t *testing.T, b *bundle) {
	const n = 16
	var participants []string
	for i := range n {
		participants = append(participants, fmt.Sprintf("p%02d", i))
	}
	b.job("j", config(participants...))
	b.prepare("j")
	committables := func(i int) string { return fmt.Sprintf(`[{"p":%q,"n":%d},"tail-%d"]`, participants[i], i, i) }
	answers := make([]*coordinator.Checkpoint, n)
	errs := make([]error, n)
	race(n, func(i int) {
		answers[i], errs[i] = b.svc.Vote(b.ctx, "j", 1, participants[i], prepared(1, committables(i)))
	})
	var deciders []string
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("%s's vote: %v", participants[i], errs[i])
		}
		switch answers[i].Status {
		case coordinator.StatusCommitting:
			deciders = append(deciders, participants[i])
		case coordinator.StatusPreparing:
		default:
			t.Fatalf("%s's vote answered %s", participants[i], answers[i].Status)
		}
	}
	if len(deciders) != 1 {
		t.Fatalf("%d votes answered committing (%v), want exactly one: the last vote decides, the others see preparing", len(deciders), deciders)
	}
	final := b.get("j", 1)
	wantStatus(t, "after 16 concurrent prepared votes", final, coordinator.StatusCommitting)
	for i, p := range participants {
		ps := final.Participant(p)
		if ps.Vote != coordinator.VotePrepared || ps.Epoch != 1 || string(ps.Committables) != committables(i) || ps.VotedAt == nil {
			t.Errorf("%s's vote was lost or changed: %+v, want prepared, epoch 1, %s", p, ps, committables(i))
		} else if final.DecidedAt.Before(*ps.VotedAt) {
			t.Errorf("%s voted at %v, after the decision at %v", p, *ps.VotedAt, *final.DecidedAt)
		}
	}
	for i := range n {
		if answers[i].Status == coordinator.StatusCommitting && !sameTimePtr(answers[i].DecidedAt, final.DecidedAt) {
			t.Fatalf("the deciding answer says decided_at %s, stored %s: decided twice?", fmtTimePtr(answers[i].DecidedAt), fmtTimePtr(final.DecidedAt))
		}
	}

	// The acks race too: exactly one of them completes the commit.
	race(n, func(i int) { answers[i], errs[i] = b.svc.Ack(b.ctx, "j", 1, participants[i], 1) })
	completed := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("%s's ack: %v", participants[i], errs[i])
		}
		if answers[i].Status == coordinator.StatusCommitted {
			completed++
		}
	}
	final = b.get("j", 1)
	wantStatus(t, "after 16 concurrent acks", final, coordinator.StatusCommitted)
	if completed != 1 {
		t.Fatalf("%d acks answered committed, want exactly one (the last)", completed)
	}
	for _, p := range final.Participants {
		if p.AckedAt == nil {
			t.Fatalf("%s's ack was lost", p.Name)
		}
	}
}

func testConcurrentPrepare(t *testing.T, b *bundle) {
	const n, rounds = 8, 5
	b.job("j", config("a"))
	for round := int64(1); round <= rounds; round++ {
		opened := make([]*coordinator.Checkpoint, n)
		errs := make([]error, n)
		race(n, func(i int) { opened[i], _, errs[i] = b.svc.Prepare(b.ctx, "j", coordinator.PrepareRequest{}) })
		var ok []int64
		for i := range n {
			switch {
			case errs[i] == nil:
				ok = append(ok, opened[i].ID)
			case !errors.Is(errs[i], coordinator.ErrTooManyCheckpoints):
				t.Fatalf("round %d: a concurrent Prepare failed with %v, want success or too_many_checkpoints", round, errs[i])
			}
		}
		if !slices.Equal(ok, []int64{round}) {
			t.Fatalf("round %d: %d of %d concurrent Prepare calls under max_concurrent_checkpoints 1 succeeded, with ids %v; want exactly one, id %d",
				round, len(ok), n, ok, round)
		}
		cps, err := b.store.ListCheckpoints(b.ctx, coordinator.CheckpointQuery{Job: "j", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(cps) != int(round) || cps[0].ID != round {
			t.Fatalf("round %d: the job has checkpoints %v, want ids %d down to 1", round, ids(cps), round)
		}
		if _, err := b.svc.Abort(b.ctx, "j", round, "next round"); err != nil {
			t.Fatal(err)
		}
	}
}

func testConcurrentIdempotentPrepare(t *testing.T, b *bundle) {
	const n = 8
	b.job("j", withMax(config("a"), n))
	opened := make([]*coordinator.Checkpoint, n)
	replayed := make([]bool, n)
	errs := make([]error, n)
	req := coordinator.PrepareRequest{IdempotencyKey: "same", Fingerprint: "f"}
	race(n, func(i int) { opened[i], replayed[i], errs[i] = b.svc.Prepare(b.ctx, "j", req) })
	firsts := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("a concurrent Prepare with the same key: %v", errs[i])
		}
		if opened[i].ID != 1 {
			t.Fatalf("a concurrent Prepare with the same key opened checkpoint %d, want 1 for all", opened[i].ID)
		}
		if !replayed[i] {
			firsts++
		}
	}
	if firsts != 1 {
		t.Fatalf("%d of %d concurrent Prepare calls with one key were not replays, want exactly one", firsts, n)
	}
	if job := b.getJob("j"); job.Seq != 1 {
		t.Fatalf("after concurrent Prepare calls with one key the job's Seq is %d, want 1", job.Seq)
	}
}

// testLastVoteRacesAbort races the vote that completes unanimity against an explicit abort:
// one of them decides, the other is told so, and what each was told is what is stored.
func testLastVoteRacesAbort(t *testing.T, b *bundle) {
	const rounds = 50
	b.job("j", config("a", "b"))
	outcomes := map[coordinator.Status]int{}
	for round := int64(1); round <= rounds; round++ {
		if cp := b.prepare("j"); cp.ID != round {
			t.Fatalf("round %d opened checkpoint %d", round, cp.ID)
		}
		b.vote("j", round, "a", prepared(1, `["a"]`))
		var (
			voteAnswer, abortAnswer *coordinator.Checkpoint
			voteErr, abortErr       error
		)
		race(2, func(i int) {
			if i == 0 {
				voteAnswer, voteErr = b.svc.Vote(b.ctx, "j", round, "b", prepared(1, `["b"]`))
			} else {
				abortAnswer, abortErr = b.svc.Abort(b.ctx, "j", round, "race")
			}
		})
		final := b.get("j", round)
		outcomes[final.Status]++
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("round %d: %s\n  vote answered %s, %v\n  abort answered %s, %v\n  stored: %s (%q), b's vote %q",
				round, fmt.Sprintf(format, args...), statusOf(voteAnswer), voteErr, statusOf(abortAnswer), abortErr,
				final.Status, final.AbortReason, final.Participant("b").Vote)
		}
		switch final.Status {
		case coordinator.StatusCommitting:
			if voteErr != nil || voteAnswer.Status != coordinator.StatusCommitting {
				fail("committed, but the deciding vote was not told committing")
			}
			if !errors.Is(abortErr, coordinator.ErrAlreadyDecided) {
				fail("committed, but the abort was not refused with already_decided")
			}
		case coordinator.StatusAborted:
			if abortErr != nil || abortAnswer.Status != coordinator.StatusAborted || final.AbortReason != "race" {
				fail("aborted, but not by the abort, or the abort was not told so")
			}
			switch {
			case errors.Is(voteErr, coordinator.ErrAlreadyDecided):
				if final.Participant("b").Vote != "" {
					fail("the vote was refused yet recorded")
				}
			case voteErr == nil && voteAnswer.Status == coordinator.StatusAborted:
			default:
				fail("aborted, but the vote was told neither already_decided nor aborted")
			}
		default:
			fail("neither committed nor aborted")
		}
	}
	t.Logf("%d rounds: %d committing, %d aborted", rounds, outcomes[coordinator.StatusCommitting], outcomes[coordinator.StatusAborted])
}

func statusOf(cp *coordinator.Checkpoint) string {
	if cp == nil {
		return "nothing"
	}
	return string(cp.Status)
}

func testConcurrentRegister(t *testing.T, b *bundle) {
	const n = 8
	b.job("j", config("a", "b"))
	b.prepare("j")
	epochs := make([]int64, n)
	errs := make([]error, n)
	race(n, func(i int) {
		var p *coordinator.Pending
		if p, errs[i] = b.svc.Register(b.ctx, "j", "a"); errs[i] == nil {
			epochs[i] = p.Epoch
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatalf("a concurrent Register: %v", err)
		}
	}
	slices.Sort(epochs)
	if want := []int64{2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(epochs, want) {
		t.Fatalf("concurrent registrations got epochs %v, want each of %v once", epochs, want)
	}
	if e := b.getJob("j").Epochs["a"]; e != n+1 {
		t.Fatalf("epoch after the registrations: %d, want %d", e, n+1)
	}
	wantStatus(t, "the checkpoint a had not voted on", b.get("j", 1), coordinator.StatusAborted)
}

// testAckRacesRegister races an ack from the participant's current epoch against its
// registration of a new one: the ack counts only if it came first, in which case the
// registration's pending list no longer holds the commit; if the registration came first,
// the ack is fenced (rule 5).
func testAckRacesRegister(t *testing.T, b *bundle) {
	const rounds = 30
	b.job("j", config("a", "b"))
	epoch := int64(1)
	for round := int64(1); round <= rounds; round++ {
		b.prepare("j")
		b.vote("j", round, "a", prepared(epoch, `["a"]`))
		wantStatus(t, "b's vote", b.vote("j", round, "b", prepared(1, `["b"]`)), coordinator.StatusCommitting)
		var (
			reg    *coordinator.Pending
			ackErr error
			regErr error
		)
		race(2, func(i int) {
			if i == 0 {
				_, ackErr = b.svc.Ack(b.ctx, "j", round, "a", epoch)
			} else {
				reg, regErr = b.svc.Register(b.ctx, "j", "a")
			}
		})
		if regErr != nil {
			t.Fatalf("round %d: Register: %v", round, regErr)
		}
		if reg.Epoch != epoch+1 {
			t.Fatalf("round %d: Register gave epoch %d, want %d", round, reg.Epoch, epoch+1)
		}
		owesCommit := slices.ContainsFunc(reg.Items, func(it coordinator.PendingItem) bool { return it.Checkpoint == round })
		acked := b.get("j", round).Participant("a").AckedAt != nil
		switch {
		case ackErr == nil && owesCommit:
			t.Fatalf("round %d: the ack from epoch %d was accepted although the registration of epoch %d, which came first (it still listed the commit as owed), fences it; stored acked=%v",
				round, epoch, reg.Epoch, acked)
		case ackErr == nil && !acked:
			t.Fatalf("round %d: the ack was answered 200 but not recorded", round)
		case ackErr != nil && !errors.Is(ackErr, coordinator.ErrFenced):
			t.Fatalf("round %d: the ack failed with %v, want success or fenced", round, ackErr)
		case ackErr != nil && (acked || !owesCommit):
			t.Fatalf("round %d: the ack was fenced, yet acked=%v and the registration listed the commit: %v", round, acked, owesCommit)
		}
		epoch = reg.Epoch
		if ackErr != nil {
			b.ack("j", round, "a", epoch)
		}
		wantStatus(t, "after both acks", b.ack("j", round, "b", 1), coordinator.StatusCommitted)
	}
}
