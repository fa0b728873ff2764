package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

func testCheckpointNotFound(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.putJob("other", config("a"))
	b.insert("other", nil)
	b.view("j", func(tx coordinator.JobTx) error {
		_, err := tx.Checkpoint(b.ctx, 1)
		wantNotFound(t, "Checkpoint(1) of a job without checkpoints (another job has one)", err)
		return nil
	})
	b.update("j", func(tx coordinator.JobTx) error {
		_, err := tx.Checkpoint(b.ctx, 99)
		wantNotFound(t, "Checkpoint(99) in Update", err)
		return nil
	})
}

func testCheckpointInsertRoundTrip(t *testing.T, b *bundle) {
	b.putJob("j", config("zeta", "alpha", "mid"))
	var cp *coordinator.Checkpoint
	b.update("j", func(tx coordinator.JobTx) error {
		cp = newCheckpoint(tx, "j")
		cp.CreatedAt = tx.Now().Add(-123456789 * time.Nanosecond)
		cp.Deadline = tx.Now().Add(90*time.Second + 987654321*time.Nanosecond)
		cp.AutoCommit = false // differs from the job's: the checkpoint's own is stored
		return insertCheckpoint(b.ctx, tx, cp, nil)
	})
	// Seq is assigned by the time the update committed.
	if cp.Seq <= 0 {
		t.Fatalf("InsertCheckpoint assigned Seq %d once committed, want > 0", cp.Seq)
	}
	want := cp.Clone()
	got := b.checkpoint("j", 1)
	wantCheckpoint(t, "Checkpoint(1) after InsertCheckpoint", want, got)
	if got.Seq != want.Seq {
		t.Fatalf("Seq read back %d, InsertCheckpoint assigned %d", got.Seq, want.Seq)
	}
	if job := b.getJob("j"); job.Seq != 1 {
		t.Fatalf("job Seq after inserting checkpoint 1: %d, want 1", job.Seq)
	}
}

func testCheckpointDecisionRoundTrip(t *testing.T, b *bundle) {
	b.putJob("j", config("zeta", "alpha", "mid"))
	b.insert("j", nil)
	var want *coordinator.Checkpoint
	b.update("j", func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 1)
		if err != nil {
			return err
		}
		now := tx.Now()
		t1, t2, t3 := now.Add(1234567*time.Nanosecond), now.Add(2345678*time.Nanosecond), now.Add(3456789*time.Nanosecond)
		z := cp.Participant("zeta")
		z.Epoch, z.Vote, z.VotedAt, z.Committables = 3, coordinator.VotePrepared, &t1, json.RawMessage(`[{"txn":"z-1"},"ü"]`)
		a := cp.Participant("alpha")
		a.Epoch, a.Vote, a.VotedAt, a.Reason = 2, coordinator.VoteAbort, &t2, "disk full: é"
		for _, p := range []*coordinator.ParticipantState{z, a} {
			if err := saveVote(b.ctx, tx, cp, p); err != nil {
				return err
			}
		}
		cp.Status, cp.DecidedAt, cp.CompletedAt, cp.AbortReason = coordinator.StatusAborted, &t2, &t2, "participant alpha voted abort: disk full: é"
		cp.DecidedBy, cp.DecisionCause = "sink-alpha-token", coordinator.CauseAbortVote
		if err := saveStatus(b.ctx, tx, cp); err != nil {
			return err
		}
		z.AckedAt, z.AckedBy = &t3, "zeta"
		if err := saveAck(b.ctx, tx, cp, z); err != nil {
			return err
		}
		want = cp.Clone()
		return nil
	})
	wantCheckpoint(t, "aborted checkpoint read back in a new transaction", want, b.checkpoint("j", 1))

	// A commit: committing with DecidedAt and no CompletedAt, then committed.
	b.insert("j", nil)
	b.update("j", func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 2)
		if err != nil {
			return err
		}
		now := tx.Now()
		for i := range cp.Participants {
			p := &cp.Participants[i]
			p.Epoch, p.Vote, p.VotedAt, p.Committables = 1, coordinator.VotePrepared, &now, json.RawMessage(`[]`)
			if err := saveVote(b.ctx, tx, cp, p); err != nil {
				return err
			}
		}
		cp.Status, cp.DecidedAt = coordinator.StatusCommitting, &now
		if err := saveStatus(b.ctx, tx, cp); err != nil {
			return err
		}
		want = cp.Clone()
		return nil
	})
	wantCheckpoint(t, "committing checkpoint read back", want, b.checkpoint("j", 2))
	b.update("j", func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 2)
		if err != nil {
			return err
		}
		now := tx.Now()
		for i := range cp.Participants {
			cp.Participants[i].AckedAt = &now
			if err := saveAck(b.ctx, tx, cp, &cp.Participants[i]); err != nil {
				return err
			}
		}
		cp.Status, cp.CompletedAt = coordinator.StatusCommitted, &now
		if err := saveStatus(b.ctx, tx, cp); err != nil {
			return err
		}
		want = cp.Clone()
		return nil
	})
	wantCheckpoint(t, "committed checkpoint read back", want, b.checkpoint("j", 2))
}

