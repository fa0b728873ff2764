package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// Job patterns in lists, and the TokenStore half of a store.

func testListJobsPattern(t *testing.T, b *bundle) {
	// "_" and "%" would be wildcards in a LIKE; a prefix is matched as it is.
	for _, name := range []string{"orders", "orders-eu", "orders-us", "ordersX", "order_s", "payments", "o"} {
		b.putJob(name, config("a"))
	}
	for _, c := range []struct {
		pattern coordinator.JobPattern
		want    []string
	}{
		{"", []string{"o", "order_s", "orders", "orders-eu", "orders-us", "ordersX", "payments"}},
		{"*", []string{"o", "order_s", "orders", "orders-eu", "orders-us", "ordersX", "payments"}},
		{"orders-*", []string{"orders-eu", "orders-us"}},
		{"orders*", []string{"orders", "orders-eu", "orders-us", "ordersX"}},
		{"order_*", []string{"order_s"}},
		{"orders", []string{"orders"}},
		{"order", []string{}},
		{"nothing*", []string{}},
	} {
		jobs, err := b.store.ListJobs(b.ctx, c.pattern, "", 100)
		if err != nil {
			t.Fatalf("ListJobs(%q): %v", c.pattern, err)
		}
		if got := jobNames(jobs); !slices.Equal(got, c.want) {
			t.Errorf("ListJobs(%q) = %v, want %v", c.pattern, got, c.want)
		}
	}
	// Paging within a pattern.
	jobs, err := b.store.ListJobs(b.ctx, "orders*", "orders", 2)
	if err != nil || !slices.Equal(jobNames(jobs), []string{"orders-eu", "orders-us"}) {
		t.Fatalf("ListJobs(orders*, after orders, 2) = %v, %v; want orders-eu, orders-us", jobNames(jobs), err)
	}
}

