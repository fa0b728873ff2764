// Package storetest is the conformance suite that every coordinator.Store implementation
// must pass, in the manner of River's driver test suite: each store package's tests call Run
// with a function that opens a fresh, empty, migrated store, and the same behaviour is then
// asserted against every engine.
//
// The suite tests three layers: the Store and JobTx contract itself (store.go's doc comments),
// the protocol of docs/protocol.md carried out by coordinator.Service on the real store, and
// the protocol's guarantees under concurrent requests on real connections. A property test then
// drives the Service with random sequences of requests on the store and on an in-memory
// reference store side by side, and compares every answer and the whole state.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// Run runs every store behaviour test against stores made by open (each call a fresh, empty,
// migrated store; the suite calls Close via t.Cleanup, so open must not).
func Run(t *testing.T, open func(t *testing.T) coordinator.Store) {
	o := opener(open)
	t.Run("Contract", func(t *testing.T) { t.Parallel(); runContract(t, o) })
	t.Run("Protocol", func(t *testing.T) { t.Parallel(); runProtocol(t, o) })
	t.Run("Concurrency", func(t *testing.T) { t.Parallel(); runConcurrency(t, o) })
	t.Run("Property", func(t *testing.T) { t.Parallel(); runProperty(t, o) })
}

type opener func(t *testing.T) coordinator.Store

// bundle is what a test needs: a fresh store, a Service on it and the test's context.
type bundle struct {
	t     *testing.T
	ctx   context.Context
	store coordinator.Store
	svc   *coordinator.Service
}

func (o opener) setup(t *testing.T) *bundle {
	t.Helper()
	st := o(t)
	if st == nil {
		t.Fatal("open returned a nil store")
	}
	t.Cleanup(st.Close)
	return &bundle{t: t, ctx: t.Context(), store: st, svc: coordinator.NewService(st, nil)}
}

// config is a valid job configuration: one minute timeout, one checkpoint at a time,
// auto-commit.
func config(participants ...string) coordinator.JobConfig {
	return coordinator.JobConfig{
		Participants:             participants,
		CheckpointTimeout:        time.Minute,
		MaxConcurrentCheckpoints: 1,
		AutoCommit:               true,
	}
}

func (b *bundle) putJob(name string, cfg coordinator.JobConfig) *coordinator.Job {
	b.t.Helper()
	job, _, err := b.store.PutJob(b.ctx, name, cfg, nil)
	if err != nil {
		b.t.Fatalf("PutJob(%s): %v", name, err)
	}
	return job
}

func (b *bundle) getJob(name string) *coordinator.Job {
	b.t.Helper()
	job, err := b.store.GetJob(b.ctx, name)
	if err != nil {
		b.t.Fatalf("GetJob(%s): %v", name, err)
	}
	return job
}

func (b *bundle) update(job string, fn func(tx coordinator.JobTx) error) {
	b.t.Helper()
	if err := b.store.Update(b.ctx, job, 0, fn); err != nil {
		b.t.Fatalf("Update(%s): %v", job, err)
	}
}

func (b *bundle) view(job string, fn func(tx coordinator.JobTx) error) {
	b.t.Helper()
	if err := b.store.View(b.ctx, job, fn); err != nil {
		b.t.Fatalf("View(%s): %v", job, err)
	}
}

// newCheckpoint builds the job's next checkpoint as Service.Prepare does: preparing, an
// hour to go, the job's participants without votes.
func newCheckpoint(tx coordinator.JobTx, job string) *coordinator.Checkpoint {
	j := tx.Job()
	now := tx.Now()
	cp := &coordinator.Checkpoint{
		Job:        job,
		ID:         j.Seq + 1,
		Status:     coordinator.StatusPreparing,
		CreatedAt:  now,
		Deadline:   now.Add(time.Hour),
		AutoCommit: j.Config.AutoCommit,
	}
	for _, p := range j.Config.Participants {
		cp.Participants = append(cp.Participants, coordinator.ParticipantState{Name: p})
	}
	return cp
}

