package coordinator

import (
	"strconv"
	"sync"
)

// Broker wakes the waiters of checkpoints in this process. Stores use it to implement
// Subscribe: they call Notify after a decision commits (their own, or one announced by
// another process) and NotifyAll when they may have missed announcements.
type Broker struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

func brokerKey(job string, id int64) string { return job + "/" + strconv.FormatInt(id, 10) }

// Subscribe returns a channel closed by the next Notify of the checkpoint (or NotifyAll),
// and a function to stop waiting.
func (b *Broker) Subscribe(job string, id int64) (<-chan struct{}, func()) {
	key := brokerKey(job, id)
	ch := make(chan struct{})
	b.mu.Lock()
	if b.waiters == nil {
		b.waiters = make(map[string]map[chan struct{}]struct{})
	}
	set := b.waiters[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		b.waiters[key] = set
	}
	set[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if set, ok := b.waiters[key]; ok {
			if _, ok := set[ch]; ok {
				delete(set, ch)
				if len(set) == 0 {
					delete(b.waiters, key)
				}
			}
		}
	}
}

// Notify wakes every waiter of the checkpoint.
func (b *Broker) Notify(job string, id int64) { b.NotifyKey(brokerKey(job, id)) }

// NotifyKey wakes every waiter of the checkpoint named "job/id", as stores announce it.
func (b *Broker) NotifyKey(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.waiters[key] {
		close(ch)
	}
	delete(b.waiters, key)
}

// NotifyAll wakes every waiter.
func (b *Broker) NotifyAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, set := range b.waiters {
		for ch := range set {
			close(ch)
		}
	}
	b.waiters = nil
}

// BrokerKey is the announcement payload naming a checkpoint: "job/id".
func BrokerKey(job string, id int64) string { return brokerKey(job, id) }