func testCommittablesByteForByte(t *testing.T, b *bundle) {
	samples := []string{
		`[{"b":1,"a":[1.0,2e3,"\u00e9"]},null,"x"]`,
		`[]`,
		`[{"z":{"y":{"x":[true,false,null]}},"a":-0.0,"m":1E+2,"n":123456789012345678901234567890}]`,
		`["é","\ud83d\ude00","😀","\"quoted\"","tab\tand\\backslash","\u0041"]`,
		`[{"dup":1,"dup":2}]`,
		`[{"txn":"orders-41","offsets":{"p0":1,"p1":22,"p10":333}},{"file":"/out/.part-7"}]`,
	}
	b.putJob("j", config("p"))
	for i, sample := range samples {
		compact, err := coordinator.CompactJSON([]byte(sample))
		if err != nil {
			t.Fatalf("sample %d is not JSON: %v", i, err)
		}
		cp := b.insert("j", nil)
		b.saveVote("j", cp.ID, "p", coordinator.VotePrepared, string(compact))
		got := b.checkpoint("j", cp.ID).Participant("p").Committables
		if string(got) != string(compact) {
			t.Errorf("committables %s came back as %s, want them byte for byte", compact, got)
		}
		// Preparing and Owing return them the same way.
		b.view("j", func(tx coordinator.JobTx) error {
			owing, err := tx.Owing(b.ctx, "p")
			if err != nil {
				return err
			}
			for _, o := range owing {
				if o.ID == cp.ID && string(o.Participant("p").Committables) != string(compact) {
					t.Errorf("Owing: committables %s came back as %s", compact, o.Participant("p").Committables)
				}
			}
			return nil
		})
		b.decide("j", cp.ID, coordinator.StatusAborted, "next")
	}
	// A larger payload, beyond what fits in one small buffer.
	big := make([]string, 2000)
	for i := range big {
		big[i] = fmt.Sprintf(`{"k%d":"%x"}`, i, i*7919)
	}
	payload := "[" + strings.Join(big, ",") + "]"
	cp := b.insert("j", nil)
	b.saveVote("j", cp.ID, "p", coordinator.VotePrepared, payload)
	if got := b.checkpoint("j", cp.ID).Participant("p").Committables; string(got) != payload {
		t.Errorf("a %d-byte committables payload came back as %d bytes, different", len(payload), len(got))
	}
}

func testCheckpointKeepsItsConfiguration(t *testing.T, b *bundle) {
	b.putJob("j", coordinator.JobConfig{Participants: []string{"a", "b"}, CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 2, AutoCommit: false})
	want := b.insert("j", nil)
	b.putJob("j", coordinator.JobConfig{Participants: []string{"c"}, CheckpointTimeout: time.Second, MaxConcurrentCheckpoints: 1, AutoCommit: true})
	wantCheckpoint(t, "checkpoint after PutJob changed the job", want, b.checkpoint("j", 1))
}

func testReadsAreCopies(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	b.update("j", func(tx coordinator.JobTx) error { return setEpoch(b.ctx, tx, "a", 1) })
	b.insert("j", nil)
	b.saveVote("j", 1, "a", coordinator.VotePrepared, `[1]`)
	want := b.checkpoint("j", 1)
	mess := func(cp *coordinator.Checkpoint) {
		cp.Status = coordinator.StatusCommitted
		cp.Participants[0].Vote = coordinator.VoteAbort
		cp.Participants[0].Committables[1] = '9'
		cp.Participants[1].Name = "x"
	}
	// A checkpoint read and changed in memory, without a Save, stays as stored, whether the
	// transaction commits or not.
	mess(b.checkpoint("j", 1))
	b.update("j", func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, 1)
		if err != nil {
			return err
		}
		mess(cp)
		ps, err := tx.Preparing(b.ctx)
		if err != nil {
			return err
		}
		mess(ps[0])
		return nil
	})
	wantCheckpoint(t, "checkpoint after callers changed their copies", want, b.checkpoint("j", 1))
	job := b.getJob("j")
	job.Epochs["a"] = 99
	job.Config.Participants[0] = "zz"
	if again := b.getJob("j"); again.Epochs["a"] != 1 || again.Config.Participants[0] != "a" {
		t.Fatalf("GetJob after a caller changed its copy: epochs %v, participants %v", again.Epochs, again.Config.Participants)
	}
}