// insert opens the job's next checkpoint directly through the store; edit, if not nil, may
// change it before it is inserted.
func (b *bundle) insert(job string, edit func(tx coordinator.JobTx, cp *coordinator.Checkpoint)) *coordinator.Checkpoint {
	b.t.Helper()
	var out *coordinator.Checkpoint
	b.update(job, func(tx coordinator.JobTx) error {
		cp := newCheckpoint(tx, job)
		if edit != nil {
			edit(tx, cp)
		}
		if err := insertCheckpoint(b.ctx, tx, cp, nil); err != nil {
			return err
		}
		out = cp
		return nil
	})
	return out
}

// checkpoint reads one checkpoint in a new read transaction.
func (b *bundle) checkpoint(job string, id int64) *coordinator.Checkpoint {
	b.t.Helper()
	var out *coordinator.Checkpoint
	b.view(job, func(tx coordinator.JobTx) (err error) {
		out, err = tx.Checkpoint(b.ctx, id)
		return err
	})
	return out
}

// decide saves a status as the rules would: DecidedAt on a decision, CompletedAt once final.
func (b *bundle) decide(job string, id int64, status coordinator.Status, reason string) {
	b.t.Helper()
	b.update(job, func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, id)
		if err != nil {
			return err
		}
		now := tx.Now()
		cp.Status = status
		if cp.DecidedAt == nil {
			cp.DecidedAt = &now
		}
		if status == coordinator.StatusCommitted || status == coordinator.StatusAborted {
			cp.CompletedAt = &now
		}
		cp.AbortReason = reason
		return saveStatus(b.ctx, tx, cp)
	})
}

// saveVote records a vote directly through the store.
func (b *bundle) saveVote(job string, id int64, participant string, kind coordinator.VoteKind, committables string) {
	b.t.Helper()
	b.update(job, func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, id)
		if err != nil {
			return err
		}
		p := cp.Participant(participant)
		if p == nil {
			return fmt.Errorf("%s is not a participant of checkpoint %d", participant, id)
		}
		now := tx.Now()
		p.Epoch, p.Vote, p.VotedAt = 1, kind, &now
		if committables != "" {
			p.Committables = json.RawMessage(committables)
		}
		return saveVote(b.ctx, tx, cp, p)
	})
}

// saveAck records an ack directly through the store.
func (b *bundle) saveAck(job string, id int64, participant string) {
	b.t.Helper()
	b.update(job, func(tx coordinator.JobTx) error {
		cp, err := tx.Checkpoint(b.ctx, id)
		if err != nil {
			return err
		}
		p := cp.Participant(participant)
		if p == nil {
			return fmt.Errorf("%s is not a participant of checkpoint %d", participant, id)
		}
		now := tx.Now()
		p.AckedAt = &now
		return saveAck(b.ctx, tx, cp, p)
	})
}

// Service shortcuts: each fails the test on an error.

func (b *bundle) register(job, participant string) int64 {
	b.t.Helper()
	p, err := b.svc.Register(b.ctx, job, participant)
	if err != nil {
		b.t.Fatalf("Register(%s, %s): %v", job, participant, err)
	}
	return p.Epoch
}

func (b *bundle) prepare(job string) *coordinator.Checkpoint {
	b.t.Helper()
	cp, _, err := b.svc.Prepare(b.ctx, job, coordinator.PrepareRequest{})
	if err != nil {
		b.t.Fatalf("Prepare(%s): %v", job, err)
	}
	return cp
}

func (b *bundle) vote(job string, id int64, participant string, v coordinator.Vote) *coordinator.Checkpoint {
	b.t.Helper()
	cp, err := b.svc.Vote(b.ctx, job, id, participant, v)
	if err != nil {
		b.t.Fatalf("Vote(%s, %d, %s, %+v): %v", job, id, participant, v, err)
	}
	return cp
}

func prepared(epoch int64, committables string) coordinator.Vote {
	v := coordinator.Vote{Epoch: epoch, Kind: coordinator.VotePrepared}
	if committables != "" {
		v.Committables = json.RawMessage(committables)
	}
	return v
}

func abortVote(epoch int64, reason string) coordinator.Vote {
	return coordinator.Vote{Epoch: epoch, Kind: coordinator.VoteAbort, Reason: reason}
}

