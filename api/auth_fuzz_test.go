package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/twophase/coordinator/coordinator"
)

// oneToken is a TokenStore that holds one token, for the fuzz target.
type oneToken struct{ t *coordinator.Token }

func (o oneToken) CreateToken(context.Context, *coordinator.Token, *coordinator.AuditEntry) (*coordinator.Token, error) {
	return nil, coordinator.ErrTokenExists
}
func (o oneToken) GetToken(context.Context, string) (*coordinator.Token, error) { return o.t, nil }
func (o oneToken) ListTokens(context.Context, string, int) ([]*coordinator.Token, error) {
	return []*coordinator.Token{o.t}, nil
}
func (o oneToken) DeleteToken(context.Context, string, *coordinator.AuditEntry) error { return nil }
func (o oneToken) TokensVersion(context.Context) (int64, error)                       { return 1, nil }

// FuzzAuthorizationHeader sends any Authorization header: only "Bearer <the token>" (the
// scheme in any case) gets past authentication, every other gets 401 unauthenticated with
// WWW-Authenticate, never another status, and no answer quotes the header.
func FuzzAuthorizationHeader(f *testing.F) {
	secret := coordinator.NewTokenSecret()
	store := oneToken{&coordinator.Token{Name: "reader", Scopes: []coordinator.Scope{coordinator.ScopeRead}, Job: "*", Digest: coordinator.TokenDigest(secret)}}
	auth := coordinator.NewAuthenticator(store, "", nil)
	if err := auth.Refresh(context.Background()); err != nil {
		f.Fatal(err)
	}
	h := NewHandler(coordinator.NewService(emptyStore{}, nil), Options{Logger: slog.New(slog.DiscardHandler), Auth: auth, AllowedHosts: testHosts})
	for _, seed := range []string{"", "Bearer " + secret, "bearer " + secret, "BEARER  " + secret, "Bearer", "Bearer ", "Basic " + secret,
		"Bearer " + secret + " x", "Bearer " + secret[:len(secret)-1], "Bearer\t" + secret, "Bearer " + strings.ToUpper(secret), "Bearer tpc_\x00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		req := httptest.NewRequest("GET", "/v1/jobs", nil)
		req.Header.Set("Authorization", header)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		scheme, rest, _ := strings.Cut(header, " ")
		valid := strings.EqualFold(scheme, "Bearer") && strings.TrimLeft(rest, " ") == secret
		switch {
		case valid && w.Code != http.StatusOK:
			t.Fatalf("Authorization %q: %d %s, want 200", header, w.Code, w.Body)
		case !valid && w.Code != http.StatusUnauthorized:
			t.Fatalf("Authorization %q: %d %s, want 401", header, w.Code, w.Body)
		case !valid && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer"):
			t.Fatalf("Authorization %q: 401 without WWW-Authenticate: Bearer", header)
		case !valid && len(rest) >= 8 && strings.Contains(w.Body.String(), rest):
			t.Fatalf("Authorization %q: the answer quotes it: %s", header, w.Body)
		}
	})
}
