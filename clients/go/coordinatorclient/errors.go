package coordinatorclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"
)

// Sentinel errors that an *APIError matches with errors.Is, one per problem code a
// participant has to tell apart. The full problem document stays available through
// errors.As(err, &apiErr).
var (
	// ErrFenced: a vote or ack carried an epoch that is no longer current; a newer
	// instance of the participant registered. Fatal for this instance.
	ErrFenced = errors.New("fenced: a newer epoch of this participant exists")
	// ErrNotRegistered: a vote or ack from a participant that never registered.
	ErrNotRegistered = errors.New("participant not registered")
	// ErrAlreadyDecided: a vote on, or a reversal of, a checkpoint that is already decided.
	ErrAlreadyDecided = errors.New("checkpoint already decided")
	// ErrVoteConflict: a different vote from the same participant for the same checkpoint.
	ErrVoteConflict = errors.New("vote conflicts with the vote already recorded")
	// ErrNotDecided: an ack on a checkpoint that is still preparing.
	ErrNotDecided = errors.New("checkpoint not decided")
	// ErrNotFound: no such job, checkpoint or participant.
	ErrNotFound = errors.New("not found")
	// ErrTooManyCheckpoints: max_concurrent_checkpoints are already preparing.
	ErrTooManyCheckpoints = errors.New("too many checkpoints preparing")
	// ErrIdempotencyConflict: an Idempotency-Key reused with another request body.
	ErrIdempotencyConflict = errors.New("idempotency key reused with another body")
	// ErrUnavailable: the coordinator answered 503; retried by Coordinator until its
	// context ends.
	ErrUnavailable = errors.New("coordinator unavailable")
)

var codeErrors = map[string]error{
	"fenced":               ErrFenced,
	"not_registered":       ErrNotRegistered,
	"already_decided":      ErrAlreadyDecided,
	"vote_conflict":        ErrVoteConflict,
	"not_decided":          ErrNotDecided,
	"not_found":            ErrNotFound,
	"too_many_checkpoints": ErrTooManyCheckpoints,
	"idempotency_conflict": ErrIdempotencyConflict,
	"unavailable":          ErrUnavailable,
}

// APIError is an answer of the coordinator that is not a success: its HTTP status and,
// when the body was a problem document, the document. errors.Is matches it against the
// sentinel of its code (ErrFenced, ErrAlreadyDecided, ...).
type APIError struct {
	// Op names the operation, e.g. "vote orders/41/sink-a".
	Op string
	// StatusCode is the HTTP status.
	StatusCode int
	// Problem is the RFC 9457 document, or nil when the body was not one.
	Problem *Problem
	// RetryAfter is the Retry-After header, 0 when absent.
	RetryAfter time.Duration
	// Body is the start of the answer's body (at most 1 KiB) when it was no problem
	// document: what a proxy, or a server that is not the coordinator, said.
	Body string
}

// Code is the problem's machine code ("fenced", "already_decided", ...), or "" when the
// answer carried no problem document.
func (e *APIError) Code() string {
	if e.Problem == nil {
		return ""
	}
	return string(e.Problem.Code)
}

// Checkpoint is the checkpoint as it stands, carried by problems about a checkpoint
// (already_decided, vote_conflict, ...); nil otherwise.
func (e *APIError) Checkpoint() *Checkpoint {
	if e.Problem == nil {
		return nil
	}
	return e.Problem.Checkpoint
}

// Error describes the answer: operation, status, code and detail.
func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d", e.Op, e.StatusCode)
	if e.Problem != nil {
		msg += " " + string(e.Problem.Code)
		if e.Problem.Detail != nil && *e.Problem.Detail != "" {
			msg += ": " + *e.Problem.Detail
		}
	} else if e.Body != "" {
		msg += fmt.Sprintf(" (not a problem document): %q", e.Body)
	}
	return msg
}

// Is reports whether target is the sentinel error of e's problem code.
func (e *APIError) Is(target error) bool {
	s, ok := codeErrors[e.Code()]
	return ok && s == target
}

// transient reports whether the request may succeed if sent again unchanged: the
// coordinator or its database is briefly unavailable, or a server error.
func (e *APIError) transient() bool {
	return e.StatusCode >= 500 || e.StatusCode == http.StatusTooManyRequests ||
		e.StatusCode == http.StatusRequestTimeout
}

// PermanentError marks an error of a Participant's Commit or Abort as one that retrying
// cannot cure: Runner.Run stops and returns it instead of retrying. Build it with
// Permanent.
type PermanentError struct{ Err error }

// Error is the wrapped error's text, marked permanent.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error, so errors.Is and errors.As see through it.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the Runner does not retry the call that returned it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

func isPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// ProblemIn is the problem document that an error answer carries, or nil when its body is
// none (a proxy's page, say). The generated client decodes each status the contract lists
// into a field of its own; one decoder here serves them all, and statuses it does not list.
func ProblemIn(resp *http.Response, body []byte) *Problem {
	mediaType, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mediaType != "application/problem+json" {
		return nil
	}
	var p Problem
	if err := json.Unmarshal(body, &p); err != nil || p.Status == 0 {
		return nil
	}
	return &p
}
