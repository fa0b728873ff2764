package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// FuzzPositions sends every cursor and checkpoint id a client can choose, built from an
// arbitrary integer, to every route that takes one, through the real PostgreSQL store: an
// id or a position the database never issued is bad input or not found, never a 500. (A
// position is typed int8 wherever it meets SQL: an int4 parameter fails from 2^31 on.)
func FuzzPositions(f *testing.F) {
	for _, seed := range []int64{0, 1, -1, 2, 1<<31 - 1, 1 << 31, 1<<32 + 1, 1 << 53, 1<<63 - 1, -1 << 63} {
		f.Add(seed)
	}
	if testing.Short() {
		f.Skip("needs PostgreSQL")
	}
	store, err := postgres.Open(context.Background(), pgtest.URL(f), postgres.Options{})
	if err != nil {
		f.Fatalf("open store: %v", err)
	}
	f.Cleanup(store.Close)
	svc := coordinator.NewService(store, nil)
	srv := httptest.NewServer(NewHandler(svc, Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute}))
	f.Cleanup(srv.Close)
	// A job with history, so that a position can land among real rows, and an audit.
	send := func(t testing.TB, method, path, body string) int {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, srv.URL+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, got)
		}
		return resp.StatusCode
	}
	if code := send(f, "PUT", "/v1/jobs/orders", `{"participants":["a"]}`); code != 201 {
		f.Fatalf("create the job: %d", code)
	}
	send(f, "POST", "/v1/jobs/orders/participants/a/register", "")
	for id := 1; id <= 3; id++ {
		send(f, "POST", "/v1/jobs/orders/checkpoints", "")
		send(f, "POST", "/v1/jobs/orders/checkpoints/"+strconv.Itoa(id)+"/abort", `{"reason":"fuzz"}`)
	}

	f.Fuzz(func(t *testing.T, n int64) {
		pos := strconv.FormatInt(n, 10)
		var paths []string
		for _, tag := range []string{cursorJobs, cursorTokens, cursorAudit, cursorCheckpoints, cursorAll} {
			c := encodeCursor(tag, pos)
			paths = append(paths,
				"/v1/jobs?cursor="+c,
				"/v1/tokens?cursor="+c,
				"/v1/audit?cursor="+c,
				"/v1/audit?job=orders&cursor="+c,
				"/v1/jobs/orders/checkpoints?cursor="+c,
				"/v1/jobs/orders/checkpoints?status=aborted&cursor="+c,
				"/v1/checkpoints?cursor="+c,
				"/v1/checkpoints?status=aborted&job=ord*&cursor="+c,
			)
		}
		for _, p := range paths {
			send(t, "GET", p, "")
		}
		cp := "/v1/jobs/orders/checkpoints/" + pos
		send(t, "GET", cp, "")
		send(t, "GET", cp+"?participant=a", "")
		send(t, "PUT", cp+"/votes/a", `{"epoch":1,"vote":"abort","reason":"fuzz"}`)
		send(t, "PUT", cp+"/acks/a", `{"epoch":1}`)
		send(t, "POST", cp+"/commit", "")
		send(t, "POST", cp+"/abort", `{"reason":"fuzz"}`)
		send(t, "POST", cp+"/complete", `{"reason":"fuzz"}`)
		// Numbers in bodies and queries that name a position or a duration.
		send(t, "PUT", "/v1/jobs/orders/checkpoints/1/acks/a", fmt.Sprintf(`{"epoch":%d}`, n))
		send(t, "GET", "/v1/checkpoints?older_than_ms="+pos, "")
		send(t, "GET", "/v1/jobs/orders/checkpoints?limit="+pos, "")
	})
}
