package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/internal/httppark"
	"github.com/twophase/coordinator/metrics"
)

// parkServer is a coordinator on PostgreSQL that parks long-polls on pending after 100 ms.
type parkServer struct {
	url      string
	svc      *coordinator.Service
	ln       *httppark.Listener
	ts       *httptest.Server
	hijacked atomic.Int64 // connections net/http saw hijacked: requests parked
	mu       sync.Mutex
	logs     bytes.Buffer
}

func (s *parkServer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.Write(p)
}

func (s *parkServer) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

func newParkServer(t *testing.T, opts Options) *parkServer {
	t.Helper()
	return newParkServerOn(t, testStore(t), opts)
}

func newParkServerOn(t *testing.T, store coordinator.Store, opts Options, configure ...func(*http.Server)) *parkServer {
	t.Helper()
	s := &parkServer{svc: coordinator.NewService(store, nil)}
	s.ts = httptest.NewUnstartedServer(nil)
	for _, c := range configure {
		c(s.ts.Config)
	}
	s.ln = httppark.NewListener(s.ts.Listener)
	s.ts.Listener = s.ln
	s.ts.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateHijacked {
			s.hijacked.Add(1)
		}
	}
	opts.Park = s.ln
	if opts.ParkAfter == 0 {
		opts.ParkAfter = 100 * time.Millisecond
	}
	opts.Logger = slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.RequestTimeout = time.Minute
	s.ts.Config.Handler = NewHandler(s.svc, opts)
	s.ts.Start()
	t.Cleanup(s.ts.Close)
	s.url = s.ts.URL
	ctx := context.Background()
	if _, _, err := s.svc.PutJob(ctx, "j", coordinator.JobConfig{Participants: []string{"a", "b"},
		CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		if _, err := s.svc.Register(ctx, "j", p); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// parkAnswer is one answer, with the client's local address, which names its connection.
type parkAnswer struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
	local  string
	reused bool
	close  bool // the answer closes its connection (Connection: close)
}

func (a parkAnswer) pending(t *testing.T) Pending {
	t.Helper()
	var p Pending
	if a.status != http.StatusOK {
		t.Fatalf("pending: %d %s", a.status, a.body)
	}
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("pending: %v in %s", err, a.body)
	}
	return p
}

// get sends a GET with client, asynchronously.
func (s *parkServer) get(t *testing.T, client *http.Client, path string, header ...string) <-chan parkAnswer {
	ch := make(chan parkAnswer, 1)
	go func() {
		var a parkAnswer
		req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
		if err != nil {
			t.Error(err)
			ch <- a
			return
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) {
				a.local, a.reused = info.Conn.LocalAddr().String(), info.Reused
			},
		}))
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			ch <- a
			return
		}
		a.body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Errorf("GET %s: reading the body: %v", path, err)
		}
		a.status, a.header, a.took, a.close = resp.StatusCode, resp.Header, time.Since(start), resp.Close
		ch <- a
	}()
	return ch
}

// within returns what ch gives within d, and fails the test if it gives nothing.
func within[T any](t *testing.T, what string, ch <-chan T, d time.Duration) T {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(d):
		t.Fatalf("%s: no answer within %s", what, d)
		var zero T
		return zero
	}
}

// oneConnection is a client that keeps a single HTTP/1.1 connection.
func oneConnection(t *testing.T) *http.Client {
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// A long-poll on pending that waits past the park time is parked: net/http hands its
// connection over, and the answer comes as it would have, for what opened, on a
// connection that stays open and serves the next request; its access log line and
// metrics come with the answer.
func TestParkedPendingAnswersOnItsConnection(t *testing.T) {
	t.Parallel()
	s := newParkServer(t, Options{})
	client := oneConnection(t)
	ctx := context.Background()

	ch := s.get(t, client, "/v1/jobs/j/participants/a/pending?wait_ms=20000", "X-Request-Id", "parked-request-1")
	time.Sleep(400 * time.Millisecond) // past the 100 ms after which it is parked
	if n := s.hijacked.Load(); n != 1 {
		t.Fatalf("%d connections hijacked while the long-poll waited, want 1 (parked)", n)
	}
	if _, _, err := s.svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	a := within(t, "a parked long-poll woken by an opening", ch, 5*time.Second)
	p := a.pending(t)
	if len(p.Items) != 1 || p.Items[0].Action != PendingActionVote || p.Items[0].Checkpoint != 1 || p.Epoch != 1 {
		t.Fatalf("parked answer: %+v, want the vote on checkpoint 1 at epoch 1", p)
	}
	if got := a.header.Get("X-Request-Id"); got != "parked-request-1" {
		t.Errorf("X-Request-Id of the parked answer: %q", got)
	}
	if got := a.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type of the parked answer: %q", got)
	}
	if a.close {
		t.Errorf("the parked answer closes its connection")
	}
	// The same connection serves the next request, and the one after a parked timeout.
	b := within(t, "the next request", s.get(t, client, "/v1/jobs/j/participants/b/pending?wait_ms=500"), 5*time.Second)
	if !b.reused || b.local != a.local {
		t.Fatalf("the next request went on %s (reused %v), the parked one on %s: the connection was not handed back", b.local, b.reused, a.local)
	}
	if p := b.pending(t); len(p.Items) != 1 {
		t.Fatalf("b owes %+v, want its vote", p.Items)
	}
}

