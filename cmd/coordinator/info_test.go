package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
	"github.com/twophase/coordinator/store/sqlite"
)

// TestInfoAnswersTheWiring: a running coordinator's GET /v1/info names its build, its
// store and its schema, on each store, and nothing of the database's address or password,
// nor of the data directory.
func TestInfoAnswersTheWiring(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw") // the test server trusts: the password is only carried
	dir := t.TempDir()
	for _, c := range []struct {
		store, arg string
		schema     uint
		hidden     []string
	}{
		{"postgres", "--database-url=" + u.String(), postgres.SchemaVersion, []string{"s3cret-pw", u.Host, u.Hostname(), strings.TrimPrefix(u.Path, "/")}},
		{"embedded", "--data-dir=" + dir, sqlite.SchemaVersion, []string{dir}},
	} {
		t.Run(c.store, func(t *testing.T) {
			t.Parallel()
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			base, _, exit := started(t, ctx, c.store, c.arg)
			var info map[string]any
			get(t, base+"/v1/info", http.StatusOK, &info)
			want := map[string]any{"version": buildVersion(), "go_version": goVersion(), "store": c.store,
				"schema_version": float64(c.schema), "schema_expected": float64(c.schema)}
			if len(info) != len(want) {
				t.Errorf("GET /v1/info = %v, want exactly %v", info, want)
			}
			for k, v := range want {
				if info[k] != v {
					t.Errorf("GET /v1/info: %s = %v, want %v", k, info[k], v)
				}
			}
			resp, err := http.Get(base + "/v1/info")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, secret := range c.hidden {
				if strings.Contains(string(body), secret) {
					t.Errorf("GET /v1/info shows %q: %s", secret, body)
				}
			}
			stop()
			<-exit
		})
	}
}

func newTestWatch(read func() (uint, error), readAt time.Time) *schemaWatch {
	return &schemaWatch{read: read, rereadAfter: time.Hour, wait: 10 * time.Second,
		logger: slog.New(slog.DiscardHandler), version: 3, readAt: readAt}
}

// TestSchemaWatch: the version found at start-up is answered until it is older than
// rereadAfter; then a request reads it again and answers the new one, and the next
// requests within rereadAfter do not read it.
func TestSchemaWatch(t *testing.T) {
	t.Parallel()
	var reads atomic.Int32
	read := func() (uint, error) { reads.Add(1); return 4, nil }

	fresh := newTestWatch(read, time.Now())
	if v := fresh.current(context.Background()); v != 3 || reads.Load() != 0 {
		t.Errorf("fresh reading: version %d after %d reads, want 3 and none", v, reads.Load())
	}

	stale := newTestWatch(read, time.Now().Add(-2*time.Hour))
	for range 5 {
		if v := stale.current(context.Background()); v != 4 {
			t.Errorf("stale reading: version %d, want the new 4", v)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads for 5 requests within rereadAfter, want 1", n)
	}
}

// TestSchemaWatchDoesNotWaitLong: while the database is slow to answer, requests answer the
// last version after wait, and share the one reading under way; a failed reading keeps the
// last version.
func TestSchemaWatchDoesNotWaitLong(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var reads atomic.Int32
	w := newTestWatch(func() (uint, error) {
		reads.Add(1)
		<-release
		return 0, errors.New("connect: the database does not answer")
	}, time.Time{})
	w.wait = 10 * time.Millisecond
	var requests sync.WaitGroup
	for range 8 {
		requests.Go(func() {
			if v := w.current(context.Background()); v != 3 {
				t.Errorf("while reading: version %d, want the last one, 3", v)
			}
		})
	}
	requests.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if v := w.current(ctx); v != 3 {
		t.Errorf("request ended: version %d, want 3", v)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d readings under way at once, want 1", n)
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); ; {
		w.mu.Lock()
		done := w.reading == nil
		w.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reading did not end")
		}
		time.Sleep(time.Millisecond)
	}
	if v := w.current(context.Background()); v != 3 || reads.Load() != 1 {
		t.Errorf("after a failed reading: version %d after %d reads, want 3 and no new reading before rereadAfter", v, reads.Load())
	}
}
