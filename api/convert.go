package api

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// This file translates domain values to the generated models and back. Answers keep the
// wire's promises: times in UTC, null rather than zero values for what has not happened,
// [] rather than null for lists and committables.

var emptyArray = json.RawMessage("[]")

func ptr[T any](v T) *T { return &v }

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	return ptr(t.UTC())
}

func optionalString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// committables returns stored committables unchanged, [] when there are none.
func committables(raw json.RawMessage) Committables {
	if len(raw) == 0 {
		return emptyArray
	}
	return raw
}

func checkpointBody(cp *coordinator.Checkpoint) Checkpoint {
	out := Checkpoint{
		Job:           cp.Job,
		Id:            cp.ID,
		Status:        CheckpointStatus(cp.Status),
		CreatedAt:     cp.CreatedAt.UTC(),
		Deadline:      cp.Deadline.UTC(),
		DecidedAt:     utc(cp.DecidedAt),
		CompletedAt:   utc(cp.CompletedAt),
		AbortReason:   optionalString(cp.AbortReason),
		DecidedBy:     optionalString(cp.DecidedBy),
		DecisionCause: optionalCause(cp.DecisionCause),
		AutoCommit:    cp.AutoCommit,
		Participants:  make([]CheckpointParticipant, len(cp.Participants)),
	}
	for i, p := range cp.Participants {
		cpp := CheckpointParticipant{
			Name:         p.Name,
			Committables: committables(p.Committables),
			VotedAt:      utc(p.VotedAt),
			AckedAt:      utc(p.AckedAt),
			Reason:       optionalString(p.Reason),
			AckedBy:      optionalString(p.AckedBy),
		}
		if p.Vote != "" {
			cpp.Vote = ptr(VoteKind(p.Vote))
			cpp.Epoch = ptr(p.Epoch)
		}
		out.Participants[i] = cpp
	}
	return out
}

func jobBody(j *coordinator.Job) Job {
	epochs := make(map[string]int64, len(j.Epochs))
	for p, e := range j.Epochs {
		epochs[p] = e
	}
	return Job{
		Name:                     j.Name,
		Participants:             append([]string{}, j.Config.Participants...),
		CheckpointTimeoutMs:      j.Config.CheckpointTimeout.Milliseconds(),
		MaxConcurrentCheckpoints: j.Config.MaxConcurrentCheckpoints,
		AutoCommit:               j.Config.AutoCommit,
		RetentionMs:              j.Config.Retention.Milliseconds(),
		LastCheckpoint:           j.LastCheckpoint,
		LastCommitted:            j.LastCommitted,
		Epochs:                   epochs,
		CreatedAt:                j.CreatedAt.UTC(),
		UpdatedAt:                j.UpdatedAt.UTC(),
	}
}

func pendingItems(items []coordinator.PendingItem) []PendingItem {
	out := make([]PendingItem, len(items))
	for i, it := range items {
		out[i] = PendingItem{
			Checkpoint:   it.Checkpoint,
			Status:       CheckpointStatus(it.Status),
			Action:       PendingAction(it.Action),
			Committables: committables(it.Committables),
		}
	}
	return out
}

// jobConfig applies the defaults of openapi.yaml to the fields left out.
func jobConfig(body *JobConfig) coordinator.JobConfig {
	cfg := coordinator.JobConfig{
		Participants:             append([]string{}, body.Participants...),
		CheckpointTimeout:        coordinator.DefaultCheckpointTimeout,
		MaxConcurrentCheckpoints: coordinator.DefaultMaxConcurrent,
		AutoCommit:               true,
		Retention:                coordinator.DefaultRetention,
	}
	if body.RetentionMs != nil {
		cfg.Retention = milliseconds(*body.RetentionMs)
	}
	if body.CheckpointTimeoutMs != nil {
		cfg.CheckpointTimeout = milliseconds(*body.CheckpointTimeoutMs)
	}
	if body.MaxConcurrentCheckpoints != nil {
		cfg.MaxConcurrentCheckpoints = *body.MaxConcurrentCheckpoints
	}
	if body.AutoCommit != nil {
		cfg.AutoCommit = *body.AutoCommit
	}
	return cfg
}

// milliseconds converts a duration in milliseconds, saturating instead of overflowing so
// that an absurd value stays out of range and is refused rather than wrapping into range.
func milliseconds(ms int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case ms > limit:
		return math.MaxInt64
	case ms < -limit:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}

func statuses(filter *StatusFilter) []coordinator.Status {
	if filter == nil {
		return nil
	}
	out := make([]coordinator.Status, len(*filter))
	for i, s := range *filter {
		out[i] = coordinator.Status(s)
	}
	return out
}

// Cursors are opaque to clients: base64url of a tag naming the listing and the position of
// the page's last item, so that a cursor of one listing is refused by another.
const (
	cursorJobs        = "jobs"        // the last job's name
	cursorTokens      = "tokens"      // the last token's name
	cursorAudit       = "audit"       // the last entry's id (newest first: next are lower)
	cursorCheckpoints = "checkpoints" // the last checkpoint's id (newest first: next ids are lower)
	cursorAll         = "all"         // the last checkpoint's Seq (oldest first: next are higher)
)

