package coordinator

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// FuzzTokenSecret: CheckTokenSecret never panics, accepts only what NewTokenSecret's
// format allows, and the Authenticator accepts a string only if it is exactly a known
// secret.
func FuzzTokenSecret(f *testing.F) {
	known := NewTokenSecret()
	admin := strings.Repeat("Z", MinAdminTokenLength)
	for _, seed := range []string{"", known, known[:20], known + "a", strings.ToUpper(known), admin, admin + " ", "tpc_", "Bearer " + known, "tpc_\x00"} {
		f.Add(seed)
	}
	store := &fakeTokens{}
	if _, err := store.CreateToken(context.Background(), &Token{Name: "t", Scopes: []Scope{ScopeRead}, Job: "*", Digest: TokenDigest(known)}, nil); err != nil {
		f.Fatal(err)
	}
	a := NewAuthenticator(store, admin, nil)
	if err := a.Refresh(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckTokenSecret(s) == nil {
			if len(s) != TokenLength || !strings.HasPrefix(s, TokenPrefix) {
				t.Fatalf("CheckTokenSecret accepts %q", s)
			}
			raw, err := secretEncoding.DecodeString(s[len(TokenPrefix):])
			if err != nil || secretEncoding.EncodeToString(raw) != s[len(TokenPrefix):] {
				t.Fatalf("CheckTokenSecret accepts %q, which does not encode back to itself", s)
			}
		}
		p, err := a.Authenticate(context.Background(), s)
		switch {
		case err == nil && s != known && s != admin:
			t.Fatalf("Authenticate accepts %q as %s", s, p.Name())
		case err != nil && (s == known || s == admin):
			t.Fatalf("Authenticate refuses a known secret: %v", err)
		case err != nil && s != "" && len(s) > 3 && strings.Contains(err.Error(), s):
			t.Fatalf("the error quotes the secret: %v", err)
		}
		if err == nil && !bytes.Equal(p.Token().Digest, TokenDigest(s)) {
			t.Fatal("the principal's digest is not the secret's")
		}
	})
}
