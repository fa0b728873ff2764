package coordinator

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Principal is who a request comes from: the token it carried. Its methods answer what the
// token allows (docs/protocol.md, "Access control"); the api package asks them route by
// route.
type Principal struct {
	token *Token
	// ctx is cancelled once the token is revoked (deleted) or replaced.
	ctx    context.Context
	revoke context.CancelFunc
}

func newPrincipal(t *Token) *Principal {
	ctx, cancel := context.WithCancel(context.Background())
	return &Principal{token: t, ctx: ctx, revoke: cancel}
}

// Name is the token's name, as decided_by and the audit show it.
func (p *Principal) Name() string { return p.token.Name }

// Token returns the token's view (its digest included; never its secret).
func (p *Principal) Token() *Token { return p.token }

// Context is cancelled when the token is revoked: a request that waits (a long-poll) ends
// then rather than go on serving a token nobody accepts any more. It carries no values.
func (p *Principal) Context() context.Context { return p.ctx }

// Admin reports whether the token has the admin scope: everything, on every job, and tokens.
func (p *Principal) Admin() bool { return p.token.Has(ScopeAdmin) }

// Reach is the pattern of the jobs the token may read: every job for an admin, else its
// job pattern (every scope includes reading its jobs).
func (p *Principal) Reach() JobPattern {
	if p.Admin() {
		return AllJobs
	}
	return p.token.Job
}

// Reads reports whether the token may read job.
func (p *Principal) Reads(job string) bool { return p.Reach().Matches(job) }

// Can reports whether the token has scope on job: the scope itself (or admin) with a
// pattern that matches job. The participant scope is asked with ActsAs instead.
func (p *Principal) Can(scope Scope, job string) bool {
	return p.Admin() || p.token.Has(scope) && p.token.Job.Matches(job)
}

// ActsAs reports whether the token may act as participant of job (register, vote, ack):
// the participant scope for that very participant of that very job, or admin.
func (p *Principal) ActsAs(job, participant string) bool {
	return p.Admin() || p.token.Has(ScopeParticipant) && string(p.token.Job) == job && p.token.Participant == participant
}

// Participant is the participant a token with the participant scope acts as in job, and
// false for every other token and job.
func (p *Principal) Participant(job string) (string, bool) {
	if p.token.Has(ScopeParticipant) && string(p.token.Job) == job {
		return p.token.Participant, true
	}
	return "", false
}

// ReadsMetrics reports whether the token may read the metrics, which cover every job: a
// read right on every job.
func (p *Principal) ReadsMetrics() bool { return p.Reach() == AllJobs }

// Authenticator tells a token's principal from its secret, from memory: it keeps every
// stored token's digest and reads them again from the store when they change (Run), so
// that a request costs no database round trip and a revocation on any coordinator takes
// effect here within RefreshInterval.
type Authenticator struct {
	store  TokenStore
	logger *slog.Logger
	now    func() time.Time
	// admin is the configured admin token's principal and digest; nil without one.
	admin       *Principal
	adminDigest []byte

	mu       sync.RWMutex
	loaded   bool
	version  int64
	byDigest map[[32]byte]*Principal

	// lookups are the refreshes that unknown tokens ask for, coalesced (lookUp).
	lookups struct {
		sync.Mutex
		started, done int64         // generations: of the last refresh started, and ended
		running       chan struct{} // closed when the running one ends; nil when none runs
		last          time.Time     // when the last one started
		err           error         // the last one's result
	}
}

// LookupInterval is the least time between two reads of the tokens that unknown tokens ask
// for: a token created through another coordinator a moment ago is found in the database
// before its first request is refused, and guessing tokens, however fast, costs the
// database at most one read of the tokens' version per interval per coordinator (and a
// read of the tokens only when they changed).
const LookupInterval = 50 * time.Millisecond

// RefreshInterval is how often an Authenticator asks the store whether the tokens changed:
// a revocation takes effect on every coordinator within about this much, well within the
// second the protocol allows.
const RefreshInterval = 250 * time.Millisecond

// NewAuthenticator returns an Authenticator of the tokens in store, and of the admin token
// adminSecret (checked with CheckAdminToken by the caller), named AdminTokenName. Call Refresh
// once before serving, then Run.
func NewAuthenticator(store TokenStore, adminSecret string, logger *slog.Logger) *Authenticator {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{store: store, logger: logger, now: time.Now, byDigest: map[[32]byte]*Principal{}}
	if adminSecret != "" {
		a.adminDigest = TokenDigest(adminSecret)
		// Never revoked: only a restart changes it.
		a.admin = newPrincipal(&Token{Name: AdminTokenName, Scopes: []Scope{ScopeAdmin}, Job: AllJobs, Digest: a.adminDigest})
	}
	return a
}

