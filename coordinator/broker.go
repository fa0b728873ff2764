package coordinator

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// Broker wakes the waiters of checkpoints in this process. Stores use it to implement
// Subscribe: they call Publish after a decision of their own commits, NotifyKey for one
// announced by another process, and NotifyAll when they may have missed announcements.
type Broker struct {
	mu      sync.Mutex
	waiters map[string]map[*Subscription]struct{}
}

// Subscription is one waiter on a checkpoint's decision.
type Subscription struct {
	done   chan struct{}
	cp     *Checkpoint // set before done is closed, by Publish
	opened *Opened     // set before done is closed, by PublishOpened
	cancel func()
}

// Opened is what a store hands the waiters of a job's changes (AnyCheckpoint) when a
// transaction of this process whose only change to the job was to open checkpoints has
// committed: the job's Version before it (From) and after (To), the database's clock it
// opened them at, and the checkpoints as opened. A waiter that read the job at From knows
// the job at To without reading it. Receivers share it: they must not change it.
type Opened struct {
	From, To    int64
	Now         time.Time
	Checkpoints []*Checkpoint
}

// Opened, once Done is closed, returns what PublishOpened handed the waiter, nil when the
// wake-up came otherwise (then read).
func (s *Subscription) Opened() *Opened { return s.opened }

// Done is closed once the checkpoint may have been decided.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Decided, once Done is closed, returns the checkpoint as the transaction that decided it
// committed it, when this process took the decision; nil means read it (the wake-up came
// from another process, or may be spurious). The caller owns the copy.
func (s *Subscription) Decided() *Checkpoint {
	if s.cp == nil {
		return nil
	}
	return s.cp.Clone()
}

// Cancel stops waiting. It may be called more than once, also after Done.
func (s *Subscription) Cancel() { s.cancel() }

func brokerKey(job string, id int64) string { return job + "/" + strconv.FormatInt(id, 10) }

// AnyCheckpoint, as the id of Subscribe, subscribes to every change of the job that may
// concern its participants: a checkpoint opened or decided, a participant registered
// (NotifyJob, and every Publish or Notify of one of its checkpoints). It is what a
// participant's long-poll on pending waits for.
const AnyCheckpoint = 0

// Subscribe returns a subscription woken by the next Publish or Notify of the checkpoint
// (or NotifyAll).
func (b *Broker) Subscribe(job string, id int64) *Subscription {
	key := brokerKey(job, id)
	sub := &Subscription{done: make(chan struct{})}
	b.mu.Lock()
	if b.waiters == nil {
		b.waiters = make(map[string]map[*Subscription]struct{})
	}
	set := b.waiters[key]
	if set == nil {
		set = make(map[*Subscription]struct{})
		b.waiters[key] = set
	}
	set[sub] = struct{}{}
	b.mu.Unlock()
	sub.cancel = func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if set, ok := b.waiters[key]; ok {
			if _, ok := set[sub]; ok {
				delete(set, sub)
				if len(set) == 0 {
					delete(b.waiters, key)
				}
			}
		}
	}
	return sub
}

// Publish wakes every waiter of cp with cp as it was committed: a store calls it once the
// transaction that saved cp's decision has committed, and must not change cp after.
func (b *Broker) Publish(cp *Checkpoint) {
	b.wake(brokerKey(cp.Job, cp.ID), cp)
	b.wake(brokerKey(cp.Job, AnyCheckpoint), nil)
}

// PublishOpened wakes the waiters of every change of job (AnyCheckpoint), as NotifyJob does,
// handing them o: a store calls it, instead of NotifyJob, once the transaction that did
// nothing to the job but open o.Checkpoints has committed, and must not change o after.
func (b *Broker) PublishOpened(job string, o *Opened) {
	b.wakeWith(brokerKey(job, AnyCheckpoint), nil, o)
}

// Notify wakes every waiter of the checkpoint, which will read it.
func (b *Broker) Notify(job string, id int64) { b.NotifyKey(brokerKey(job, id)) }

// NotifyJob wakes the waiters of every change of job (AnyCheckpoint): a store calls it once
// a checkpoint opened or a participant registered has committed.
func (b *Broker) NotifyJob(job string) { b.wake(brokerKey(job, AnyCheckpoint), nil) }

// NotifyKey wakes every waiter of the checkpoint named "job/id", as stores announce it, and
// the waiters of any change of its job.
func (b *Broker) NotifyKey(key string) {
	b.wake(key, nil)
	if i := strings.LastIndexByte(key, '/'); i >= 0 && key[i+1:] != "0" {
		b.wake(key[:i+1]+"0", nil)
	}
}

func (b *Broker) wake(key string, cp *Checkpoint) { b.wakeWith(key, cp, nil) }

// wakeWith wakes the waiters of key, handing them cp (Decided) and o (Opened).
func (b *Broker) wakeWith(key string, cp *Checkpoint, o *Opened) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiters[key]) == 0 {
		return
	}
	for sub := range b.waiters[key] {
		sub.cp, sub.opened = cp, o
		close(sub.done)
	}
	delete(b.waiters, key)
}

// NotifyAll wakes every waiter.
func (b *Broker) NotifyAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, set := range b.waiters {
		for sub := range set {
			close(sub.done)
		}
	}
	b.waiters = nil
}

// BrokerKey is the announcement payload naming a checkpoint: "job/id".
func BrokerKey(job string, id int64) string { return brokerKey(job, id) }