// A parked wait with nothing owed answers at its wait_ms, not before, with nothing owed;
// its request is logged and counted when it answers, with its status and its whole
// duration.
func TestParkedPendingEndsAtItsWait(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{Version: "test", Store: "test"})
	s := newParkServer(t, Options{Metrics: m})
	client := oneConnection(t)
	a := within(t, "an idle parked wait", s.get(t, client, "/v1/jobs/j/participants/a/pending?wait_ms=700", "X-Request-Id", "idle-wait-1"), 5*time.Second)
	if p := a.pending(t); len(p.Items) != 0 || p.Epoch != 1 {
		t.Fatalf("an idle wait answered %+v", p)
	}
	if a.took < 700*time.Millisecond {
		t.Fatalf("an idle wait of 700 ms answered after %s", a.took)
	}
	if n := s.hijacked.Load(); n != 1 {
		t.Fatalf("%d connections hijacked, want 1: the wait was not parked", n)
	}
	metricsAnswer := within(t, "GET /metrics", s.get(t, client, "/metrics"), 5*time.Second)
	want := `coordinator_http_requests_total{code="200",method="GET",route="/v1/jobs/{job}/participants/{participant}/pending"} 1`
	if !strings.Contains(string(metricsAnswer.body), want) {
		t.Fatalf("metrics after a parked answer lack %s", want)
	}
	if want := "coordinator_http_parked_requests_total 1"; !strings.Contains(string(metricsAnswer.body), want) {
		t.Fatalf("metrics after a parked answer lack %s", want)
	}
	if !metricsAnswer.reused || metricsAnswer.local != a.local {
		t.Fatalf("the request after a parked timeout went on a new connection")
	}
	// The connection came back after the line was logged.
	var line string
	for l := range strings.Lines(s.log()) {
		if strings.Contains(l, "request_id=idle-wait-1") && strings.Contains(l, "msg=request") {
			line = l
		}
	}
	if !strings.Contains(line, "status=200") || !strings.Contains(line, "path=/v1/jobs/j/participants/a/pending") {
		t.Fatalf("access log line of the parked request: %q", line)
	}
	var ms float64
	if _, err := fmt.Sscanf(line[strings.Index(line, "duration_ms=")+len("duration_ms="):], "%g", &ms); err != nil || ms < 700 {
		t.Fatalf("access log duration of the parked request: %q (%v)", line, err)
	}
}

// A parked request keeps its waiter slot until it answers: with one slot, a second
// long-poll is refused while the first is parked, and served after it answered.
func TestParkedPendingHoldsItsWaiterSlot(t *testing.T) {
	t.Parallel()
	s := newParkServer(t, Options{MaxWaiters: 1})
	first := s.get(t, oneConnection(t), "/v1/jobs/j/participants/a/pending?wait_ms=1500")
	time.Sleep(400 * time.Millisecond)
	if n := s.hijacked.Load(); n != 1 {
		t.Fatalf("%d connections hijacked, want 1", n)
	}
	other := oneConnection(t)
	refused := within(t, "a second long-poll", s.get(t, other, "/v1/jobs/j/participants/b/pending?wait_ms=1000"), 5*time.Second)
	if refused.status != http.StatusServiceUnavailable {
		t.Fatalf("a second long-poll while one is parked: %d %s, want 503", refused.status, refused.body)
	}
	within(t, "the parked long-poll", first, 5*time.Second).pending(t)
	later := within(t, "a long-poll after the parked one answered", s.get(t, other, "/v1/jobs/j/participants/b/pending?wait_ms=200"), 5*time.Second)
	later.pending(t)
}

