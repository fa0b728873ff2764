package sinks

// SetAfterPrepare makes s run fn after each successful PREPARE TRANSACTION, its error
// failing Prepare as a lost answer would.
func SetAfterPrepare(s *PGSink, fn func() error) { s.afterPrepare = fn }

// SetAfterXAPrepare makes s run fn after each successful XA PREPARE, while the preparing
// session is still open, its error failing Prepare as a lost answer would.
func SetAfterXAPrepare(s *MariaDBSink, fn func(xid string) error) { s.afterPrepare = fn }