func (b *bundle) ack(job string, id int64, participant string, epoch int64) *coordinator.Checkpoint {
	b.t.Helper()
	cp, err := b.svc.Ack(b.ctx, job, id, participant, epoch)
	if err != nil {
		b.t.Fatalf("Ack(%s, %d, %s, %d): %v", job, id, participant, epoch, err)
	}
	return cp
}

func (b *bundle) get(job string, id int64) *coordinator.Checkpoint {
	b.t.Helper()
	cp, err := b.svc.GetCheckpoint(b.ctx, job, id, 0)
	if err != nil {
		b.t.Fatalf("GetCheckpoint(%s, %d): %v", job, id, err)
	}
	return cp
}

// Assertions.

// wantErr fails unless errors.Is(err, target), and returns err as a *coordinator.Error when
// it is one.
func wantErr(t *testing.T, what string, err, target error) *coordinator.Error {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
	var e *coordinator.Error
	errors.As(err, &e)
	return e
}

// wantNotFound fails unless err is coordinator.ErrNotFound itself, as the Store contract
// says (Service compares it with ==).
func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if err != coordinator.ErrNotFound {
		t.Fatalf("%s: got error %v (%T), want coordinator.ErrNotFound itself, unwrapped", what, err, err)
	}
}

func wantStatus(t *testing.T, what string, cp *coordinator.Checkpoint, want coordinator.Status) {
	t.Helper()
	if cp == nil {
		t.Fatalf("%s: got no checkpoint, want one %s", what, want)
	}
	if cp.Status != want {
		t.Fatalf("%s: checkpoint %d is %s (abort reason %q), want %s", what, cp.ID, cp.Status, cp.AbortReason, want)
	}
}

// sameTime reports whether a and b are the same instant to the microsecond: stores may keep
// microseconds only, truncated or rounded.
func sameTime(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -time.Microsecond && d < time.Microsecond
}

