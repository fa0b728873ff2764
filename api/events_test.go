package api

import (
	"bufio"
	"context"
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

func TestEventStreams(t *testing.T) { onEachStore(t, testEventStreams) }

// sseEvent is one event of a stream as a client reads it.
type sseEvent struct {
	id, event, data string
}

// sseStream reads a stream's events from a request sent with header.
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
	cancel context.CancelFunc
}

func openStream(t *testing.T, url string, header ...string) (*sseStream, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		return nil, resp
	}
	s := &sseStream{t: t, resp: resp, events: make(chan sseEvent, 1000), cancel: cancel}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.id != "" || e.data != "" {
					s.events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.data = line[6:]
			}
		}
	}()
	t.Cleanup(s.close)
	return s, resp
}

func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next returns the next event, failing the test if none comes within 10 s.
func (s *sseStream) next() sseEvent {
	s.t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			s.t.Fatal("the stream ended")
		}
		return e
	case <-time.After(10 * time.Second):
		s.t.Fatal("no event within 10 s")
	}
	return sseEvent{}
}

// statuses reads events until one shows checkpoint id with status last, and returns the
// status changes seen (an event whose status differs from the one before it), as
// "id status".
func (s *sseStream) statuses(last string, id int64) []string {
	s.t.Helper()
	var out []string
	shown := map[string]string{}
	for {
		e := s.next()
		if e.event != "checkpoint" {
			s.t.Fatalf("event %q (%s), want checkpoint", e.event, e.data)
		}
		var cp Checkpoint
		if err := json.Unmarshal([]byte(e.data), &cp); err != nil {
			s.t.Fatalf("event data %s: %v", e.data, err)
		}
		key := fmt.Sprintf("%s/%d", cp.Job, cp.Id)
		if shown[key] != string(cp.Status) {
			out = append(out, key+" "+string(cp.Status))
			shown[key] = string(cp.Status)
		}
		if cp.Job == "j" && cp.Id == id && string(cp.Status) == last {
			return out
		}
	}
}

