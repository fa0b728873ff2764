package postgres

import (
	"time"

	"github.com/twophase/coordinator/store/groupcommit"
)

// SetClockBehind makes the store's next estimates of the database's clock (cache.go) d
// behind it, as a late reading would, until a reading corrects it.
func SetClockBehind(s *Store, d time.Duration) {
	c := s.committer.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	c.db = c.db.Add(-d)
}

// WaitListening waits, up to d, until the store's decision listener listens: before, its
// start wakes every waiter (a store may have missed announcements), which tests of what a
// waiter is handed must not mistake for a wake-up by a decision.
func WaitListening(s *Store, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		c := s.committer.cache
		c.mu.Lock()
		on := c.listening
		c.mu.Unlock()
		if on {
			return true
		}
	}
	return false
}

// OwingStatements are the statements that read what is owed, each with its arguments for
// job j: the read of pending (a View) and a transaction's Owing for anyone.
func OwingStatements(job string) map[string][]any {
	return map[string][]any{"viewSQL": {viewSQL, job}, "owingSQL": {owingSQL, job, ""}}
}

// CommitRetry commits ops as the committer runs a batch again after a failure: in one
// transaction, reading every job under its lock, in the order given.
func CommitRetry(s *Store, ops []*groupcommit.Op) error {
	_, _, err := s.committer.commit(ops, false, false)
	return err
}

// OwingReads is how often the store's Owing read what is owed (viewSQL), rather than
// answering from its cached state confirmed by the job's version.
func OwingReads(s *Store) int64 {
	return s.owingReads.Load()
}
