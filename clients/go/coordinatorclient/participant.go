package coordinatorclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Participant is the user's half of two-phase commit for one participant of a job: the
// roles of Flink's TwoPhaseCommitSinkFunction / Sink V2 committer. C is the type of its
// committables (transaction ids, temp file names, read positions), sent to the coordinator
// as JSON and handed back, decoded, after any crash.
//
// The Runner calls one method at a time, never concurrently.
type Participant[C any] interface {
	// Prepare is phase one for the checkpoint: make every pending write durable (PREPARE
	// TRANSACTION, fsync a temp file, ...) and return the committables that let Commit or
	// Abort finish the work later, possibly in another process. A nil or empty slice is a
	// valid prepared vote. An error votes abort, with the error's text as the reason; the
	// participant then owns the rollback of whatever it had half prepared. ctx is
	// cancelled, with cause ErrDecidedMeanwhile, if the checkpoint is decided (aborted by a
	// deadline or by another participant) while Prepare runs.
	Prepare(ctx context.Context, checkpoint int64) ([]C, error)
	// Commit is phase two: make the prepared writes visible. It must be idempotent: it is
	// called again with the same committables after a crash, including one that happened
	// after it succeeded but before the coordinator heard of it. Errors are retried with
	// backoff until it succeeds, unless wrapped with Permanent.
	Commit(ctx context.Context, checkpoint int64, committables []C) error
	// Abort rolls the prepared writes back. Idempotent like Commit, and retried the same
	// way; committables may name work that is already gone.
	Abort(ctx context.Context, checkpoint int64, committables []C) error
}

// Recoverer is implemented by a Participant that must reconcile state of its own with
// the coordinator when it starts, such as prepared transactions or temp files left by a
// process that died between preparing and voting (which no pending item names, since its
// vote was never recorded). Recover is called once per Run, after registration and before
// any item is processed; pending is what the participant owes. An error is retried with
// backoff like one of Commit; a Permanent one stops Run.
type Recoverer[C any] interface {
	Recover(ctx context.Context, epoch int64, pending []Item[C]) error
}

// Item is one thing a participant owes, with its committables decoded.
type Item[C any] struct {
	Checkpoint   int64
	Status       CheckpointStatus
	Action       PendingAction
	Committables []C
}

// ErrDecidedMeanwhile is the cause of Prepare's context cancellation when the checkpoint
// is decided while Prepare runs.
var ErrDecidedMeanwhile = errors.New("checkpoint decided while preparing")

// RunnerOptions configures a Runner. The zero value is usable.
type RunnerOptions struct {
	// PollInterval is how long the runner waits before it asks again when a long-poll for a
	// decision failed (the coordinator unreachable, say). 0 means 100ms.
	PollInterval time.Duration
	// LongPoll is how long one long-poll on pending may wait while nothing is owed: that
	// is how the runner learns of new checkpoints and of the decisions on those it voted
	// on, and it costs one request per LongPoll while idle. 0 means a minute, the most the
	// coordinator waits.
	LongPoll time.Duration
	// MinBackoff and MaxBackoff bound the backoff between retries of a failing Commit or
	// Abort. 0 means 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives what the runner does. nil means no logging.
	Logger *slog.Logger
}

// Runner drives one Participant through the protocol: it registers (a new epoch, which
// fences every older instance), recovers everything the coordinator says is owed,
// prepares and votes on each new checkpoint, waits for decisions by long-poll, commits in
// checkpoint order and acknowledges, and rolls back aborted checkpoints it had prepared.
//
// A Runner is one instance of the participant: Run it once. For another epoch, make
// another Runner.
type Runner[C any] struct {
	coord       *Coordinator
	job, name   string
	participant Participant[C]
	opts        RunnerOptions
	log         *slog.Logger
	epoch       atomic.Int64
	started     atomic.Bool

	// inDoubt holds the checkpoints this instance voted prepared on and has not seen
	// decided; owned by Run's goroutine.
	inDoubt map[int64]bool
}

// NewRunner returns a Runner of participant name of job.
func NewRunner[C any](coord *Coordinator, job, name string, participant Participant[C], opts RunnerOptions) *Runner[C] {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 100 * time.Millisecond
	}
	if opts.LongPoll <= 0 {
		opts.LongPoll = time.Minute
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runner[C]{
		coord: coord, job: job, name: name, participant: participant, opts: opts,
		log:     opts.Logger.With("job", job, "participant", name),
		inDoubt: map[int64]bool{},
	}
}