func testEventStreams(t *testing.T) {
	store := testStore(t)
	svc := coordinator.NewService(store, nil)
	srv := httptest.NewServer(NewHandler(svc, Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Second}))
	t.Cleanup(srv.Close)
	b := &bundle{url: srv.URL, store: store}
	b.job(t, "j", `{"participants":["a","b"],"max_concurrent_checkpoints":2}`, "a", "b")
	b.job(t, "other", `{"participants":["a"]}`, "a")

	// A stream begins with its position, and follows a round live, longer than the
	// request timeout (1 s): every status change in order, a vote shown with its checkpoint.
	js, _ := openStream(t, srv.URL+"/v1/jobs/j/events")
	all, _ := openStream(t, srv.URL+"/v1/events")
	first := js.next()
	if first.event != "" || first.data != "" || !strings.HasSuffix(first.id, ".j") {
		t.Fatalf("first block %+v, want only an id", first)
	}
	if e := all.next(); e.data != "" || e.id == "" {
		t.Fatalf("first block of /v1/events %+v, want only an id", e)
	}
	time.Sleep(1200 * time.Millisecond) // past the request timeout
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	b.call(t, "POST", "/v1/jobs/other/checkpoints", "", "").ok(t, 201, nil)
	b.call(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/a", "application/json", `{"epoch":1,"vote":"prepared","committables":["a1"]}`).ok(t, 200, nil)
	b.call(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/b", "application/json", `{"epoch":1,"vote":"prepared","committables":["b1"]}`).ok(t, 200, nil)
	b.call(t, "PUT", "/v1/jobs/j/checkpoints/1/acks/a", "application/json", `{"epoch":1}`).ok(t, 200, nil)
	b.call(t, "PUT", "/v1/jobs/j/checkpoints/1/acks/b", "application/json", `{"epoch":1}`).ok(t, 200, nil)
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	b.call(t, "POST", "/v1/jobs/j/checkpoints/2/abort", "application/json", `{"reason":"by hand"}`).ok(t, 200, nil)

	var ids []string
	var datas []string
	shown := map[int64]string{}
	var got []string
	for len(got) < 5 {
		e := js.next()
		var cp Checkpoint
		if err := json.Unmarshal([]byte(e.data), &cp); err != nil || e.event != "checkpoint" || cp.Job != "j" {
			t.Fatalf("event %+v (%v)", e, err)
		}
		if shown[cp.Id] != string(cp.Status) {
			got = append(got, fmt.Sprintf("%d %s", cp.Id, cp.Status))
			shown[cp.Id] = string(cp.Status)
			ids, datas = append(ids, e.id), append(datas, e.data)
		}
	}
	want := "1 preparing, 1 committing, 1 committed, 2 preparing, 2 aborted"
	if strings.Join(got, ", ") != want {
		t.Fatalf("the job's stream showed %v, want %s", got, want)
	}
	// The decision came with the checkpoint as it stood then, or as it stood when read
	// afterwards while still committing: votes in, not completed.
	var decided Checkpoint
	_ = json.Unmarshal([]byte(datas[1]), &decided)
	if decided.CompletedAt != nil || decided.Participants[0].Vote == nil || decided.Participants[1].Vote == nil {
		t.Errorf("the committing event shows %s", datas[1])
	}
	if s := all.statuses("aborted", 2); strings.Join(s, ", ") != "j/1 preparing, other/1 preparing, j/1 committing, j/1 committed, j/2 preparing, j/2 aborted" {
		t.Errorf("/v1/events showed %v", s)
	}

	// Resuming after each status change gives exactly the ones after it, whatever came
	// between (votes, acks).
	for i, id := range ids {
		rs, _ := openStream(t, srv.URL+"/v1/jobs/j/events", "Last-Event-ID", id)
		var rest []string
		for range len(ids) - i - 1 {
			e := rs.next()
			var cp Checkpoint
			_ = json.Unmarshal([]byte(e.data), &cp)
			rest = append(rest, fmt.Sprintf("%d %s", cp.Id, cp.Status))
		}
		if strings.Join(rest, ", ") != strings.Join(got[i+1:], ", ") {
			t.Errorf("resumed after %q (%s): %v, want %v", id, got[i], rest, got[i+1:])
		}
		// Nothing more: the next thing is a new change.
		b.call(t, "PUT", "/v1/jobs/other/checkpoints/1/votes/a", "application/json", `{"epoch":1,"vote":"prepared"}`) // another job's
		select {
		case e := <-rs.events:
			t.Errorf("resumed after %q: an extra event %+v", id, e)
		case <-time.After(100 * time.Millisecond):
		}
		rs.close()
	}

	// Bad ids are refused, missing jobs are 404, before any stream begins.
	for _, bad := range []string{"x", "1.2", "1.-1.2.j", "1.1.7.j", "1.1.1.bad name"} {
		if _, resp := openStream(t, srv.URL+"/v1/jobs/j/events", "Last-Event-ID", bad); resp.StatusCode != 400 {
			t.Errorf("Last-Event-ID %q: %d, want 400", bad, resp.StatusCode)
		}
	}
	if _, resp := openStream(t, srv.URL+"/v1/jobs/nope/events"); resp.StatusCode != 404 {
		t.Errorf("a missing job's stream: %d, want 404", resp.StatusCode)
	}

	// Once retention deleted status changes after a position, resuming from it through a
	// coordinator that does not hold them in memory (another process, here another
	// handler on the store) resets: one event reset with the job, then the stream follows
	// on.
	n, err := store.(coordinator.EventStore).PruneEvents(t.Context(), time.Now().Add(time.Hour), 2)
	if err != nil || n != 2 {
		t.Fatalf("PruneEvents: %d, %v", n, err)
	}
	svc2 := coordinator.NewService(store, nil)
	srv2 := httptest.NewServer(NewHandler(svc2, Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Second}))
	t.Cleanup(srv2.Close)
	rs, _ := openStream(t, srv2.URL+"/v1/jobs/j/events", "Last-Event-ID", ids[0])
	if e := rs.next(); e.event != "reset" || !strings.Contains(e.data, `"name":"j"`) || e.id == "" {
		t.Errorf("resumed from before retention: %+v, want a reset with the job", e)
	}
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	if s := rs.statuses("preparing", 3); strings.Join(s, ", ") != "j/3 preparing" {
		t.Errorf("after the reset: %v", s)
	}
	if s := all.statuses("preparing", 3); strings.Join(s, ", ") != "other/1 committing, j/3 preparing" {
		t.Errorf("/v1/events after: %v", s)
	}

	// Shutdown ends every stream at once.
	svc.EndWaits()
	svc2.EndWaits()
	for _, s := range []*sseStream{js, all, rs} {
		select {
		case _, ok := <-s.events:
			for ok {
				_, ok = <-s.events
			}
		case <-time.After(5 * time.Second):
			t.Error("a stream still open 5 s after the shutdown began")
		}
	}
}

