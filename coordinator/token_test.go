package coordinator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestJobPattern(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern JobPattern
		job     string
		want    bool
	}{
		{"*", "orders", true},
		{"orders", "orders", true},
		{"orders", "orders-eu", false},
		{"orders", "order", false},
		{"orders*", "orders", true},
		{"orders*", "orders-eu", true},
		{"orders-*", "orders", false},
		{"order_*", "orders", false}, // no wildcard but the final *
		{"order_*", "order_x", true},
	} {
		if got := c.pattern.Matches(c.job); got != c.want {
			t.Errorf("%q.Matches(%q) = %v, want %v", c.pattern, c.job, got, c.want)
		}
	}
	for _, c := range []struct {
		q, p JobPattern
		want bool
	}{
		{"orders", "*", true}, {"orders-*", "orders*", true}, {"orders*", "orders-*", false},
		{"orders", "orders", true}, {"orders", "orders*", true}, {"orders*", "orders", false}, {"*", "orders*", false},
	} {
		if got := c.q.Within(c.p); got != c.want {
			t.Errorf("%q.Within(%q) = %v, want %v", c.q, c.p, got, c.want)
		}
	}
	for p, want := range map[JobPattern]bool{"*": true, "orders": true, "orders-*": true, "o*": true, "": false,
		"**": false, "-x*": false, "a*b": false, "a b": false, JobPattern(strings.Repeat("a", 129)): false, JobPattern(strings.Repeat("a", 128) + "*"): true} {
		if got := ValidJobPattern(p); got != want {
			t.Errorf("ValidJobPattern(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestTokenSecret(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		s := NewTokenSecret()
		if len(s) != TokenLength || !strings.HasPrefix(s, TokenPrefix) || seen[s] {
			t.Fatalf("NewTokenSecret() = %q: want %d characters starting %s, never twice", s, TokenLength, TokenPrefix)
		}
		seen[s] = true
		if err := CheckTokenSecret(s); err != nil {
			t.Fatalf("CheckTokenSecret(%q): %v", s, err)
		}
	}
	s := NewTokenSecret()
	for i := len(TokenPrefix); i < len(s); i++ {
		// Any one character changed breaks the checksum or the encoding.
		for _, c := range "a2z7" {
			if byte(c) == s[i] {
				continue
			}
			mutated := s[:i] + string(c) + s[i+1:]
			if CheckTokenSecret(mutated) == nil {
				t.Fatalf("CheckTokenSecret accepts %q, %q with character %d changed", mutated, s, i)
			}
		}
	}
	for _, bad := range []string{"", TokenPrefix, s[:len(s)-1], s + "a", "xyz_" + s[4:], strings.ToUpper(s), "tpc_" + strings.Repeat("a", 40)} {
		if !errors.Is(CheckTokenSecret(bad), ErrMalformedToken) {
			t.Errorf("CheckTokenSecret(%q) accepted", bad)
		}
	}
	if d := TokenDigest(s); len(d) != 32 || strings.Contains(string(d), s) {
		t.Fatalf("TokenDigest: %x", d)
	}
}

func TestValidateToken(t *testing.T) {
	t.Parallel()
	now := time.Now()
	past, future := now.Add(-time.Second), now.Add(time.Hour)
	ok := []Token{
		{Name: "r", Scopes: []Scope{ScopeRead}, Job: "*"},
		{Name: "p", Scopes: []Scope{ScopeParticipant, ScopeRead}, Job: "orders", Participant: "sink-a", ExpiresAt: &future},
		{Name: "o", Scopes: []Scope{ScopeOperator, ScopeTrigger}, Job: "eu-*"},
	}
	for _, tk := range ok {
		if err := ValidateToken(&tk, now); err != nil {
			t.Errorf("ValidateToken(%+v): %v", tk, err)
		}
	}
	bad := map[string]Token{
		"name":                {Name: "-x", Scopes: []Scope{ScopeRead}, Job: "*"},
		"no scope":            {Name: "x", Job: "*"},
		"unknown scope":       {Name: "x", Scopes: []Scope{"root"}, Job: "*"},
		"scope twice":         {Name: "x", Scopes: []Scope{ScopeRead, ScopeRead}, Job: "*"},
		"job":                 {Name: "x", Scopes: []Scope{ScopeRead}, Job: ""},
		"participant pattern": {Name: "x", Scopes: []Scope{ScopeParticipant}, Job: "orders*", Participant: "a"},
		"no participant":      {Name: "x", Scopes: []Scope{ScopeParticipant}, Job: "orders"},
		"stray participant":   {Name: "x", Scopes: []Scope{ScopeRead}, Job: "orders", Participant: "a"},
		"expired":             {Name: "x", Scopes: []Scope{ScopeRead}, Job: "*", ExpiresAt: &past},
	}
	for what, tk := range bad {
		if err := ValidateToken(&tk, now); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: ValidateToken(%+v) = %v, want invalid_request", what, tk, err)
		}
	}
}

// fakeTokens is a TokenStore in memory that counts its reads.
type fakeTokens struct {
	mu       sync.Mutex
	tokens   map[string]*Token
	version  int64
	lists    int
	versions int
	fail     error
}

