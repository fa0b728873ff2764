package api

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

func TestCheckpointBytesBound(t *testing.T) { onEachStore(t, testCheckpointBytesBound) }

// A checkpoint holds at most its bound of committables, all participants' together: the
// vote that would pass it gets 413 and is not recorded; a smaller one still counts.
func testCheckpointBytesBound(t *testing.T) {
	store := testStore(t)
	svc := coordinator.NewService(store, nil, coordinator.WithMaxCheckpointBytes(1000))
	srv := httptest.NewServer(NewHandler(svc, Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute}))
	t.Cleanup(srv.Close)
	b := &bundle{url: srv.URL, store: store}
	b.json(t, "PUT", "/v1/jobs/j", `{"participants":["a","b"]}`).ok(t, 201, nil)
	b.call(t, "POST", "/v1/jobs/j/participants/a/register", "", "").ok(t, 200, nil)
	b.call(t, "POST", "/v1/jobs/j/participants/b/register", "", "").ok(t, 200, nil)
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	committables := func(n int) string { return fmt.Sprintf(`[%q]`, strings.Repeat("x", n-4)) } // n bytes of JSON
	b.json(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/a", `{"epoch":1,"vote":"prepared","committables":`+committables(600)+`}`).ok(t, 200, nil)
	before := b.rawCheckpoint(t, "j", 1)
	r := b.json(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/b", `{"epoch":1,"vote":"prepared","committables":`+committables(401)+`}`)
	var p Problem
	if err := json.Unmarshal(r.body, &p); err != nil || r.status != http.StatusRequestEntityTooLarge || p.Code != "payload_too_large" {
		t.Fatalf("the vote past the bound: %d %s, want 413 payload_too_large", r.status, r.body)
	}
	if after := b.rawCheckpoint(t, "j", 1); after != before {
		t.Fatalf("the refused vote changed the checkpoint:\nbefore %s\nafter  %s", before, after)
	}
	// Exactly at the bound is allowed.
	var cp Checkpoint
	b.json(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/b", `{"epoch":1,"vote":"prepared","committables":`+committables(400)+`}`).ok(t, 200, &cp)
	if cp.Status != Committing {
		t.Fatalf("after a vote within the bound the checkpoint is %s, want committing", cp.Status)
	}
}