func sameTimePtr(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return sameTime(*a, *b)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "nil"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func fmtIDPtr(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// diffCheckpoint lists every field in which got differs from want.
func diffCheckpoint(want, got *coordinator.Checkpoint) []string {
	var d []string
	add := func(format string, args ...any) { d = append(d, fmt.Sprintf(format, args...)) }
	if got == nil {
		return []string{"checkpoint is nil"}
	}
	if got.Job != want.Job {
		add("Job %q, want %q", got.Job, want.Job)
	}
	if got.ID != want.ID {
		add("ID %d, want %d", got.ID, want.ID)
	}
	if got.Status != want.Status {
		add("Status %s, want %s", got.Status, want.Status)
	}
	if !sameTime(got.CreatedAt, want.CreatedAt) {
		add("CreatedAt %s, want %s", got.CreatedAt.UTC().Format(time.RFC3339Nano), want.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	if !sameTime(got.Deadline, want.Deadline) {
		add("Deadline %s, want %s", got.Deadline.UTC().Format(time.RFC3339Nano), want.Deadline.UTC().Format(time.RFC3339Nano))
	}
	if !sameTimePtr(got.DecidedAt, want.DecidedAt) {
		add("DecidedAt %s, want %s", fmtTimePtr(got.DecidedAt), fmtTimePtr(want.DecidedAt))
	}
	if !sameTimePtr(got.CompletedAt, want.CompletedAt) {
		add("CompletedAt %s, want %s", fmtTimePtr(got.CompletedAt), fmtTimePtr(want.CompletedAt))
	}
	if got.AbortReason != want.AbortReason {
		add("AbortReason %q, want %q", got.AbortReason, want.AbortReason)
	}
	if got.DecisionCause != want.DecisionCause {
		add("DecisionCause %q, want %q", got.DecisionCause, want.DecisionCause)
	}
	if got.DecidedBy != want.DecidedBy {
		add("DecidedBy %q, want %q", got.DecidedBy, want.DecidedBy)
	}
	if got.AutoCommit != want.AutoCommit {
		add("AutoCommit %v, want %v", got.AutoCommit, want.AutoCommit)
	}
	if want.Seq != 0 && got.Seq != want.Seq {
		add("Seq %d, want %d", got.Seq, want.Seq)
	}
	if len(got.Participants) != len(want.Participants) {
		add("%d participants %v, want %d %v", len(got.Participants), names(got), len(want.Participants), names(want))
		return d
	}
	for i, w := range want.Participants {
		g := got.Participants[i]
		if g.Name != w.Name {
			add("participant %d is %q, want %q (the job's order)", i, g.Name, w.Name)
			continue
		}
		if g.Epoch != w.Epoch {
			add("%s: Epoch %d, want %d", w.Name, g.Epoch, w.Epoch)
		}
		if g.Vote != w.Vote {
			add("%s: Vote %q, want %q", w.Name, g.Vote, w.Vote)
		}
		if g.Reason != w.Reason {
			add("%s: Reason %q, want %q", w.Name, g.Reason, w.Reason)
		}
		if !bytes.Equal(g.Committables, w.Committables) {
			add("%s: Committables %s, want %s (byte for byte)", w.Name, g.Committables, w.Committables)
		}
		if !sameTimePtr(g.VotedAt, w.VotedAt) {
			add("%s: VotedAt %s, want %s", w.Name, fmtTimePtr(g.VotedAt), fmtTimePtr(w.VotedAt))
		}
		if g.AckedBy != w.AckedBy {
			add("%s: AckedBy %q, want %q", w.Name, g.AckedBy, w.AckedBy)
		}
		if !sameTimePtr(g.AckedAt, w.AckedAt) {
			add("%s: AckedAt %s, want %s", w.Name, fmtTimePtr(g.AckedAt), fmtTimePtr(w.AckedAt))
		}
	}
	return d
}

func wantCheckpoint(t *testing.T, what string, want, got *coordinator.Checkpoint) {
	t.Helper()
	if d := diffCheckpoint(want, got); len(d) > 0 {
		t.Fatalf("%s: checkpoint differs:\n  %s", what, strings.Join(d, "\n  "))
	}
}

func names(cp *coordinator.Checkpoint) []string {
	var out []string
	for _, p := range cp.Participants {
		out = append(out, p.Name)
	}
	return out
}

// ids lists checkpoints as "job/id", to compare lists in one line.
func ids(cps []*coordinator.Checkpoint) []string {
	out := []string{}
	for _, cp := range cps {
		out = append(out, fmt.Sprintf("%s/%d", cp.Job, cp.ID))
	}
	return out
}

func wantIDs(t *testing.T, what string, cps []*coordinator.Checkpoint, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := ids(cps); !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func jobNames(jobs []*coordinator.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.Name)
	}
	return out
}

// waitClosed reports whether ch is closed within d.
func waitClosed(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// The writes of one kind each, as the rules would decide them, so that the contract tests
// can check a store's JobTx.Apply one change at a time.

func insertCheckpoint(ctx context.Context, tx coordinator.JobTx, cp *coordinator.Checkpoint, rec *coordinator.IdempotencyRecord) error {
	return tx.Apply(ctx, &coordinator.Mutation{Opened: cp, Idempotency: rec})
}

func saveVote(ctx context.Context, tx coordinator.JobTx, cp *coordinator.Checkpoint, p *coordinator.ParticipantState) error {
	return tx.Apply(ctx, &coordinator.Mutation{Votes: []coordinator.ParticipantChange{{Checkpoint: cp.ID, Participant: *p}}})
}

func saveAck(ctx context.Context, tx coordinator.JobTx, cp *coordinator.Checkpoint, p *coordinator.ParticipantState) error {
	return tx.Apply(ctx, &coordinator.Mutation{Acks: []coordinator.ParticipantChange{{Checkpoint: cp.ID, Participant: *p}}})
}

func saveStatus(ctx context.Context, tx coordinator.JobTx, cp *coordinator.Checkpoint) error {
	return tx.Apply(ctx, &coordinator.Mutation{Statuses: []*coordinator.Checkpoint{cp.Clone()}})
}

func setEpoch(ctx context.Context, tx coordinator.JobTx, participant string, epoch int64) error {
	return tx.Apply(ctx, &coordinator.Mutation{Epochs: []coordinator.EpochChange{{Participant: participant, Epoch: epoch}}})
}

func deleteJob(ctx context.Context, tx coordinator.JobTx) error {
	return tx.Apply(ctx, &coordinator.Mutation{JobDeleted: true})
}