func (f *fakeTokens) CreateToken(_ context.Context, t *Token, _ *AuditEntry) (*Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tokens == nil {
		f.tokens = map[string]*Token{}
	}
	cp := *t
	f.tokens[t.Name] = &cp
	f.version++
	return &cp, nil
}
func (f *fakeTokens) GetToken(_ context.Context, name string) (*Token, error) {
	return nil, ErrNotFound
}
func (f *fakeTokens) ListTokens(_ context.Context, _ string, _ int) ([]*Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.fail != nil {
		return nil, f.fail
	}
	var out []*Token
	for _, t := range f.tokens {
		cp := *t
		out = append(out, &cp)
	}
	return out, nil
}
func (f *fakeTokens) DeleteToken(_ context.Context, name string, _ *AuditEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tokens, name)
	f.version++
	return nil
}
func (f *fakeTokens) TokensVersion(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versions++
	return f.version, f.fail
}

func TestAuthenticator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &fakeTokens{}
	tokens := NewTokens(store)
	admin := strings.Repeat("k", 40)
	a := NewAuthenticator(store, admin, nil)
	clock := time.Now()
	a.now = func() time.Time { return clock }
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(ctx, admin)
	if err != nil || p.Name() != AdminTokenName || !p.Admin() || p.Reach() != AllJobs {
		t.Fatalf("the admin token: %v, %v", p, err)
	}
	if _, err := a.Authenticate(ctx, admin+"x"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("the admin token and more: %v, want unauthenticated", err)
	}
	expires := clock.Add(time.Minute)
	_, secret, err := tokens.Create(ctx, Token{Name: "sink-a", Scopes: []Scope{ScopeParticipant}, Job: "orders", Participant: "a", ExpiresAt: &expires})
	if err != nil {
		t.Fatal(err)
	}
	// A token not read yet (created through another coordinator, say) is looked up before
	// it is refused.
	p, err = a.Authenticate(ctx, secret)
	if err != nil {
		t.Fatalf("a stored token: %v", err)
	}
	if !p.ActsAs("orders", "a") || p.ActsAs("orders", "b") || p.ActsAs("orders2", "a") || p.Can(ScopeOperator, "orders") ||
		!p.Reads("orders") || p.Reads("other") || p.ReadsMetrics() {
		t.Fatalf("a participant token's rights are wrong: %+v", p.Token())
	}
	// Unchanged tokens are not read again.
	lists := store.lists
	for range 5 {
		if err := a.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if store.lists != lists {
		t.Fatalf("Refresh read the tokens %d times though their version did not change", store.lists-lists)
	}
	// Expiry, by the clock.
	clock = expires
	if _, err := a.Authenticate(ctx, secret); !errors.Is(err, ErrUnauthenticated) || strings.Contains(err.Error(), secret) {
		t.Fatalf("an expired token: %v, want unauthenticated without the secret", err)
	}
	clock = expires.Add(-time.Second)
	// Revocation ends the principal's context, and only that one.
	_, other, err := tokens.Create(ctx, Token{Name: "reader", Scopes: []Scope{ScopeRead}, Job: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	reader, err := a.Authenticate(ctx, other)
	if err != nil || !reader.ReadsMetrics() {
		t.Fatalf("reader: %v", err)
	}
	if err := tokens.Revoke(ctx, "sink-a"); err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Context().Done():
	default:
		t.Fatal("the revoked token's context is not done")
	}
	if reader.Context().Err() != nil {
		t.Fatal("another token's context ended with the revocation")
	}
	if _, err := a.Authenticate(ctx, secret); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a revoked token: %v, want unauthenticated", err)
	}
	// A store that fails leaves the tokens in force.
	store.fail = errors.New("down")
	if err := a.Refresh(ctx); err == nil {
		t.Fatal("Refresh on a failing store: no error")
	}
	if _, err := a.Authenticate(ctx, other); err != nil {
		t.Fatalf("a valid token while the store is down: %v", err)
	}
	// The configuration's name is reserved.
	store.fail = nil
	if _, _, err := tokens.Create(ctx, Token{Name: AdminTokenName, Scopes: []Scope{ScopeRead}, Job: "*"}); !errors.Is(err, ErrTokenExists) {
		t.Fatalf("creating a token named admin: %v, want token_exists", err)
	}
}

// TestGuessingTokensCostsTheStoreLittle: unknown tokens are looked up in the store before
// they are refused, but look-ups at the same time share one read, and reads start at most
// every LookupInterval, however many guesses arrive.
func TestGuessingTokensCostsTheStoreLittle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &fakeTokens{}
	a := NewAuthenticator(store, "", nil)
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	before := store.versions
	store.mu.Unlock()
	const guessers, each = 200, 5
	start := time.Now()
	var wg sync.WaitGroup
	var accepted atomic.Int64
	for range guessers {
		wg.Go(func() {
			for range each {
				if _, err := a.Authenticate(ctx, NewTokenSecret()); !errors.Is(err, ErrUnauthenticated) {
					accepted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	store.mu.Lock()
	reads := store.versions - before
	store.mu.Unlock()
	if accepted.Load() != 0 {
		t.Fatalf("%d guessed tokens were not refused", accepted.Load())
	}
	if most := int(elapsed/LookupInterval) + 1; reads > most || reads == 0 {
		t.Fatalf("%d guesses read the tokens' version %d times in %v; want from 1 to %d (one every %v at most)",
			guessers*each, reads, elapsed, most, LookupInterval)
	}
	t.Logf("%d guesses in %v: %d reads of the tokens' version", guessers*each, elapsed, reads)
	// A store that cannot be read for an unknown token: unavailable, not unauthenticated.
	store.mu.Lock()
	store.fail = errors.New("down")
	store.mu.Unlock()
	if _, err := a.Authenticate(ctx, NewTokenSecret()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("an unknown token while the store is down: %v, want unavailable", err)
	}
}