// Epoch is the epoch this instance registered with, 0 before registration.
func (r *Runner[C]) Epoch() int64 { return r.epoch.Load() }

// Run registers and serves the protocol until ctx ends (it returns ctx's cause) or
// something fatal happens: ErrFenced (a newer instance registered: this one must stop
// writing), ErrVoteConflict, a Permanent error of Commit, Abort or Recover, or a
// refusal of the coordinator that retrying cannot change (ErrNotFound, ...). Transient
// failures of the coordinator are retried inside, for as long as ctx lasts.
func (r *Runner[C]) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("coordinatorclient: Runner.Run called twice; make a new Runner per instance")
	}
	reg, err := r.coord.Register(ctx, r.job, r.name)
	if err != nil {
		return err
	}
	r.epoch.Store(reg.Epoch)
	r.log = r.log.With("epoch", reg.Epoch)
	r.log.Info("registered", "owed", len(reg.Pending))
	items, err := r.decode(reg.Pending)
	if err != nil {
		return err
	}
	if rec, ok := r.participant.(Recoverer[C]); ok {
		if err := r.retryParticipant(ctx, 0, "recover", func() error { return rec.Recover(ctx, reg.Epoch, items) }); err != nil {
			return err
		}
	}
	for first := true; ; first = false {
		blocked, err := r.serve(ctx, items, first)
		if err != nil {
			return err
		}
		// What is owed next comes by one long-poll on pending: a new checkpoint to vote on,
		// or the decision on one this instance voted on (its commit or abort becomes owed).
		// Only a commit held back behind a lower undecided checkpoint needs that lower one's
		// decision first: pending would answer at once with the same commit again.
		wait := r.opts.LongPoll
		if blocked {
			if err := r.waitLowest(ctx); err != nil {
				return err
			}
			wait = 0
		}
		pending, err := r.coord.PendingFor(ctx, r.job, r.name, reg.Epoch, wait)
		if err != nil {
			return err
		}
		if pending.Epoch != reg.Epoch {
			return fmt.Errorf("%s/%s epoch %d, current %d: %w", r.job, r.name, reg.Epoch, pending.Epoch, ErrFenced)
		}
		if items, err = r.decode(pending.Items); err != nil {
			return err
		}
	}
}

// serve works through owed items, oldest first. Vote items in the registration's list
// (first) belong to transactions that died with the previous instance: they are voted
// abort. The coordinator aborts those at registration already, so normally there are none.
// It reports blocked when it left a commit owed because a lower checkpoint is in doubt.
func (r *Runner[C]) serve(ctx context.Context, items []Item[C], first bool) (blocked bool, err error) {
	slices.SortStableFunc(items, func(a, b Item[C]) int { return cmpInt64(a.Checkpoint, b.Checkpoint) })
	for _, it := range items {
		switch it.Action {
		case PendingActionCommit:
			if low, ok := r.lowestInDoubt(); ok && low < it.Checkpoint {
				// A lower checkpoint is undecided: commits keep checkpoint order.
				return true, nil
			}
			if err := r.finish(ctx, it.Checkpoint, true, it.Committables); err != nil {
				return false, err
			}
		case PendingActionAbort:
			if err := r.finish(ctx, it.Checkpoint, false, it.Committables); err != nil {
				return false, err
			}
		case PendingActionVote:
			if first {
				if err := r.voteAbort(ctx, it.Checkpoint, "participant restarted: its transaction died with the previous instance"); err != nil {
					return false, err
				}
				continue
			}
			if err := r.prepareAndVote(ctx, it.Checkpoint); err != nil {
				return false, err
			}
		default:
			r.log.Warn("unknown pending action, ignored", "checkpoint", it.Checkpoint, "action", it.Action)
		}
	}
	return false, nil
}