// TestEventStreamsReadOnlyWhatTheTokenMay: /v1/events shows a token the jobs it may read and
// no other; a stream ends when its token is revoked; an idle stream gets its keep-alive
// comments.
func TestEventStreamsReadOnlyWhatTheTokenMay(t *testing.T) {
	onEachStore(t, func(t *testing.T) {
		b := setupAuth(t)
		ctx := t.Context()
		for _, job := range []string{"mine", "theirs"} {
			if _, _, err := b.svc.PutJob(ctx, job, coordinator.JobConfig{Participants: []string{"a"}, CheckpointTimeout: time.Minute,
				MaxConcurrentCheckpoints: 2, AutoCommit: true}); err != nil {
				t.Fatal(err)
			}
		}
		reader := b.token(t, "reader-mine", "mine", "", coordinator.ScopeRead)
		s, resp := openStream(t, b.url+"/v1/events", "Authorization", "Bearer "+reader)
		if s == nil {
			t.Fatalf("GET /v1/events with a reader of mine: %d", resp.StatusCode)
		}
		s.next() // its position
		for _, job := range []string{"theirs", "mine", "theirs"} {
			if _, _, err := b.svc.Prepare(ctx, job, coordinator.PrepareRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		if e := s.next(); !strings.Contains(e.data, `"job":"mine"`) {
			t.Errorf("the reader of mine got %+v", e)
		}
		select {
		case e := <-s.events:
			t.Errorf("the reader of mine got another event: %+v", e)
		case <-time.After(300 * time.Millisecond):
		}
		// Another job's stream is refused it.
		if _, resp := openStream(t, b.url+"/v1/jobs/theirs/events", "Authorization", "Bearer "+reader); resp.StatusCode != 403 {
			t.Errorf("the reader of mine on theirs' stream: %d, want 403", resp.StatusCode)
		}
		// Revoked, the token's stream ends.
		if err := coordinator.NewTokens(b.tokens).Revoke(ctx, "reader-mine"); err != nil {
			t.Fatal(err)
		}
		if err := b.auth.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case _, ok := <-s.events:
			for ok {
				_, ok = <-s.events
			}
		case <-time.After(5 * time.Second):
			t.Error("the stream of a revoked token still open after 5 s")
		}
	})
}

// TestEventStreamKeepAlive: a stream with nothing to send sends a comment every
// Options.StreamKeepAlive.
func TestEventStreamKeepAlive(t *testing.T) { onEachStore(t, testEventStreamKeepAlive) }

func testEventStreamKeepAlive(t *testing.T) {
	store := testStore(t)
	srv := httptest.NewServer(NewHandler(coordinator.NewService(store, nil), Options{Logger: slog.New(slog.DiscardHandler),
		StreamKeepAlive: 100 * time.Millisecond}))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	comments := 0
	start := time.Now()
	for comments < 3 && sc.Scan() {
		if sc.Text() == ": keep-alive" {
			comments++
		}
	}
	if comments < 3 {
		t.Fatalf("%d keep-alive comments", comments)
	}
	t.Logf("3 keep-alive comments in %s", time.Since(start).Round(time.Millisecond))
}

// TestConsoleMounted: with Options.UI the console's pages are served without a token
// (they ask for one), the browser and Host guards still apply; without it /ui/ is 404.
func TestConsoleMounted(t *testing.T) {
	store := testStore(t)
	ts := store.(coordinator.TokenStore)
	auth := coordinator.NewAuthenticator(ts, testAdminToken, nil)
	if err := auth.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("console")) })
	with := httptest.NewServer(NewHandler(coordinator.NewService(store, nil), Options{Logger: slog.New(slog.DiscardHandler),
		Auth: auth, Tokens: coordinator.NewTokens(ts), UI: page}))
	t.Cleanup(with.Close)
	without := httptest.NewServer(NewHandler(coordinator.NewService(store, nil), Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(without.Close)
	get := func(url string, header ...string) int {
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(with.URL + "/ui/"); s != 200 {
		t.Errorf("/ui/ without a token, authentication on: %d, want 200", s)
	}
	if s := get(with.URL+"/ui/", "Origin", "https://evil.example"); s != 403 {
		t.Errorf("/ui/ from a foreign page: %d, want 403", s)
	}
	if s := get(with.URL + "/v1/jobs"); s != 401 {
		t.Errorf("/v1/jobs without a token: %d, want 401", s)
	}
	if s := get(without.URL + "/ui/"); s != 404 {
		t.Errorf("/ui/ with the console off: %d, want 404", s)
	}
}