// A coordinator shutting down answers its parked long-polls at once, and closes their
// connections once its listener is closed.
func TestParkedPendingCutByShutdown(t *testing.T) {
	t.Parallel()
	s := newParkServer(t, Options{})
	ch := s.get(t, oneConnection(t), "/v1/jobs/j/participants/a/pending?wait_ms=30000")
	time.Sleep(400 * time.Millisecond)
	if n := s.hijacked.Load(); n != 1 {
		t.Fatalf("%d connections hijacked, want 1", n)
	}
	if err := s.ln.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.svc.EndWaits()
	a := within(t, "a parked long-poll at shutdown", ch, 5*time.Second)
	if p := a.pending(t); len(p.Items) != 0 {
		t.Fatalf("at shutdown: %+v", p)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the parked long-poll answered %s after the shutdown began", took)
	}
	if !a.close {
		t.Errorf("the answer after the listener closed does not close its connection: %v", a.header)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.ln.Wait(ctx); err != nil {
		t.Fatalf("parked requests still held after they answered: %v", err)
	}
}

// A parked long-poll whose token is revoked answers 401 unauthenticated.
func TestParkedPendingEndsWhenItsTokenIsRevoked(t *testing.T) {
	t.Parallel()
	store := testStore(t)
	ts := store.(coordinator.TokenStore)
	auth := coordinator.NewAuthenticator(ts, testAdminToken, nil)
	if err := auth.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := newParkServerOn(t, store, Options{Auth: auth, Tokens: coordinator.NewTokens(ts)})
	ctx := context.Background()
	_, secret, err := coordinator.NewTokens(ts).Create(ctx, coordinator.Token{Name: "sink-a", Job: "j", Participant: "a",
		Scopes: []coordinator.Scope{coordinator.ScopeParticipant}})
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	ch := s.get(t, oneConnection(t), "/v1/jobs/j/participants/a/pending?wait_ms=30000", "Authorization", "Bearer "+secret)
	time.Sleep(400 * time.Millisecond)
	if n := s.hijacked.Load(); n != 1 {
		t.Fatalf("%d connections hijacked, want 1", n)
	}
	if err := ts.DeleteToken(ctx, "sink-a", nil); err != nil {
		t.Fatal(err)
	}
	if err := auth.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	a := within(t, "a parked long-poll whose token was revoked", ch, 10*time.Second)
	var p Problem
	if err := json.Unmarshal(a.body, &p); err != nil || a.status != http.StatusUnauthorized || p.Code != "unauthenticated" {
		t.Fatalf("a parked long-poll whose token was revoked: %d %s, want 401 unauthenticated", a.status, a.body)
	}
	if a.took > 10*time.Second {
		t.Fatalf("answered after %s", a.took)
	}
}

// What cannot be parked waits as before: HEAD, a request whose client closes the
// connection after it, HTTP/2.
func TestPendingNotParked(t *testing.T) {
	t.Parallel()
	s := newParkServer(t, Options{})
	client := oneConnection(t)
	head := make(chan parkAnswer, 1)
	go func() {
		start := time.Now()
		resp, err := client.Head(s.url + "/v1/jobs/j/participants/a/pending?wait_ms=400")
		if err != nil {
			t.Error(err)
			head <- parkAnswer{}
			return
		}
		resp.Body.Close()
		head <- parkAnswer{status: resp.StatusCode, took: time.Since(start)}
	}()
	if a := within(t, "HEAD", head, 5*time.Second); a.status != 200 || a.took < 400*time.Millisecond {
		t.Fatalf("HEAD long-poll: %d after %s", a.status, a.took)
	}
	closing := within(t, "Connection: close", s.get(t, client, "/v1/jobs/j/participants/a/pending?wait_ms=400", "Connection", "close"), 5*time.Second)
	if p := closing.pending(t); len(p.Items) != 0 || closing.took < 400*time.Millisecond {
		t.Fatalf("a long-poll with Connection: close: %+v after %s", p, closing.took)
	}
	if n := s.hijacked.Load(); n != 0 {
		t.Fatalf("%d requests parked, want none", n)
	}

	h2 := newParkServerOn(t, testStore(t), Options{}, func(srv *http.Server) {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	})
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	start := time.Now()
	resp, err := (&http.Client{Transport: tr}).Get(h2.url + "/v1/jobs/j/participants/a/pending?wait_ms=400")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("an HTTP/2 long-poll: %d %s after %s", resp.StatusCode, resp.Proto, time.Since(start))
	}
	if n := h2.hijacked.Load(); n != 0 {
		t.Fatalf("%d HTTP/2 requests parked, want none", n)
	}
}