// waitLowest blocks until the lowest checkpoint in doubt is decided, or one long-poll
// ends: a commit above it waits for its decision (commits keep checkpoint order).
func (r *Runner[C]) waitLowest(ctx context.Context) error {
	low, ok := r.lowestInDoubt()
	if !ok {
		return nil
	}
	_, err := r.coord.decision(ctx, r.job, low, r.name, r.opts.LongPoll)
	if errors.Is(err, ErrNotFound) {
		delete(r.inDoubt, low) // the job was deleted and created again: nothing owed
		return nil
	}
	// Decided, or still undecided after the long poll: either way the caller looks at
	// what is owed before waiting again.
	return err
}

// votedPrepared reports whether cp records this instance's prepared vote.
func (r *Runner[C]) votedPrepared(cp *Checkpoint) bool {
	if cp == nil {
		return false
	}
	for _, p := range cp.Participants {
		if p.Name == r.name {
			return p.Vote != nil && *p.Vote == VoteKindPrepared && p.Epoch != nil && *p.Epoch == r.Epoch()
		}
	}
	return false
}

func (r *Runner[C]) lowestInDoubt() (int64, bool) {
	if len(r.inDoubt) == 0 {
		return 0, false
	}
	low := int64(-1)
	for id := range r.inDoubt {
		if low < 0 || id < low {
			low = id
		}
	}
	return low, true
}

// prepareAndVote runs phase one for checkpoint id and votes. If the vote makes the
// checkpoint committing, phase two follows at once.
func (r *Runner[C]) prepareAndVote(ctx context.Context, id int64) error {
	pctx, stop := r.watchDecision(ctx, id)
	committables, perr := r.participant.Prepare(pctx, id)
	decidedMeanwhile := errors.Is(context.Cause(pctx), ErrDecidedMeanwhile)
	stop()
	if err := ctx.Err(); err != nil {
		if perr == nil {
			r.abortQuietly(id, committables) // never voted: nobody will ask for them
		}
		return context.Cause(ctx)
	}
	if perr != nil {
		if decidedMeanwhile {
			r.log.Info("prepare stopped: checkpoint decided meanwhile", "checkpoint", id, "error", perr)
			return nil
		}
		r.log.Info("prepare failed, voting abort", "checkpoint", id, "error", perr)
		return r.voteAbort(ctx, id, perr.Error())
	}
	if committables == nil {
		committables = []C{}
	}
	raw, err := json.Marshal(committables)
	if err != nil {
		r.abortQuietly(id, committables)
		return Permanent(fmt.Errorf("encode committables of %s/%d: %w", r.job, id, err))
	}
	msg := Committables(raw)
	// The vote waits for the decision, so that no request of its own is needed to learn
	// it; the coordinator ends the wait as soon as this participant owes anything else (a
	// checkpoint opened meanwhile, in a job that holds several preparing at once).
	status, err := r.coord.voteStatus(ctx, r.job, id, r.name, VoteRequest{Epoch: r.Epoch(), Vote: VoteKindPrepared, Committables: &msg}, r.opts.LongPoll)
	if errors.Is(err, ErrAlreadyDecided) {
		var apiErr *APIError
		if errors.As(err, &apiErr) && r.votedPrepared(apiErr.Checkpoint()) {
			// An earlier attempt was recorded before the decision; the decision will be
			// owed to us like any other.
			r.inDoubt[id] = true
			return nil
		}
		// Our vote was not recorded (a deadline passed, someone voted abort): the
		// checkpoint can never commit with these committables, and no pending item will
		// name them. Roll back here.
		r.log.Info("vote refused, checkpoint already decided: rolling back", "checkpoint", id)
		return r.retryParticipant(ctx, id, "abort", func() error { return r.participant.Abort(ctx, id, committables) })
	}
	if err != nil {
		// Fenced, a vote conflict, a lost connection: an earlier attempt of this vote may
		// have been recorded, so the committables are left alone. If the checkpoint
		// commits with them they are owed to the next instance; if not, its Recoverer
		// finds them.
		return err
	}
	r.log.Debug("voted prepared", "checkpoint", id, "status", status)
	switch status {
	case Committing, Committed:
		if _, lower := r.lowestInDoubt(); !lower {
			// The last voter, or one whose vote waited, learns the decision from its
			// vote: commit now.
			return r.finish(ctx, id, true, committables)
		}
	case Aborted:
		// Decided while the vote waited (a deadline, another participant's abort): the
		// committables are owed a rollback.
		return r.finish(ctx, id, false, committables)
	}
	r.inDoubt[id] = true
	return nil
}