func encodeCursor(tag, position string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tag + ":" + position))
}

func decodeCursor(tag, cursor string) (string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return "", false
	}
	pos, ok := strings.CutPrefix(string(raw), tag+":")
	return pos, ok && pos != ""
}

func badCursor() *requestError {
	return invalid("cursor", "is not a cursor this listing returned: pass next_cursor as it was returned")
}

// jobCursor returns the name to list jobs after ("" for the first page, also when the
// cursor is empty, for scripts that pass the last next_cursor whatever it was).
func jobCursor(cursor *string) (string, error) { return nameCursor(cursorJobs, cursor) }

// nameCursor returns the name to continue after in a list by name (tag: cursorJobs or
// cursorTokens), "" for the first page.
func nameCursor(tag string, cursor *string) (string, error) {
	if cursor == nil || *cursor == "" {
		return "", nil
	}
	name, ok := decodeCursor(tag, *cursor)
	if !ok || !coordinator.ValidName(name) {
		return "", badCursor()
	}
	return name, nil
}

// positionCursor returns the position (a checkpoint id or a Seq) to continue from, 0 for
// the first page.
func positionCursor(tag string, cursor *string) (int64, error) {
	if cursor == nil || *cursor == "" {
		return 0, nil
	}
	pos, ok := decodeCursor(tag, *cursor)
	if !ok {
		return 0, badCursor()
	}
	n, err := strconv.ParseInt(pos, 10, 64)
	if err != nil || n < 1 {
		return 0, badCursor()
	}
	return n, nil
}

func tokenBody(t *coordinator.Token) Token {
	scopes := make([]Scope, len(t.Scopes))
	for i, sc := range t.Scopes {
		scopes[i] = Scope(sc)
	}
	return Token{
		Name: t.Name, Scopes: scopes, Job: string(t.Job), Participant: optionalString(t.Participant),
		CreatedAt: t.CreatedAt.UTC(), ExpiresAt: utc(t.ExpiresAt),
	}
}

func optionalCause(c coordinator.Cause) *CheckpointDecisionCause {
	if c == "" {
		return nil
	}
	return ptr(CheckpointDecisionCause(c))
}

func auditBody(e *coordinator.AuditEntry) AuditEntry {
	out := AuditEntry{
		Id: e.ID, At: e.At.UTC(), Action: AuditEntryAction(e.Action), Job: optionalString(e.Job),
		Token: optionalString(e.Token), Subject: optionalString(e.Subject), Reason: optionalString(e.Reason),
		RequestId: optionalString(e.RequestID),
	}
	if e.Checkpoint != 0 {
		out.Checkpoint = ptr(e.Checkpoint)
	}
	return out
}

// checkpointAnswer is the 200 answer with cp: its full view, or, when prefer asks for
// return=minimal (RFC 7240), the view with only participant's entry (none if it is not one of
// cp's) and the counts of votes and acks, so that its size does not grow with the
// participants.
func checkpointAnswer(cp *coordinator.Checkpoint, prefer *string, participant string) jsonResponse {
	if prefer == nil || !prefersMinimal(*prefer) {
		return jsonResponse{status: http.StatusOK, checkpoint: cp}
	}
	return jsonResponse{status: http.StatusOK, checkpoint: cp, minimal: true, participant: participant}
}

// callerAnswer is checkpointAnswer to participant's own vote or ack: minimal, it leaves the
// committables the caller sent out, so that its size does not grow with them.
func callerAnswer(cp *coordinator.Checkpoint, prefer *string, participant string) jsonResponse {
	answer := checkpointAnswer(cp, prefer, participant)
	answer.fromCaller = true
	return answer
}

// minimalBody is cp's view with only participant's entry and the counts of votes and acks.
func minimalBody(cp *coordinator.Checkpoint, participant string) Checkpoint {
	var own []coordinator.ParticipantState
	for _, p := range cp.Participants {
		if p.Name == participant {
			own = append(own, p)
		}
	}
	votes, acks := checkpointCounts(cp)
	view := *cp
	view.Participants = own
	body := checkpointBody(&view)
	body.Votes, body.Acks = &votes, &acks
	return body
}

// checkpointCounts counts cp's votes, and its acks done and owed.
func checkpointCounts(cp *coordinator.Checkpoint) (VoteCounts, AckCounts) {
	var votes VoteCounts
	var acks AckCounts
	for i := range cp.Participants {
		p := &cp.Participants[i]
		switch p.Vote {
		case coordinator.VotePrepared:
			votes.Prepared++
		case coordinator.VoteAbort:
			votes.Abort++
		default:
			votes.Missing++
		}
		if p.AckedAt != nil {
			acks.Done++
		} else if _, owed := coordinator.OwedBy(cp, p); owed && cp.Status != coordinator.StatusPreparing {
			acks.Missing++
		}
	}
	return votes, acks
}

// prefersMinimal reports whether a Prefer header's preferences include return=minimal.
func prefersMinimal(header string) bool {
	for _, pref := range strings.Split(header, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
		value, _, _ = strings.Cut(value, ";")
		if strings.EqualFold(strings.TrimSpace(name), "return") && strings.EqualFold(strings.Trim(strings.TrimSpace(value), `"`), "minimal") {
			return true
		}
	}
	return false
}
