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
	// everything are the waiters of any change of any job (SubscribeEverything).
	everything map[*Subscription]struct{}
}

// Subscription is one waiter on a checkpoint's decision.
type Subscription struct {
	done   chan struct{}
	cp     *Checkpoint // set before done is closed, by Publish
	change *Changed    // set before done is closed, by PublishChanged
	cancel func()
}

// Changed is what a store hands the waiters of a job's changes (AnyCheckpoint) when a
// transaction of this process that changed nothing of the job but its checkpoints
// (opened them, recorded votes and acks, decided) has committed: the job's Version before
// it (From) and after (To), the database's clock of its last change, and every checkpoint
// it opened or changed, as it committed them. Since, at most From, is a version from which
// every change to the job up to From was this process's and changed nothing but
// checkpoints, announcing (to this process's waiters) each one that made something owed:
// what came between Since and From only settled something owed (a vote, an ack), nothing
// else. Receivers share it: they must not change it.
//
// A waiter that read the job at From knows the job at To. One whose participant owed
// nothing at a version from Since to From owes, at To, exactly what it owes on
// Checkpoints: nothing between made anything owed, and the checkpoints this change did not
// touch are as they were.
type Changed struct {
	Since, From, To int64
	Now             time.Time
	Checkpoints     []*Checkpoint
}

// Changed, once Done is closed, returns what PublishChanged handed the waiter, nil when
// the wake-up came otherwise (then read).
func (s *Subscription) Changed() *Changed { return s.change }

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

// SubscribeEverything returns a subscription woken by the next wake-up of any waiter of any
// job, handed what that wake-up hands (Decided, Changed): what the event streams follow.
func (b *Broker) SubscribeEverything() *Subscription {
	sub := &Subscription{done: make(chan struct{})}
	b.mu.Lock()
	if b.everything == nil {
		b.everything = make(map[*Subscription]struct{})
	}
	b.everything[sub] = struct{}{}
	b.mu.Unlock()
	sub.cancel = func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.everything, sub)
	}
	return sub
}

// Publish wakes every waiter of cp with cp as it was committed: a store calls it once the
// transaction that saved cp's decision has committed, and must not change cp after.
func (b *Broker) Publish(cp *Checkpoint) {
	b.wake(brokerKey(cp.Job, cp.ID), cp)
	b.wake(brokerKey(cp.Job, AnyCheckpoint), nil)
}

// PublishChanged wakes the waiters of every change of job (AnyCheckpoint), as NotifyJob
// does, handing them c: a store calls it, instead of NotifyJob (and with PublishDecided
// instead of Publish for its decisions), once the transaction c tells of has committed,
// and must not change c after.
func (b *Broker) PublishChanged(job string, c *Changed) {
	b.wakeWith(brokerKey(job, AnyCheckpoint), nil, c)
}

// PublishDecided is Publish for the waiters of cp alone: a store calls it for a decision
// whose job's waiters on any change it hands a Changed (PublishChanged).
func (b *Broker) PublishDecided(cp *Checkpoint) {
	b.wake(brokerKey(cp.Job, cp.ID), cp)
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

// wakeWith wakes the waiters of key, handing them cp (Decided) and c (Changed).
func (b *Broker) wakeWith(key string, cp *Checkpoint, c *Changed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for sub := range b.everything {
		sub.cp, sub.change = cp, c
		close(sub.done)
		delete(b.everything, sub)
	}
	if len(b.waiters[key]) == 0 {
		return
	}
	for sub := range b.waiters[key] {
		sub.cp, sub.change = cp, c
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
	for sub := range b.everything {
		close(sub.done)
	}
	b.everything = nil
}

// BrokerKey is the announcement payload naming a checkpoint: "job/id".
func BrokerKey(job string, id int64) string { return brokerKey(job, id) }
