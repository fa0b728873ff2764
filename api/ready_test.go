package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// TestReadyzOnReadOnlyDatabase: on a database that refuses writes (transactions read-only
// by default, as on a standby), /readyz answers 503 saying so, and a write answers 503
// unavailable with Retry-After rather than 500.
func TestReadyzOnReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL := pgtest.URL(t)
	pgtest.SetReadOnlyByDefault(t, dbURL, true)
	store, err := postgres.Open(ctx, dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	srv := httptest.NewServer(NewHandler(coordinator.NewService(store, nil), Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute}))
	t.Cleanup(srv.Close)
	b := &bundle{url: srv.URL, store: store}

	a := b.call(t, "GET", "/readyz", "", "")
	p := a.problem(t, http.StatusServiceUnavailable, "unavailable")
	if p.Detail == nil || !strings.Contains(*p.Detail, "not ready: the database cannot be written") || !strings.Contains(*p.Detail, "read-only") {
		t.Errorf("/readyz detail %v, want why it is not ready", p.Detail)
	}
	if a.header.Get("Retry-After") == "" {
		t.Error("/readyz 503 without Retry-After")
	}
	b.json(t, "PUT", "/v1/jobs/j", `{"participants":["a"]}`).problem(t, http.StatusServiceUnavailable, "unavailable")
	b.call(t, "GET", "/healthz", "", "").ok(t, 200, nil)
}
