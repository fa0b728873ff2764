package coordinator

import (
	"errors"
	"fmt"
	"strings"
)

// Code is the stable machine code of a rejection, as it appears in problem documents.
type Code string

// The codes of the protocol's refusals (docs/protocol.md, "Refusals"; openapi.yaml). Each
// maps to one HTTP status in the api package.
const (
	CodeInvalidRequest      Code = "invalid_request"
	CodeNotFound            Code = "not_found"
	CodeVoteConflict        Code = "vote_conflict"
	CodeFenced              Code = "fenced"
	CodeNotRegistered       Code = "not_registered"
	CodeAlreadyDecided      Code = "already_decided"
	CodeNotDecided          Code = "not_decided"
	CodeVotesMissing        Code = "votes_missing"
	CodeLowerCheckpointOpen Code = "lower_checkpoint_open"
	CodeTooManyCheckpoints  Code = "too_many_checkpoints"
	CodeIdempotencyConflict Code = "idempotency_conflict"
	CodeJobBusy             Code = "job_busy"
	CodeTokenExists         Code = "token_exists"
	CodeGone                Code = "gone"
	CodeUnauthenticated     Code = "unauthenticated"
	CodeForbidden           Code = "forbidden"
	CodePayloadTooLarge     Code = "payload_too_large"
	CodeUnavailable         Code = "unavailable"
)

// Error is a rejection by the protocol: the request was understood and refused, and nothing
// it asked for was changed. Checkpoint, when set, is the checkpoint as it stands.
type Error struct {
	Code       Code
	Message    string
	Checkpoint *Checkpoint
	// Missing names the participants without a prepared vote (CodeVotesMissing).
	Missing []string
	// Fields lists what was wrong with the input, field by field (CodeInvalidRequest).
	Fields []FieldError
	// Err is the cause, for CodeUnavailable.
	Err error
}

// FieldError is one thing wrong with a request's input.
type FieldError struct {
	Field   string
	Message string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	for _, f := range e.Fields {
		fmt.Fprintf(&b, "; %s: %s", f.Field, f.Message)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's code, so that
// errors.Is(err, coordinator.ErrFenced) works on every fenced rejection.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Checkpoint == nil
}

// Sentinels, one per code, for errors.Is.
var (
	ErrInvalidRequest      = &Error{Code: CodeInvalidRequest}
	ErrNotFound            = &Error{Code: CodeNotFound}
	ErrVoteConflict        = &Error{Code: CodeVoteConflict}
	ErrFenced              = &Error{Code: CodeFenced}
	ErrNotRegistered       = &Error{Code: CodeNotRegistered}
	ErrAlreadyDecided      = &Error{Code: CodeAlreadyDecided}
	ErrNotDecided          = &Error{Code: CodeNotDecided}
	ErrVotesMissing        = &Error{Code: CodeVotesMissing}
	ErrLowerCheckpointOpen = &Error{Code: CodeLowerCheckpointOpen}
	ErrTooManyCheckpoints  = &Error{Code: CodeTooManyCheckpoints}
	ErrIdempotencyConflict = &Error{Code: CodeIdempotencyConflict}
	ErrJobBusy             = &Error{Code: CodeJobBusy}
	ErrTokenExists         = &Error{Code: CodeTokenExists}
	ErrGone                = &Error{Code: CodeGone}
	ErrUnauthenticated     = &Error{Code: CodeUnauthenticated}
	ErrForbidden           = &Error{Code: CodeForbidden}
	ErrPayloadTooLarge     = &Error{Code: CodePayloadTooLarge}
	ErrUnavailable         = &Error{Code: CodeUnavailable}
)

func reject(code Code, cp *Checkpoint, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Checkpoint: cp}
}

// Unavailable wraps a cause that makes the store unreachable (connection refused, database
// restarting). Stores return it so callers can answer 503 and retry.
func Unavailable(cause error) error {
	return &Error{Code: CodeUnavailable, Message: "the database is unavailable", Err: cause}
}

// IsRejection reports whether err is a protocol rejection (an *Error other than
// unavailability): the request was refused and the transaction may still commit what the
// rules did on the way, such as aborting an expired checkpoint.
func IsRejection(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code != CodeUnavailable
}