// Authenticate returns the principal of secret, or ErrUnauthenticated (an *Error whose
// message never quotes the secret) when it is no token of this coordinator, was revoked or
// has expired. A well-formed token that is not known here is looked up in the store first
// (lookUp), so that a token just created through another coordinator is accepted at once;
// when the store cannot be read for it, the error is ErrUnavailable.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (*Principal, error) {
	p, err := a.authenticate(secret)
	if err != errUnknownToken { // known, or refused for what it is (malformed, expired)
		return p, err
	}
	if err := a.lookUp(ctx); err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: "the tokens could not be read to check this one; retry", Err: err}
	}
	return a.authenticate(secret)
}

// errUnknownToken is the cause of the 401 of a well-formed token that is not known here.
var errUnknownToken = unauthenticated("the token is unknown or was revoked")

func (a *Authenticator) authenticate(secret string) (*Principal, error) {
	if secret == "" || len(secret) > MaxTokenLength {
		return nil, unauthenticated("the token is missing or malformed")
	}
	digest := TokenDigest(secret)
	if a.admin != nil && subtle.ConstantTimeCompare(digest, a.adminDigest) == 1 {
		return a.admin, nil
	}
	if CheckTokenSecret(secret) != nil {
		return nil, unauthenticated("the token is not one of this coordinator's")
	}
	a.mu.RLock()
	p := a.byDigest[[32]byte(digest)]
	a.mu.RUnlock()
	// The map finds the entry by digest; the comparison that accepts it takes the same
	// time whatever the bytes.
	if p == nil || subtle.ConstantTimeCompare(p.token.Digest, digest) != 1 {
		return nil, errUnknownToken
	}
	if p.token.Expired(a.now()) {
		return nil, unauthenticated(fmt.Sprintf("the token %s has expired", p.token.Name))
	}
	return p, nil
}

func unauthenticated(msg string) *Error { return &Error{Code: CodeUnauthenticated, Message: msg} }

// lookUp returns once a refresh of the tokens that started after it was called has ended,
// with that refresh's error. Callers at the same time share refreshes, and refreshes start
// at most every LookupInterval, so that the store's load does not grow with the rate of
// unknown tokens.
func (a *Authenticator) lookUp(ctx context.Context) error {
	l := &a.lookups
	l.Lock()
	target := l.started + 1
	for l.done < target {
		if l.running != nil {
			ch := l.running
			l.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			l.Lock()
			continue
		}
		if wait := l.last.Add(LookupInterval).Sub(time.Now()); wait > 0 {
			l.Unlock()
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			}
			l.Lock()
			continue
		}
		l.started++
		gen, ch := l.started, make(chan struct{})
		l.running, l.last = ch, time.Now()
		l.Unlock()
		// Shared by every caller waiting: not ended by this caller's request.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := a.Refresh(rctx)
		cancel()
		l.Lock()
		l.done, l.err, l.running = gen, err, nil
		close(ch)
	}
	err := l.err
	l.Unlock()
	return err
}

// Refresh reads the tokens again if they changed since the last read. Tokens that are
// gone (revoked) are refused from its return on, and their waiting requests are told
// (Principal.Context).
func (a *Authenticator) Refresh(ctx context.Context) error {
	// The version is read before the tokens: a change committed between the two is read
	// now, and read again at the next refresh, which sees a higher version.
	version, err := a.store.TokensVersion(ctx)
	if err != nil {
		return fmt.Errorf("read the tokens' version: %w", err)
	}
	a.mu.RLock()
	current := a.loaded && version == a.version
	a.mu.RUnlock()
	if current {
		return nil
	}
	tokens, err := a.store.ListTokens(ctx, "", 0)
	if err != nil {
		return fmt.Errorf("read the tokens: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	next := make(map[[32]byte]*Principal, len(tokens))
	for _, t := range tokens {
		if len(t.Digest) != 32 {
			continue
		}
		key := [32]byte(t.Digest)
		if old := a.byDigest[key]; old != nil && sameToken(old.token, t) {
			next[key] = old // its waiters go on
			continue
		}
		next[key] = newPrincipal(t)
	}
	for key, old := range a.byDigest {
		if next[key] != old {
			old.revoke()
		}
	}
	a.byDigest, a.version, a.loaded = next, version, true
	return nil
}

func sameToken(a, b *Token) bool {
	return a.Name == b.Name && slices.Equal(a.Scopes, b.Scopes) && a.Job == b.Job && a.Participant == b.Participant &&
		(a.ExpiresAt == nil) == (b.ExpiresAt == nil) && (a.ExpiresAt == nil || a.ExpiresAt.Equal(*b.ExpiresAt))
}

// Run refreshes the tokens every RefreshInterval until ctx ends. A store that cannot be
// read leaves the tokens as they were (a revocation needs the database anyway); the
// failure is logged at most every 30 seconds.
func (a *Authenticator) Run(ctx context.Context) {
	ticker := time.NewTicker(RefreshInterval)
	defer ticker.Stop()
	f := failures{what: "refresh tokens (the last ones read stay in force)"}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		err := a.Refresh(ctx)
		if ctx.Err() != nil {
			return
		}
		f.note(a.logger, a.now(), err)
	}
}