// A request pipelined behind a parked one cannot be served on its connection (net/http
// had read it): the parked answer closes the connection, and the client sends it again.
func TestParkedPendingWithPipelinedRequest(t *testing.T) {
	t.Parallel()
	s := newParkServer(t, Options{})
	c, err := net.Dial("tcp", s.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = io.WriteString(c, "GET /v1/jobs/j/participants/a/pending?wait_ms=500 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"+
		"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !resp.Close || !bytes.Contains(body, []byte(`"items":[]`)) {
		t.Fatalf("the parked answer with a request behind it: %d close=%v %s", resp.StatusCode, resp.Close, body)
	}
}

// Over TLS the parked connection is the TLS one: the answer is encrypted as any other,
// and the connection handed back serves the next request.
func TestParkedPendingOverTLS(t *testing.T) {
	t.Parallel()
	store := testStore(t)
	svc := coordinator.NewService(store, nil)
	ctx := context.Background()
	if _, _, err := svc.PutJob(ctx, "j", coordinator.JobConfig{Participants: []string{"a"},
		CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Register(ctx, "j", "a"); err != nil {
		t.Fatal(err)
	}
	// httptest's certificate and a client that trusts it; the server is this test's own,
	// with the parking listener above TLS, as the coordinator serves.
	certs := httptest.NewUnstartedServer(nil)
	certs.StartTLS()
	defer certs.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := httppark.NewListener(tls.NewListener(tcp, certs.TLS.Clone()))
	var hijacked atomic.Int64
	srv := &http.Server{
		Handler: NewHandler(svc, Options{Park: ln, ParkAfter: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}),
		ConnState: func(_ net.Conn, state http.ConnState) {
			if state == http.StateHijacked {
				hijacked.Add(1)
			}
		},
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	s := &parkServer{url: "https://" + tcp.Addr().String()}
	client := certs.Client()
	client.Transport.(*http.Transport).MaxConnsPerHost = 1

	ch := s.get(t, client, "/v1/jobs/j/participants/a/pending?wait_ms=20000")
	time.Sleep(400 * time.Millisecond)
	if n := hijacked.Load(); n != 1 {
		t.Fatalf("%d connections hijacked, want 1", n)
	}
	if _, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	a := within(t, "a parked long-poll over TLS", ch, 5*time.Second)
	if p := a.pending(t); len(p.Items) != 1 || p.Items[0].Checkpoint != 1 {
		t.Fatalf("over TLS: %+v", p)
	}
	b := within(t, "the next request over TLS", s.get(t, client, "/v1/jobs/j/participants/a/pending"), 5*time.Second)
	if !b.reused || b.local != a.local {
		t.Fatalf("the next request went on %s (reused %v), the parked one on %s", b.local, b.reused, a.local)
	}
	if p := b.pending(t); len(p.Items) != 1 {
		t.Fatalf("over TLS, the next request: %+v", p)
	}
}

// A participant whose parked long-poll ended at its wait_ms with nothing owed is idle: its
// next long-poll is parked at once. Once it is answered something owed, it waits the usual
// time again before it is parked.
func TestIdleParticipantParkedAtOnce(t *testing.T) {
	t.Parallel()
	s := newParkServer(t, Options{ParkAfter: 600 * time.Millisecond})
	client := oneConnection(t)
	ctx := context.Background()
	hijackedAfter := func(d time.Duration) int64 {
		time.Sleep(d)
		return s.hijacked.Load()
	}

	first := s.get(t, client, "/v1/jobs/j/participants/a/pending?wait_ms=1000")
	if n := hijackedAfter(300 * time.Millisecond); n != 0 {
		t.Fatalf("%d parked 300 ms into the first long-poll, want none before 600 ms", n)
	}
	within(t, "the first long-poll", first, 5*time.Second).pending(t)
	if n := s.hijacked.Load(); n != 1 {
		t.Fatalf("%d parked after the first long-poll, want 1", n)
	}
	second := s.get(t, client, "/v1/jobs/j/participants/a/pending?wait_ms=5000")
	if n := hijackedAfter(300 * time.Millisecond); n != 2 {
		t.Fatalf("%d parked 300 ms into an idle participant's long-poll, want 2: not parked at once", n)
	}
	cp, _, err := s.svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if p := within(t, "the second long-poll", second, 5*time.Second).pending(t); len(p.Items) != 1 {
		t.Fatalf("the second long-poll: %+v", p)
	}
	for _, p := range []string{"a", "b"} {
		if _, err := s.svc.Vote(ctx, "j", cp.ID, p, coordinator.Vote{Epoch: 1, Kind: coordinator.VotePrepared}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"a", "b"} {
		if _, err := s.svc.Ack(ctx, "j", cp.ID, p, 1); err != nil {
			t.Fatal(err)
		}
	}
	third := s.get(t, client, "/v1/jobs/j/participants/a/pending?wait_ms=1500")
	if n := hijackedAfter(300 * time.Millisecond); n != 2 {
		t.Fatalf("%d parked 300 ms into the long-poll after work, want 2: a participant answered something owed is not idle", n)
	}
	within(t, "the third long-poll", third, 5*time.Second).pending(t)
	if n := s.hijacked.Load(); n != 3 {
		t.Fatalf("%d parked after the third long-poll, want 3", n)
	}
}