func testListCheckpointsPattern(t *testing.T, b *bundle) {
	for _, name := range []string{"eu-orders", "eu-payments", "us-orders", "eu_x"} {
		b.putJob(name, config("a"))
		b.insert(name, nil)
		b.insert(name, nil)
	}
	for _, c := range []struct {
		pattern coordinator.JobPattern
		want    []string
	}{
		{"", []string{"eu-orders/1", "eu-orders/2", "eu-payments/1", "eu-payments/2", "us-orders/1", "us-orders/2", "eu_x/1", "eu_x/2"}},
		{"eu-*", []string{"eu-orders/1", "eu-orders/2", "eu-payments/1", "eu-payments/2"}},
		{"us-orders", []string{"us-orders/1", "us-orders/2"}},
		{"eu_*", []string{"eu_x/1", "eu_x/2"}},
		{"x*", nil},
	} {
		cps, err := b.store.ListCheckpoints(b.ctx, coordinator.CheckpointQuery{Jobs: c.pattern, Limit: 100})
		if err != nil {
			t.Fatalf("ListCheckpoints(%q): %v", c.pattern, err)
		}
		wantIDs(t, "ListCheckpoints("+string(c.pattern)+")", cps, c.want...)
	}
	// A page is a page of what the pattern selects, not filtered after the limit.
	cps, err := b.store.ListCheckpoints(b.ctx, coordinator.CheckpointQuery{Jobs: "eu_*", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "ListCheckpoints(eu_*, limit 1)", cps, "eu_x/1")
}

func tokenStore(t *testing.T, b *bundle) coordinator.TokenStore {
	ts, ok := b.store.(coordinator.TokenStore)
	if !ok {
		t.Fatalf("%T does not implement coordinator.TokenStore", b.store)
	}
	return ts
}

func newToken(name string, scopes ...coordinator.Scope) *coordinator.Token {
	return &coordinator.Token{Name: name, Scopes: scopes, Job: "orders", Digest: coordinator.TokenDigest(coordinator.NewTokenSecret())}
}

func wantToken(t *testing.T, what string, got, want *coordinator.Token) {
	t.Helper()
	if got.Name != want.Name || !slices.Equal(got.Scopes, want.Scopes) || got.Job != want.Job ||
		got.Participant != want.Participant || !bytes.Equal(got.Digest, want.Digest) ||
		(got.ExpiresAt == nil) != (want.ExpiresAt == nil) || got.ExpiresAt != nil && !got.ExpiresAt.Equal(*want.ExpiresAt) {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

func testTokensRoundTrip(t *testing.T, b *bundle) {
	ts := tokenStore(t, b)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	want := &coordinator.Token{Name: "sink-a", Scopes: []coordinator.Scope{coordinator.ScopeParticipant, coordinator.ScopeRead},
		Job: "orders", Participant: "sink-a", ExpiresAt: &expires, Digest: coordinator.TokenDigest(coordinator.NewTokenSecret())}
	before := time.Now().Add(-time.Minute)
	created, err := ts.CreateToken(b.ctx, want, nil)
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	wantToken(t, "CreateToken's answer", created, want)
	if created.CreatedAt.Before(before) || created.CreatedAt.After(time.Now().Add(time.Minute)) || created.CreatedAt.Location() != time.UTC {
		t.Fatalf("CreatedAt %v, want about now, in UTC", created.CreatedAt)
	}
	got, err := ts.GetToken(b.ctx, "sink-a")
	if err != nil {
		t.Fatalf("GetToken: %v", err)
	}
	wantToken(t, "GetToken", got, want)
	if !got.CreatedAt.Equal(created.CreatedAt) {
		t.Fatalf("GetToken's CreatedAt %v, CreateToken said %v", got.CreatedAt, created.CreatedAt)
	}
	if _, err := ts.GetToken(b.ctx, "nobody"); err != coordinator.ErrNotFound {
		t.Fatalf("GetToken of a missing token: %v, want ErrNotFound itself", err)
	}
	// Without expiry or participant.
	plain := newToken("reader", coordinator.ScopeRead)
	plain.Job = "*"
	if _, err := ts.CreateToken(b.ctx, plain, nil); err != nil {
		t.Fatal(err)
	}
	got, err = ts.GetToken(b.ctx, "reader")
	if err != nil {
		t.Fatal(err)
	}
	wantToken(t, "GetToken of a token without expiry", got, plain)
}

func testTokensUnique(t *testing.T, b *bundle) {
	ts := tokenStore(t, b)
	first := newToken("t", coordinator.ScopeRead)
	if _, err := ts.CreateToken(b.ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	v, err := ts.TokensVersion(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	again := newToken("t", coordinator.ScopeAdmin)
	if _, err := ts.CreateToken(b.ctx, again, nil); !errors.Is(err, coordinator.ErrTokenExists) {
		t.Fatalf("CreateToken under a taken name: %v, want token_exists", err)
	}
	sameSecret := newToken("other", coordinator.ScopeRead)
	sameSecret.Digest = first.Digest
	if _, err := ts.CreateToken(b.ctx, sameSecret, nil); err == nil {
		t.Fatal("CreateToken with a digest taken: no error")
	}
	got, err := ts.GetToken(b.ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	wantToken(t, "the first token after refused creations", got, first)
	if v2, err := ts.TokensVersion(b.ctx); err != nil || v2 != v {
		t.Fatalf("TokensVersion after refused creations: %d, %v; want %d unchanged", v2, err, v)
	}
	if list, err := ts.ListTokens(b.ctx, "", 0); err != nil || len(list) != 1 {
		t.Fatalf("ListTokens after refused creations: %d tokens, %v; want 1", len(list), err)
	}
}

func testTokensDeleteAndVersion(t *testing.T, b *bundle) {
	ts := tokenStore(t, b)
	v0, err := ts.TokensVersion(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.CreateToken(b.ctx, newToken("t", coordinator.ScopeRead), nil); err != nil {
		t.Fatal(err)
	}
	v1, err := ts.TokensVersion(b.ctx)
	if err != nil || v1 <= v0 {
		t.Fatalf("TokensVersion after a creation: %d, %v; want more than %d", v1, err, v0)
	}
	if err := ts.DeleteToken(b.ctx, "nobody", nil); err != coordinator.ErrNotFound {
		t.Fatalf("DeleteToken of a missing token: %v, want ErrNotFound itself", err)
	}
	if v, _ := ts.TokensVersion(b.ctx); v != v1 {
		t.Fatalf("TokensVersion after deleting nothing: %d, want %d", v, v1)
	}
	if err := ts.DeleteToken(b.ctx, "t", nil); err != nil {
		t.Fatalf("DeleteToken: %v", err)
	}
	v2, err := ts.TokensVersion(b.ctx)
	if err != nil || v2 <= v1 {
		t.Fatalf("TokensVersion after a deletion: %d, %v; want more than %d", v2, err, v1)
	}
	if _, err := ts.GetToken(b.ctx, "t"); err != coordinator.ErrNotFound {
		t.Fatalf("GetToken after DeleteToken: %v, want ErrNotFound", err)
	}
	// The name is free again, with another secret.
	if _, err := ts.CreateToken(b.ctx, newToken("t", coordinator.ScopeRead), nil); err != nil {
		t.Fatalf("CreateToken under a revoked token's name: %v", err)
	}
}

func testTokensListPages(t *testing.T, b *bundle) {
	ts := tokenStore(t, b)
	names := []string{"b", "A", "a", "c-1", "c_2"}
	for _, n := range names {
		if _, err := ts.CreateToken(b.ctx, newToken(n, coordinator.ScopeRead), nil); err != nil {
			t.Fatal(err)
		}
	}
	all, err := ts.ListTokens(b.ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range all {
		got = append(got, tk.Name)
	}
	want := []string{"A", "a", "b", "c-1", "c_2"} // byte order
	if !slices.Equal(got, want) {
		t.Fatalf("ListTokens = %v, want %v", got, want)
	}
	var paged []string
	after := ""
	for {
		page, err := ts.ListTokens(b.ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("ListTokens(limit 2) returned %d", len(page))
		}
		for _, tk := range page {
			paged = append(paged, tk.Name)
		}
		after = page[len(page)-1].Name
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("ListTokens page by page = %v, want %v", paged, want)
	}
}

func testStats(t *testing.T, b *bundle) {
	st, err := b.store.Stats(b.ctx, true)
	if err != nil || len(st.Open) != 0 || len(st.LastCommitted) != 0 {
		t.Fatalf("Stats of an empty store: %+v, %v", st, err)
	}
	b.putJob("a", withMax(config("p"), 5))
	b.putJob("b", config("p"))
	b.putJob("idle", config("p"))
	b.insert("a", nil)
	b.insert("a", nil)
	b.insert("a", nil)
	b.insert("a", nil)
	b.insert("b", nil)
	b.decide("a", 1, coordinator.StatusCommitted, "")
	b.decide("a", 2, coordinator.StatusCommitting, "")
	b.decide("a", 4, coordinator.StatusAborted, "x")
	b.decide("b", 1, coordinator.StatusAborted, "x")
	st, err = b.store.Stats(b.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range st.Open {
		got = append(got, fmt.Sprintf("%s %s %d", o.Job, o.Status, o.Count))
		if o.Job == "a" && o.Status == coordinator.StatusCommitting && !sameTime(o.Oldest, b.checkpoint("a", 2).CreatedAt) {
			t.Errorf("oldest committing of a: %v, want checkpoint 2's opening %v", o.Oldest, b.checkpoint("a", 2).CreatedAt)
		}
		if o.Job == "a" && o.Status == coordinator.StatusPreparing && !sameTime(o.Oldest, b.checkpoint("a", 3).CreatedAt) {
			t.Errorf("oldest preparing of a: %v, want checkpoint 3's opening", o.Oldest)
		}
	}
	slices.Sort(got)
	if want := []string{"a committing 1", "a preparing 1"}; !slices.Equal(got, want) {
		t.Fatalf("Stats.Open = %v, want %v", got, want)
	}
	if len(st.LastCommitted) != 1 || st.LastCommitted["a"] != 2 {
		t.Fatalf("Stats.LastCommitted = %v, want a: 2 only (b aborted its only one, idle has none)", st.LastCommitted)
	}
	// Without the last committed ones: the same open checkpoints, no last committed.
	without, err := b.store.Stats(b.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(without.LastCommitted) != 0 || !slices.Equal(without.Open, st.Open) {
		t.Fatalf("Stats without the last committed: %+v, want Open %v and no LastCommitted", without, st.Open)
	}
}
