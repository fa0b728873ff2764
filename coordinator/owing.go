package coordinator

import (
	"context"
	"errors"
	"runtime"
	"sync"
)

// owingReads shares the reads behind pending between the callers that want one of the same
// job at the same moment. One change to a job wakes every long-poll waiting on it (each
// participant of the job has one), and each would read the job by itself: one read of what
// anyone owes (Store.Owing with no participant, what a read for one participant costs
// anyway) serves them all.
//
// A caller joins only a read that has not been sent yet, so the read it gets began after it
// asked and sees every change made before: what a read of its own would have seen, or
// later. A read is sent once its first caller has let the goroutines woken with it run.
type owingReads struct {
	mu   sync.Mutex
	open map[string]*owingRead // per job, the read that callers may still join
}

// owingRead is one read of a job and what anyone owes in it, shared by its callers, which
// only read what it holds.
type owingRead struct {
	done chan struct{}
	view owingView
	err  error
	// gaveUp is set when the read failed after its first caller's context ended: whatever
	// the store made of that (a cancellation, a broken connection), it is no answer for
	// the others.
	gaveUp bool
}

// errReadUnfinished is a shared read's result while it runs, and after if it panicked.
var errReadUnfinished = errors.New("coordinator: the shared read did not finish")

func newOwingReads() *owingReads {
	return &owingReads{open: map[string]*owingRead{}}
}

// read returns job, the database's clock and the checkpoints in which anyone may owe
// something, read once the call began. The view is shared with the other callers.
func (r *owingReads) read(ctx context.Context, store Store, job string) (*owingView, error) {
	for {
		r.mu.Lock()
		rd, joined := r.open[job]
		if !joined {
			rd = &owingRead{done: make(chan struct{})}
			r.open[job] = rd
		}
		r.mu.Unlock()
		if !joined {
			// The waiters woken with this one are runnable now: let them join.
			runtime.Gosched()
			r.mu.Lock()
			delete(r.open, job)
			r.mu.Unlock()
			rd.run(ctx, store, job)
			return rd.answer()
		}
		select {
		case <-rd.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// A read that its first caller gave up on, or that never ended, is no answer for the
		// others: read again (its first caller took it out of open before sending it).
		if rd.gaveUp || rd.err == errReadUnfinished {
			continue
		}
		return rd.answer()
	}
}

// run reads the store for rd's callers.
func (rd *owingRead) run(ctx context.Context, store Store, job string) {
	defer close(rd.done) // even if the store panics: the others then read again
	rd.err = errReadUnfinished
	rd.view.job, rd.view.now, rd.view.owing, rd.err = store.Owing(ctx, job, "")
	rd.gaveUp = rd.err != nil && ctx.Err() != nil
}

// answer is what rd's callers get: its view, or its error.
func (rd *owingRead) answer() (*owingView, error) {
	if rd.err != nil {
		return nil, rd.err
	}
	return &rd.view, nil
}

// The one answer for waits: when a long-poll (pending with wait_ms, a checkpoint or a vote
// with wait_ms) has its answer, whichever process, store or parked request waits.

// PendingAnswers reports whether a wait on what a participant owes, by the instance that
// registered with epoch, has its answer in p: something is owed, or the participant's epoch
// is no longer epoch (it registered again, or, epoch 0, registered for the first time).
// With anyEpoch, a caller that does not know its epoch yet, only something owed answers.
func PendingAnswers(p *Pending, epoch int64, anyEpoch bool) bool {
	return len(p.Items) > 0 || !anyEpoch && p.Epoch != epoch
}

// CheckpointAnswers reports whether a wait on checkpoint cp's decision has its answer: it
// is decided (no longer preparing).
func CheckpointAnswers(cp *Checkpoint) bool { return cp.Status != StatusPreparing }
