package postgres

import "time"

// SetClockBehind makes the store's next estimates of the database's clock (cache.go) d
// behind it, as a late reading would, until a reading corrects it.
func SetClockBehind(s *Store, d time.Duration) {
	c := s.committer.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	c.db = c.db.Add(-d)
}
