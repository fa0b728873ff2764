package sinks

// SetAfterPrepare makes s run fn after each successful PREPARE TRANSACTION, its error
// failing Prepare as a lost answer would.
func SetAfterPrepare(s *PGSink, fn func() error) { s.afterPrepare = fn }
