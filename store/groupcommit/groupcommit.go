// Package groupcommit queues a store's updates so that one writer can run many of them in
// one database transaction and answer each only after that transaction committed: the
// queueing half of group commit, shared by the stores. Running a batch is the store's.
package groupcommit

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/twophase/coordinator/coordinator"
)

// ErrClosed is the cause of the unavailability a closed queue answers with.
var ErrClosed = errors.New("store closed")

// Op is one queued update: fn to run on Job's state within a batch.
type Op struct {
	Ctx context.Context
	Job string
	// Checkpoint is the checkpoint Fn is about, 0 if none in particular (Store.Update).
	Checkpoint int64
	Fn         func(coordinator.JobTx) error
	err        error
	done       chan struct{}
	state      atomic.Int32 // queued, taken (by a batch) or abandoned (by Submit)
}

const (
	queued int32 = iota
	taken
	abandoned
)

// Finish answers the update; the store calls it once, after the batch committed (or
// failed for good).
func (o *Op) Finish(err error) {
	o.err = err
	close(o.done)
}

// Queue holds updates for one writer.
type Queue struct {
	ops    chan *Op
	stop   <-chan struct{}
	exited chan struct{} // closed when Next has answered false: nobody takes updates any more
}

// NewQueue returns a queue that refuses updates once stop is closed.
func NewQueue(stop <-chan struct{}) *Queue {
	return &Queue{ops: make(chan *Op, 1024), stop: stop, exited: make(chan struct{})}
}

// Submit queues an update and waits for its answer. If ctx ends first it returns ctx's
// error: before a batch took the update, it is never run; after, it may have been applied,
// as when a client hangs up after sending, and Submit waits for the batch so that Fn never
// runs after Submit returned.
func (q *Queue) Submit(ctx context.Context, job string, checkpoint int64, fn func(coordinator.JobTx) error) error {
	o := &Op{Ctx: ctx, Job: job, Checkpoint: checkpoint, Fn: fn, done: make(chan struct{})}
	select {
	case <-q.stop:
		return coordinator.Unavailable(ErrClosed)
	default:
	}
	select {
	case q.ops <- o:
	case <-ctx.Done():
		return ctx.Err()
	case <-q.stop:
		return coordinator.Unavailable(ErrClosed)
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		if o.state.CompareAndSwap(queued, abandoned) {
			return ctx.Err() // no batch will run it
		}
		// A batch runs it now; Fn must not outlive this call, so wait for the batch
		// (bounded by the store's batch timeout). The outcome is unknown to the caller,
		// as when a client hangs up after sending.
		<-o.done
		return ctx.Err()
	case <-q.exited:
		// Queued after the writer's last look: it will never run.
		select {
		case <-o.done:
			return o.err
		default:
			return coordinator.Unavailable(ErrClosed)
		}
	}
}

// Next waits for the next batch: the first queued update and whatever else is queued
// already, up to max, less those whose context ended (answered with its error). It
// returns false once the queue is stopped, after answering what was left in it.
func (q *Queue) Next(max int) ([]*Op, bool) {
	for {
		var first *Op
		select {
		case <-q.stop:
		default:
			select {
			case first = <-q.ops:
			case <-q.stop:
			}
		}
		if first == nil {
			q.Drain()
			return nil, false
		}
		batch := []*Op{first}
	fill:
		for len(batch) < max {
			select {
			case o := <-q.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		live := batch[:0]
		for _, o := range batch {
			if !o.state.CompareAndSwap(queued, taken) {
				continue // abandoned by Submit, which has answered
			}
			if err := o.Ctx.Err(); err != nil {
				o.Finish(err)
				continue
			}
			live = append(live, o)
		}
		if len(live) > 0 {
			return live, true
		}
	}
}

// Arrivals is the channel of queued updates, for a dispatcher that waits on more than the
// queue (Next is for a writer that waits on the queue alone). An update received from it
// must be claimed (Claim) before it runs.
func (q *Queue) Arrivals() <-chan *Op { return q.ops }

// Claim takes an update received from Arrivals for a batch. It returns false, and the
// update must be dropped, if its caller abandoned it (and was answered) or its context
// has ended (and it is answered here with that error).
func (q *Queue) Claim(o *Op) bool {
	if !o.state.CompareAndSwap(queued, taken) {
		return false
	}
	if err := o.Ctx.Err(); err != nil {
		o.Finish(err)
		return false
	}
	return true
}

// Drain, once stop is closed, answers every update still queued as unavailable and marks
// the queue exited: what is submitted after is answered unavailable too. A dispatcher
// calls it once, when it stops taking updates.
func (q *Queue) Drain() {
	for {
		select {
		case o := <-q.ops:
			o.Finish(coordinator.Unavailable(ErrClosed))
		default:
			close(q.exited)
			return
		}
	}
}
