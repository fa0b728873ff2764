package coordinator

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twophase/coordinator/internal/rawjson"
)

// namePattern is the rule for names, as error messages quote it; ValidName checks it
// without the regular expression (on every request's path, several times).
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidName reports whether s may name a job or a participant: it matches namePattern.
func ValidName(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

type fieldErrors []FieldError

func (f *fieldErrors) add(field, format string, args ...any) {
	*f = append(*f, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (f fieldErrors) err() error {
	if len(f) == 0 {
		return nil
	}
	return &Error{Code: CodeInvalidRequest, Message: "the request is not valid", Fields: f}
}

func (f *fieldErrors) name(field, s string) {
	if !ValidName(s) {
		f.add(field, "%q is not a valid name: it must match %s", s, namePattern)
	}
}

// ValidateName returns ErrInvalidRequest unless s is a valid job or participant name.
func ValidateName(field, s string) error {
	var f fieldErrors
	f.name(field, s)
	return f.err()
}

// ValidateJobConfig checks a configuration against the bounds of openapi.yaml's JobConfig.
func ValidateJobConfig(cfg JobConfig) error {
	var f fieldErrors
	switch n := len(cfg.Participants); {
	case n == 0:
		f.add("participants", "at least one participant is required")
	case n > MaxParticipants:
		f.add("participants", "at most %d participants are allowed, got %d", MaxParticipants, n)
	}
	seen := make(map[string]bool, len(cfg.Participants))
	for i, p := range cfg.Participants {
		field := fmt.Sprintf("participants[%d]", i)
		f.name(field, p)
		if seen[p] {
			f.add(field, "%q appears more than once", p)
		}
		seen[p] = true
	}
	if cfg.CheckpointTimeout < MinCheckpointTimeout || cfg.CheckpointTimeout > MaxCheckpointTimeout {
		f.add("checkpoint_timeout_ms", "must be from %d to %d", MinCheckpointTimeout.Milliseconds(), MaxCheckpointTimeout.Milliseconds())
	}
	if cfg.Retention != 0 && (cfg.Retention < MinRetention || cfg.Retention.Milliseconds() > math.MaxInt64/2) {
		f.add("retention_ms", "must be 0 (keep everything) or at least %d", MinRetention.Milliseconds())
	}
	if cfg.MaxConcurrentCheckpoints < 1 || cfg.MaxConcurrentCheckpoints > MaxMaxConcurrent {
		f.add("max_concurrent_checkpoints", "must be from 1 to %d", MaxMaxConcurrent)
	}
	return f.err()
}

// ValidateTimeout checks a checkpoint's own timeout; zero means the job's.
func validateTimeout(f *fieldErrors, d time.Duration) {
	if d != 0 && (d < MinCheckpointTimeout || d > MaxCheckpointTimeout) {
		f.add("timeout_ms", "must be from %d to %d", MinCheckpointTimeout.Milliseconds(), MaxCheckpointTimeout.Milliseconds())
	}
}

// ValidateVote checks a vote's shape; the rules check it against the checkpoint. Epoch 0
// is no bad input: it is the epoch of a participant that never registered, which the rules
// refuse with not_registered.
func ValidateVote(v Vote) error {
	_, err := validateVote(v)
	return err
}

// validateVote is ValidateVote, returning the vote with its committables compacted: one
// pass over them, which both checks and compacts.
func validateVote(v Vote) (Vote, error) {
	var f fieldErrors
	validateEpoch(&f, v.Epoch)
	switch v.Kind {
	case VotePrepared:
		if v.Reason != "" {
			f.add("reason", "only an abort vote has a reason")
		}
		if len(v.Committables) > 0 {
			compact, err := CompactJSON(v.Committables)
			if err != nil || compact[0] != '[' {
				f.add("committables", "must be a JSON array")
			} else {
				v.Committables = compact
			}
		}
	case VoteAbort:
		if len(v.Committables) > 0 {
			f.add("committables", "only a prepared vote has committables")
		}
	default:
		f.add("vote", "must be %q or %q", VotePrepared, VoteAbort)
	}
	validateReason(&f, v.Reason)
	return v, f.err()
}

func validateEpoch(f *fieldErrors, epoch int64) {
	if epoch < 0 {
		f.add("epoch", "must be 0 or more (the epoch that register returned)")
	}
}

// ValidateVoteRequest checks a vote on checkpoint id of job by participant, and returns it
// with its committables compacted (so that the same values compare equal byte for byte).
func ValidateVoteRequest(job string, id int64, participant string, v Vote) (Vote, error) {
	if err := validateCheckpoint(job, id); err != nil {
		return v, err
	}
	if err := ValidateName("participant", participant); err != nil {
		return v, err
	}
	return validateVote(v)
}

// ValidateAck checks an ack of checkpoint id of job by participant with epoch.
func ValidateAck(job string, id int64, participant string, epoch int64) error {
	if err := validateCheckpoint(job, id); err != nil {
		return err
	}
	var f fieldErrors
	f.name("participant", participant)
	validateEpoch(&f, epoch)
	return f.err()
}

// ValidateAbort checks an abort of checkpoint id of job, with its reason.
func ValidateAbort(job string, id int64, reason string) error {
	if err := validateCheckpoint(job, id); err != nil {
		return err
	}
	var f fieldErrors
	validateReason(&f, reason)
	return f.err()
}

// ValidatePrepare checks a request to open a checkpoint of job.
func ValidatePrepare(job string, req PrepareRequest) error {
	var f fieldErrors
	f.name("job", job)
	validateTimeout(&f, req.Timeout)
	if req.IdempotencyKey != "" && !validIdempotencyKey(req.IdempotencyKey) {
		f.add("Idempotency-Key", "must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLength)
	}
	return f.err()
}

// validatePageSize checks the size of a page of a list: from 1 to MaxPageSize (a caller
// that was given none asks for DefaultPageSize).
func validatePageSize(f *fieldErrors, limit int) {
	if limit < 1 || limit > MaxPageSize {
		f.add("limit", "must be an integer from 1 to %d", MaxPageSize)
	}
}

func validateNames(job, participant string) error {
	var f fieldErrors
	f.name("job", job)
	f.name("participant", participant)
	return f.err()
}

func validateCheckpoint(job string, id int64) error {
	var f fieldErrors
	f.name("job", job)
	if id < 1 {
		f.add("id", "checkpoint ids start at 1")
	}
	return f.err()
}

// validateReason bounds a free-text reason. NUL is refused: no store keeps it in text.
func validateReason(f *fieldErrors, reason string) {
	if len(reason) > MaxReasonLength {
		f.add("reason", "must be at most %d bytes", MaxReasonLength)
	}
	if strings.ContainsRune(reason, 0) || !utf8.ValidString(reason) {
		f.add("reason", "must be valid UTF-8 text without NUL characters")
	}
}

// CompactJSON returns the JSON text without insignificant white space, so that the same
// values in the same order compare equal byte for byte, or an error if raw is not one JSON
// value. Text that has no such white space is returned as it is (raw itself, not a copy).
func CompactJSON(raw []byte) ([]byte, error) {
	return rawjson.Compact(raw)
}

func validIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > MaxIdempotencyKeyLength {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// ValidJobPattern reports whether p is a job's name, a prefix of one followed by "*", or
// "*" alone.
func ValidJobPattern(p JobPattern) bool {
	prefix, isPrefix := p.Prefix()
	if !isPrefix {
		return ValidName(prefix)
	}
	// A prefix may end in a character that cannot end a name but may continue one ("orders-*").
	return prefix == "" || ValidName(prefix) || ValidName(prefix+"x")
}

// ValidateToken checks a token to create: a valid name, one to
// len(Scopes) distinct scopes, a valid job pattern, and for the participant scope one job
// (not a pattern) and one participant; an expiry, if any, after now.
func ValidateToken(t *Token, now time.Time) error {
	var f fieldErrors
	f.name("name", t.Name)
	if len(t.Scopes) == 0 {
		f.add("scopes", "at least one scope is required: %s", scopeList())
	}
	seen := map[Scope]bool{}
	for i, s := range t.Scopes {
		field := fmt.Sprintf("scopes[%d]", i)
		if !s.Valid() {
			f.add(field, "%q is not a scope: one of %s", s, scopeList())
		} else if seen[s] {
			f.add(field, "%q appears more than once", s)
		}
		seen[s] = true
	}
	if t.Job == "" {
		f.add("job", "is required (a job's name, a prefix of one ending in *, or * for every job), except for an admin token")
	} else if !ValidJobPattern(t.Job) {
		f.add("job", "%q is not a job pattern: a job's name, a prefix of one ending in *, or * for every job", t.Job)
	}
	if seen[ScopeParticipant] {
		if _, isPrefix := t.Job.Prefix(); isPrefix {
			f.add("job", "a token with the participant scope acts in one job: name it, not a pattern")
		}
		if t.Participant == "" {
			f.add("participant", "a token with the participant scope names the participant it acts as")
		} else {
			f.name("participant", t.Participant)
		}
	} else if t.Participant != "" {
		f.add("participant", "only a token with the participant scope names a participant")
	}
	if t.ExpiresAt != nil && !t.ExpiresAt.After(now) {
		f.add("expires_at", "must be in the future")
	}
	return f.err()
}

func scopeList() string {
	names := make([]string, len(Scopes))
	for i, s := range Scopes {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
