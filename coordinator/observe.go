package coordinator

import "time"

// Observer is told what the Service did, once it is committed: metrics count it. Its
// methods must be cheap and safe for concurrent use; they are called on the request's
// goroutine.
type Observer interface {
	// Changed is told what one committed update of job changed, at now by the database's
	// clock: checkpoints opened, registrations, decisions, completions.
	Changed(job string, now time.Time, m *Mutation)
	// Voted is told the outcome of a vote (VoteAccepted, VoteDuplicate, ...).
	Voted(job string, kind VoteKind, result string)
	// Acked is told the outcome of an ack (AckAccepted, AckDuplicate, AckFenced).
	Acked(job string, result string)
}

// JobDeletionObserver is an Observer that is also told when a job was deleted through this
// Service, once the deletion committed: it forgets what it kept of the job.
type JobDeletionObserver interface {
	JobDeleted(job string)
}

// The outcomes of votes and acks, as Observer hears them (the metrics' result label).
const (
	VoteAccepted      = "accepted"
	VoteDuplicate     = "duplicate"
	VoteFenced        = "fenced"
	VoteLate          = "late"
	VoteConflict      = "conflict"
	VoteNotRegistered = "not_registered"
	AckAccepted       = "accepted"
	AckDuplicate      = "duplicate"
	AckFenced         = "fenced"
)

// WithObserver has the Service tell o what it does.
func WithObserver(o Observer) ServiceOption {
	return func(s *Service) { s.observer = o }
}

// noObserver is the Observer of a Service without one.
type noObserver struct{}

func (noObserver) Changed(string, time.Time, *Mutation) {}
func (noObserver) Voted(string, VoteKind, string)       {}
func (noObserver) Acked(string, string)                 {}

// voteResult is the outcome of a vote: recorded tells whether it was written.
func voteResult(err error, recorded bool) string {
	if err == nil {
		if recorded {
			return VoteAccepted
		}
		return VoteDuplicate
	}
	switch codeOf(err) {
	case CodeFenced:
		return VoteFenced
	case CodeAlreadyDecided:
		return VoteLate
	case CodeVoteConflict:
		return VoteConflict
	case CodeNotRegistered:
		return VoteNotRegistered
	}
	return ""
}

// ackResult is the outcome of an ack.
func ackResult(err error, recorded bool) string {
	if err == nil {
		if recorded {
			return AckAccepted
		}
		return AckDuplicate
	}
	if codeOf(err) == CodeFenced {
		return AckFenced
	}
	return ""
}

func codeOf(err error) Code {
	for err != nil {
		if e, ok := err.(*Error); ok {
			return e.Code
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return ""
		}
		err = u.Unwrap()
	}
	return ""
}