func testPreparing(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	b.putJob("other", config("a"))
	b.insert("other", nil)
	for range 6 {
		b.insert("j", nil)
	}
	b.decide("j", 2, coordinator.StatusAborted, "x")
	b.decide("j", 4, coordinator.StatusCommitting, "")
	b.decide("j", 6, coordinator.StatusCommitted, "")
	b.saveVote("j", 3, "b", coordinator.VotePrepared, `[{"k":3}]`)
	b.update("j", func(tx coordinator.JobTx) error {
		ps, err := tx.Preparing(b.ctx)
		if err != nil {
			return err
		}
		wantIDs(t, "Preparing", ps, "j/1", "j/3", "j/5")
		// They are whole checkpoints: the rules decide on their votes and deadlines.
		for _, cp := range ps {
			want, err := tx.Checkpoint(b.ctx, cp.ID)
			if err != nil {
				return err
			}
			wantCheckpoint(t, fmt.Sprintf("Preparing's checkpoint %d", cp.ID), want, cp)
		}
		if v := ps[1].Participant("b"); v == nil || v.Vote != coordinator.VotePrepared || string(v.Committables) != `[{"k":3}]` {
			t.Errorf("Preparing's checkpoint 3 lacks b's vote: %+v", v)
		}
		return nil
	})
}

func testIdempotencyRoundTrip(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.putJob("other", config("a"))
	key := `retry-1 /x?=&"'`
	b.view("j", func(tx coordinator.JobTx) error {
		rec, ok, err := tx.Idempotency(b.ctx, key)
		if ok || err != nil {
			t.Errorf("Idempotency of an unknown key: %+v, %v, %v; want not ok, nil", rec, ok, err)
		}
		return nil
	})
	want := coordinator.IdempotencyRecord{Key: key, Fingerprint: "sha256:abc", Checkpoint: 1}
	b.update("j", func(tx coordinator.JobTx) error {
		return insertCheckpoint(b.ctx, tx, newCheckpoint(tx, "j"), &want)
	})
	b.insert("j", nil)
	b.view("j", func(tx coordinator.JobTx) error {
		rec, ok, err := tx.Idempotency(b.ctx, key)
		if !ok || err != nil || rec != want {
			t.Errorf("Idempotency(%q) = %+v, %v, %v; want %+v", key, rec, ok, err, want)
		}
		return nil
	})
	b.view("other", func(tx coordinator.JobTx) error {
		if rec, ok, err := tx.Idempotency(b.ctx, key); ok || err != nil {
			t.Errorf("another job's Idempotency(%q) = %+v, %v, %v; want unknown (keys belong to a job)", key, rec, ok, err)
		}
		return nil
	})
	// The same key may open a checkpoint of another job.
	b.update("other", func(tx coordinator.JobTx) error {
		return insertCheckpoint(b.ctx, tx, newCheckpoint(tx, "other"), &coordinator.IdempotencyRecord{Key: key, Fingerprint: "f2", Checkpoint: 1})
	})
	b.view("other", func(tx coordinator.JobTx) error {
		if rec, ok, err := tx.Idempotency(b.ctx, key); !ok || err != nil || rec.Fingerprint != "f2" {
			t.Errorf("other's Idempotency(%q) = %+v, %v, %v; want fingerprint f2", key, rec, ok, err)
		}
		return nil
	})
}

// testGetCheckpoint: the read outside a transaction tells a missing job (ErrNotFound) from a
// missing checkpoint (nil, nil) and returns the checkpoint as a transaction reads it.
func testGetCheckpoint(t *testing.T, b *bundle) {
	if cp, err := b.store.GetCheckpoint(b.ctx, "nope", 1); err != coordinator.ErrNotFound || cp != nil {
		t.Fatalf("GetCheckpoint on a missing job: %v, %v; want nil, ErrNotFound itself", cp, err)
	}
	b.putJob("j", config("a", "b"))
	if cp, err := b.store.GetCheckpoint(b.ctx, "j", 1); err != nil || cp != nil {
		t.Fatalf("GetCheckpoint of a missing checkpoint: %v, %v; want nil, nil", cp, err)
	}
	b.insert("j", nil)
	b.saveVote("j", 1, "a", coordinator.VotePrepared, `[{"z":1,"a":2}]`)
	var want *coordinator.Checkpoint
	b.view("j", func(tx coordinator.JobTx) (err error) {
		want, err = tx.Checkpoint(b.ctx, 1)
		return err
	})
	got, err := b.store.GetCheckpoint(b.ctx, "j", 1)
	if err != nil || got == nil {
		t.Fatalf("GetCheckpoint: %v, %v", got, err)
	}
	if got.ID != 1 || got.Status != want.Status || len(got.Participants) != 2 ||
		string(got.Participants[0].Committables) != `[{"z":1,"a":2}]` || got.Participants[0].Vote != coordinator.VotePrepared ||
		!got.Deadline.Equal(want.Deadline) || got.Seq != want.Seq {
		t.Fatalf("GetCheckpoint returned %+v, want %+v", got, want)
	}
}
