package loadtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCountingTransportKeepsTheStartOfAFailedAnswer: the first failed answer of a kind
// and status is the example, with the start of its body; every one is counted, and the
// caller still reads each body whole.
func TestCountingTransportKeepsTheStartOfAFailedAnswer(t *testing.T) {
	body := `{"code":"too_many_checkpoints","detail":"` + strings.Repeat("x", 2*exampleBodyBytes) + `"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	tr := newCountingTransport(2, false, false)
	client := &http.Client{Transport: tr}
	for range 3 {
		resp, err := client.Post(srv.URL+"/v1/jobs/j/checkpoints", "application/json", bytes.NewReader([]byte("{}")))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || string(got) != body {
			t.Fatalf("the caller read %d bytes (%v), want the whole body of %d", len(got), err, len(body))
		}
	}
	c := tr.snapshot()
	if n := c.statuses["open_checkpoint 409"]; n != 3 {
		t.Errorf("counted %d, want 3 (%v)", n, c.statuses)
	}
	tr.mu.Lock()
	example := tr.examples["open_checkpoint 409"]
	tr.mu.Unlock()
	if !strings.HasPrefix(example, `POST /v1/jobs/j/checkpoints -> "{\"code\":\"too_many_checkpoints\"`) {
		t.Errorf("example %q: want the request and the start of its answer", example)
	}
	if len(example) > exampleBodyBytes+100 {
		t.Errorf("example of %d bytes: want the body cut at %d", len(example), exampleBodyBytes)
	}
}

// TestCountingTransportTellsAnswersAfterTheCallerGaveUp: a failed answer that arrives once
// its request's context has ended is counted under a key of its own.
func TestCountingTransportTellsAnswersAfterTheCallerGaveUp(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer srv.Close()
	tr := newCountingTransport(2, false, false)
	for _, ctx := range []context.Context{context.Background(), endedContext{context.Background()}} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/jobs/j/checkpoints", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	c := tr.snapshot()
	if c.statuses["open_checkpoint 400"] != 1 || c.statuses["open_checkpoint 400"+afterGivingUp] != 1 {
		t.Errorf("counts %v: want one 400 counted plainly and one after the caller gave up", c.statuses)
	}
}

// endedContext reports itself ended (Err) without its Done channel closing: the answer
// still reaches the caller, as one that raced the caller's giving up does.
type endedContext struct{ context.Context }

func (endedContext) Err() error { return context.Canceled }
