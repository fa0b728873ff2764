package coordinator

import (
	"context"
	"time"
)

// AuditAction is what an audited request did.
type AuditAction string

// The audited actions: those taken by request rather than by the protocol itself.
const (
	AuditJobCreated          AuditAction = "job_created"
	AuditJobUpdated          AuditAction = "job_updated"
	AuditJobDeleted          AuditAction = "job_deleted"
	AuditCheckpointCommitted AuditAction = "checkpoint_committed"
	AuditCheckpointAborted   AuditAction = "checkpoint_aborted"
	AuditCheckpointCompleted AuditAction = "checkpoint_completed"
	AuditTokenCreated        AuditAction = "token_created"
	AuditTokenRevoked        AuditAction = "token_revoked"
)

// AuditEntry is one action taken by request, written in the transaction that took it.
type AuditEntry struct {
	// ID orders the entries; the store assigns it.
	ID int64
	// At is the database's clock when the action was taken; the store sets it where the
	// rules did not.
	At     time.Time
	Action AuditAction
	// Job is empty for token actions; Checkpoint is 0 unless the action is on one.
	Job        string
	Checkpoint int64
	// Token is the name of the token the request carried, empty without authentication.
	Token string
	// Subject names what a token action was about (the token created or revoked).
	Subject   string
	Reason    string
	RequestID string
}

// AuditQuery selects audit entries, newest first.
type AuditQuery struct {
	// Jobs restricts to the entries of the jobs it matches; empty means every job.
	Jobs JobPattern
	// WithTokens includes the token actions, which belong to no job.
	WithTokens bool
	// Before is the ID to continue below, exclusive; 0 starts at the newest.
	Before int64
	Limit  int
}

type requestIDKey struct{}

// WithRequestID returns ctx carrying the request's id, which audit entries record.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id WithRequestID put in ctx, "" if none.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// auditEntry is the entry of an action taken by the request of ctx.
func auditEntry(ctx context.Context, action AuditAction, job string, checkpoint int64, reason string) AuditEntry {
	id := RequestID(ctx)
	return AuditEntry{Action: action, Job: job, Checkpoint: checkpoint, Token: actorOf(ctx), Reason: reason, RequestID: id}
}
