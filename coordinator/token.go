package coordinator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"time"
)

// Scope is one kind of right a token gives, on the jobs its pattern matches.
type Scope string

// The scopes (docs/protocol.md, "Access control"). Every scope but admin includes read on
// its jobs.
const (
	// ScopeRead allows every GET on the token's jobs.
	ScopeRead Scope = "read"
	// ScopeParticipant allows one participant of one job to register, read what it owes,
	// vote and ack as itself, and abort a checkpoint it is expected in.
	ScopeParticipant Scope = "participant"
	// ScopeTrigger allows opening checkpoints.
	ScopeTrigger Scope = "trigger"
	// ScopeOperator allows creating, changing and deleting jobs, opening checkpoints and
	// deciding them by hand.
	ScopeOperator Scope = "operator"
	// ScopeAdmin allows everything on every job, and managing tokens.
	ScopeAdmin Scope = "admin"
)

// Scopes lists every scope, in the order documentation shows them.
var Scopes = []Scope{ScopeRead, ScopeParticipant, ScopeTrigger, ScopeOperator, ScopeAdmin}

// Valid reports whether s is one of Scopes.
func (s Scope) Valid() bool { return slices.Contains(Scopes, s) }

// JobPattern selects jobs: a job's name, a prefix ending in "*", or "*" for every job.
type JobPattern string

// AllJobs matches every job.
const AllJobs JobPattern = "*"

// Prefix returns the part before the "*" and true when p is a prefix pattern ("*" is the
// empty prefix), or p itself and false when it names one job.
func (p JobPattern) Prefix() (string, bool) {
	if s, ok := strings.CutSuffix(string(p), "*"); ok {
		return s, true
	}
	return string(p), false
}

// Matches reports whether p selects job.
func (p JobPattern) Matches(job string) bool {
	if prefix, ok := p.Prefix(); ok {
		return strings.HasPrefix(job, prefix)
	}
	return job == string(p)
}

// Within reports whether every job that q matches p also matches: then a list that a
// caller restricted to q shows nothing outside p.
func (q JobPattern) Within(p JobPattern) bool {
	pp, pIsPrefix := p.Prefix()
	if !pIsPrefix {
		return q == p
	}
	qp, _ := q.Prefix()
	return strings.HasPrefix(qp, pp)
}

// Narrow returns the narrower of q and p when one is within the other, and false when the
// two select no job in common, or overlap without either being within the other (which
// two name-or-prefix patterns cannot do).
func (q JobPattern) Narrow(p JobPattern) (JobPattern, bool) {
	switch {
	case q.Within(p):
		return q, true
	case p.Within(q):
		return p, true
	}
	return "", false
}

// Token is a bearer token as stored: never its secret, only the secret's digest.
type Token struct {
	Name   string
	Scopes []Scope
	// Job is the pattern of the jobs the scopes apply to (admin applies to every job).
	Job JobPattern
	// Participant is the one participant a participant scope acts as; empty without one.
	Participant string
	// ExpiresAt, when set, is when the token stops being accepted.
	ExpiresAt *time.Time
	CreatedAt time.Time
	// Digest is TokenDigest of the secret.
	Digest []byte
}

// Has reports whether t has scope s.
func (t *Token) Has(s Scope) bool { return slices.Contains(t.Scopes, s) }

// Expired reports whether t is past its expiry at now.
func (t *Token) Expired(now time.Time) bool { return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt) }

// TokenStore keeps tokens. Both stores implement it; every coordinator on a database sees
// the same tokens.
//
// Errors: ErrNotFound (unwrapped) for a token that does not exist, ErrTokenExists for a
// name already taken, an error wrapping ErrUnavailable when the database cannot be reached.
type TokenStore interface {
	// CreateToken stores t. Its CreatedAt is set by the store, from the database's clock.
	// audit, when not nil, is written in the same transaction (At: the database's clock).
	CreateToken(ctx context.Context, t *Token, audit *AuditEntry) (*Token, error)
	// GetToken returns the token named name.
	GetToken(ctx context.Context, name string) (*Token, error)
	// ListTokens returns up to limit tokens (every one when limit is 0) named after after,
	// by name.
	ListTokens(ctx context.Context, after string, limit int) ([]*Token, error)
	// DeleteToken deletes the token named name: from then on, TokensVersion is higher.
	// audit, when not nil, is written in the same transaction.
	DeleteToken(ctx context.Context, name string, audit *AuditEntry) error
	// TokensVersion is a number that grows with every change of the tokens, so that a
	// process that keeps them in memory reads them again only when they changed.
	TokensVersion(ctx context.Context) (int64, error)
}

// AdminTokenName is the name of the admin token given in the configuration
// (--admin-token-file): decided_by and the audit show it, and no stored token may take it.
const AdminTokenName = "admin"

// Secrets of stored tokens: TokenPrefix, then secretRandomBytes of crypto/rand and a
// CRC-32 of them, in lower-case base32 without padding. The prefix lets secret scanners
// recognise a leaked token, and the checksum lets them (and the coordinator) tell a token
// from a random string of the same shape without asking the database.
const (
	TokenPrefix       = "tpc_"
	secretRandomBytes = 21 // 168 bits; with the checksum, 25 bytes: 40 base32 characters
	// TokenLength is the length of a stored token's secret.
	TokenLength = len(TokenPrefix) + 40
	// MinAdminTokenLength bounds the admin token of the configuration from below: 32
	// characters of hex or base64 hold at least 128 random bits.
	MinAdminTokenLength = 32
	// MaxTokenLength bounds what an Authorization header may carry as a token.
	MaxTokenLength = 512
)

var secretEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewTokenSecret returns a new secret of a stored token.
func NewTokenSecret() string {
	var buf [secretRandomBytes + 4]byte
	_, _ = rand.Read(buf[:secretRandomBytes]) // crypto/rand never fails (Go 1.24+)
	binary.BigEndian.PutUint32(buf[secretRandomBytes:], crc32.ChecksumIEEE(buf[:secretRandomBytes]))
	return TokenPrefix + secretEncoding.EncodeToString(buf[:])
}

// ErrMalformedToken is what CheckTokenSecret says of a string that is not a stored token's
// secret. It never holds the string.
var ErrMalformedToken = errors.New("not a token of this coordinator (tpc_ followed by 40 base32 characters with a valid checksum)")

// CheckTokenSecret tells whether s has the shape of a secret NewTokenSecret makes, its
// checksum included.
func CheckTokenSecret(s string) error {
	body, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok || len(s) != TokenLength {
		return ErrMalformedToken
	}
	raw, err := secretEncoding.DecodeString(body)
	if err != nil || len(raw) != secretRandomBytes+4 {
		return ErrMalformedToken
	}
	if binary.BigEndian.Uint32(raw[secretRandomBytes:]) != crc32.ChecksumIEEE(raw[:secretRandomBytes]) {
		return ErrMalformedToken
	}
	return nil
}

// TokenDigest is what the database keeps of a secret: its SHA-256. A secret holds at least
// 128 random bits, so a fast hash is enough; nothing can be guessed from the digest.
func TokenDigest(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// CheckAdminToken tells whether s may serve as the configuration's admin token: at least
// MinAdminTokenLength printable ASCII characters, no spaces. It never quotes s.
func CheckAdminToken(s string) error {
	if len(s) < MinAdminTokenLength || len(s) > MaxTokenLength {
		return fmt.Errorf("the admin token must be %d to %d characters (e.g. the output of 'openssl rand -hex 32'), not %d",
			MinAdminTokenLength, MaxTokenLength, len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return fmt.Errorf("the admin token must be printable ASCII without spaces; character %d is not", i+1)
		}
	}
	return nil
}

// Tokens manages the tokens of a store: what POST, GET and DELETE /v1/tokens do, and
// `coordinator token` on the database directly.
type Tokens struct {
	store TokenStore
	now   func() time.Time
}

// NewTokens returns the token management of store.
func NewTokens(store TokenStore) *Tokens { return &Tokens{store: store, now: time.Now} }

// Create validates t (ValidateToken), gives it a new secret and stores it with the
// secret's digest. It returns the token as stored and its secret, which is nowhere else:
// the caller shows it once. An admin token that names no job is given "*": admin covers
// every job whatever its pattern. ErrTokenExists if the name is taken.
func (m *Tokens) Create(ctx context.Context, t Token) (*Token, string, error) {
	if t.Job == "" && t.Has(ScopeAdmin) {
		t.Job = AllJobs
	}
	if err := ValidateToken(&t, m.now()); err != nil {
		return nil, "", err
	}
	if t.Name == AdminTokenName {
		return nil, "", reject(CodeTokenExists, nil, "%s is the name of the configured admin token; choose another", AdminTokenName)
	}
	secret := NewTokenSecret()
	t.Digest = TokenDigest(secret)
	audit := auditEntry(ctx, AuditTokenCreated, "", 0, "")
	audit.Subject = t.Name
	out, err := m.store.CreateToken(ctx, &t, &audit)
	if err != nil {
		return nil, "", fmt.Errorf("create token %s: %w", t.Name, err)
	}
	return out, secret, nil
}

// Get returns the token named name; not_found if there is none.
func (m *Tokens) Get(ctx context.Context, name string) (*Token, error) {
	if err := ValidateName("name", name); err != nil {
		return nil, err
	}
	t, err := m.store.GetToken(ctx, name)
	if err == ErrNotFound {
		return nil, reject(CodeNotFound, nil, "there is no token named %s", name)
	}
	return t, err
}

// List returns a page of tokens by name after the given one, and whether more follow.
func (m *Tokens) List(ctx context.Context, after string, limit int) ([]*Token, bool, error) {
	var f fieldErrors
	validatePageSize(&f, limit)
	if err := f.err(); err != nil {
		return nil, false, err
	}
	tokens, err := m.store.ListTokens(ctx, after, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("list tokens: %w", err)
	}
	more := len(tokens) > limit
	if more {
		tokens = tokens[:limit]
	}
	return tokens, more, nil
}

// Revoke deletes the token named name: every coordinator on the database refuses it
// within a second. not_found if there is none.
func (m *Tokens) Revoke(ctx context.Context, name string) error {
	if err := ValidateName("name", name); err != nil {
		return err
	}
	audit := auditEntry(ctx, AuditTokenRevoked, "", 0, "")
	audit.Subject = name
	err := m.store.DeleteToken(ctx, name, &audit)
	if err == ErrNotFound {
		return reject(CodeNotFound, nil, "there is no token named %s", name)
	}
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", name, err)
	}
	return nil
}