// watchDecision returns a context for Prepare that is cancelled, with cause
// ErrDecidedMeanwhile, as soon as checkpoint id is decided. stop ends the watch.
func (r *Runner[C]) watchDecision(ctx context.Context, id int64) (context.Context, func()) {
	pctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pctx.Err() == nil {
			cp, err := r.coord.decision(pctx, r.job, id, r.name, r.opts.LongPoll)
			if err != nil {
				if pctx.Err() == nil {
					// Not knowing is no reason to stop Prepare; try again a little later.
					_ = sleep(pctx, r.opts.PollInterval)
				}
				continue
			}
			if cp.Status != Preparing {
				cancel(ErrDecidedMeanwhile)
				return
			}
		}
	}()
	return pctx, func() {
		cancel(context.Canceled)
		<-done
	}
}

func (r *Runner[C]) voteAbort(ctx context.Context, id int64, reason string) error {
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	reason = toValidUTF8(reason)
	_, err := r.coord.Vote(ctx, r.job, id, r.name, VoteRequest{Epoch: r.Epoch(), Vote: VoteKindAbort, Reason: &reason})
	if err == nil || errors.Is(err, ErrAlreadyDecided) {
		return nil
	}
	return err
}

// finish applies a decision (commit or abort) to committables, then acks it.
func (r *Runner[C]) finish(ctx context.Context, id int64, commit bool, committables []C) error {
	what, apply := "abort", r.participant.Abort
	if commit {
		what, apply = "commit", r.participant.Commit
	}
	if err := r.retryParticipant(ctx, id, what, func() error { return apply(ctx, id, committables) }); err != nil {
		return err
	}
	_, err := r.coord.ack(ctx, r.job, id, r.name, r.Epoch(), false)
	if errors.Is(err, ErrNotFound) {
		r.log.Warn("ack: checkpoint gone", "checkpoint", id)
		err = nil
	}
	if err != nil {
		return err
	}
	delete(r.inDoubt, id)
	r.log.Debug("applied and acked", "checkpoint", id, "decision", what)
	return nil
}

// retryParticipant calls fn until it succeeds, returns a Permanent error, or ctx ends.
func (r *Runner[C]) retryParticipant(ctx context.Context, id int64, what string, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if isPermanent(err) {
			return fmt.Errorf("%s %s/%d: %w", what, r.job, id, err)
		}
		delay := jitteredBackoff(r.opts.MinBackoff, r.opts.MaxBackoff, attempt)
		r.log.Warn("participant call failed, retrying", "checkpoint", id, "call", what, "attempt", attempt, "delay", delay, "error", err)
		if err := sleep(ctx, delay); err != nil {
			return context.Cause(ctx)
		}
	}
}

// abortQuietly rolls back committables that no vote recorded, on a best-effort basis: the
// runner is stopping anyway. A Recoverer is the place to clean up what this misses.
func (r *Runner[C]) abortQuietly(id int64, committables []C) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.participant.Abort(ctx, id, committables); err != nil {
		r.log.Warn("rollback of unrecorded committables failed", "checkpoint", id, "error", err)
	}
}

func (r *Runner[C]) decode(items []PendingItem) ([]Item[C], error) {
	out := make([]Item[C], 0, len(items))
	for _, it := range items {
		cs, err := DecodeCommittables[C](it.Committables)
		if err != nil {
			return nil, fmt.Errorf("%s/%s checkpoint %d: %w", r.job, r.name, it.Checkpoint, err)
		}
		out = append(out, Item[C]{Checkpoint: it.Checkpoint, Status: it.Status, Action: it.Action, Committables: cs})
	}
	return out, nil
}

// DecodeCommittables decodes committables as the coordinator returns them (a JSON array,
// or null/absent for none) into []C.
func DecodeCommittables[C any](raw Committables) ([]C, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var cs []C
	if err := json.Unmarshal(raw, &cs); err != nil {
		return nil, fmt.Errorf("decode committables %s: %w", truncate(string(raw), 200), err)
	}
	return cs, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// toValidUTF8 makes s acceptable as a reason: valid UTF-8 without NUL.
func toValidUTF8(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "?")
}
