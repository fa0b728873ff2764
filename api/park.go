package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/twophase/coordinator/internal/httppark"
	"github.com/twophase/coordinator/metrics"
)

// Parking. An HTTP/1.1 long-poll on pending that has waited Options.ParkAfter without
// an answer is set aside: its connection is taken from net/http, which lets go of the
// goroutines and buffers it holds for a request in progress (about 35 KiB), and the wait
// goes on with nothing but the socket and the wait's own state. Once the wait ends, the
// answer (the same bytes net/http would have written, with the same headers) is written
// on the connection, which goes back to the server through the httppark.Listener: the
// client's keep-alive connection stays open. The request keeps its waiter slot, its
// access log line and its metrics, which come when it is answered. HTTP/2 streams, HEAD,
// and requests whose client asked to close the connection are not parked.

// DefaultParkAfter is how long an HTTP/1.1 long-poll on pending waits in net/http's hands
// before it is parked, when Options.Park is set and Options.ParkAfter is 0. Parking costs
// some CPU each time (the connection is taken from net/http and handed back): long enough
// that the participants of a job that checkpoints every three seconds or more often are
// not parked, short enough that an idle fleet, whose long-polls wait a minute (the Go
// Runner's), is parked nearly all the time, even when all of them ask at once.
const DefaultParkAfter = 3 * time.Second

// parkWriteTimeout bounds the writing of a parked request's answer.
const parkWriteTimeout = 10 * time.Second

// parking is what the server needs to park requests: nil when it does not.
type parking struct {
	ln             *httppark.Listener
	metrics        *metrics.Metrics // nil: not counted
	after          time.Duration
	requestTimeout time.Duration
	pw             *problemWriter
	idle           idleParticipants
}

// idleParticipants are the participants whose last parked long-poll ended at its wait_ms
// with nothing owed: their next long-poll is parked at once, instead of holding net/http's
// goroutines and buffers for the time after which others are parked. A fleet at rest,
// whose long-polls all end and are asked again at about the same moment, otherwise holds
// all of them unparked at once for that time. A participant leaves the set when it is
// answered something owed. The set is bounded: past maxIdleParticipants, participants
// are parked after the usual time.
type idleParticipants struct {
	mu sync.Mutex
	m  map[string]struct{}
}

const maxIdleParticipants = 1 << 17

func idleKey(job, participant string) string { return job + "\x00" + participant }

func (s *idleParticipants) has(job, participant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[idleKey(job, participant)]
	return ok
}

func (s *idleParticipants) note(job, participant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]struct{}{}
	}
	if len(s.m) < maxIdleParticipants {
		s.m[idleKey(job, participant)] = struct{}{}
	}
}

func (s *idleParticipants) forget(job, participant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, idleKey(job, participant))
}

// answerWriter is the http.ResponseWriter the access log gives the rest of the chain: it
// records the status and size of the answer, and whether the request was parked.
type answerWriter struct {
	http.ResponseWriter
	req         *http.Request
	status      int
	bytes       int
	wroteHeader bool
	parked      *parkedRequest
	budget      *answerBudget // what large answers in flight hold (answers.go)
	held        int64         // this request's part of it
}

func (w *answerWriter) WriteHeader(status int) {
	if !w.wroteHeader && status >= 200 {
		w.status, w.wroteHeader = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *answerWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = http.StatusOK, true
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += n
	return n, err
}

// Status is the status written so far, 0 before any: the problem writer does not begin a
// second answer.
func (w *answerWriter) Status() int { return w.status }

// Unwrap lets http.ResponseController reach net/http's writer (Flush, Hijack, deadlines).
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answerWriterOf finds the access log's answerWriter under w, nil if there is none.
func answerWriterOf(w http.ResponseWriter) *answerWriter {
	for {
		switch x := w.(type) {
		case *answerWriter:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

// afterAnswer runs fn once w's request is answered: now, unless the request was parked,
// in which case when its answer is written. Middlewares that hold something for the
// length of a request (a waiter slot) release it this way.
func afterAnswer(w http.ResponseWriter, fn func()) {
	if aw := answerWriterOf(w); aw != nil && aw.parked != nil {
		aw.parked.after = append(aw.parked.after, fn)
		return
	}
	fn()
}

// mayPark reports whether the request can be parked: an HTTP/1.x GET whose client keeps
// the connection.
func (w *answerWriter) mayPark() bool {
	r := w.req
	return r.ProtoMajor == 1 && r.Method == http.MethodGet && !r.Close && w.parked == nil && !w.wroteHeader
}

// parkedRequest is a request taken from net/http, waiting for its answer.
type parkedRequest struct {
	p       *parking
	conn    net.Conn
	clean   bool // nothing past the request was read: the connection can go back
	header  http.Header
	req     *http.Request // the request, with the context the answer is made in
	cancel  context.CancelFunc
	release func() // the listener's Hold
	answer  func(ctx context.Context, w http.ResponseWriter, r *http.Request)
	after   []func()
}

// park takes w's connection and sets the request aside, answer to write its answer once
// the access log starts it (finish); ok is false when the request cannot be parked, and
// is then left as it was.
func (p *parking) park(ctx context.Context, w http.ResponseWriter, wait time.Duration,
	answer func(ctx context.Context, w http.ResponseWriter, r *http.Request)) bool {
	aw := answerWriterOf(w)
	if p == nil || aw == nil || !aw.mayPark() {
		return false
	}
	header := w.Header().Clone()
	conn, clean, err := httppark.Hijack(w)
	if err != nil {
		return false
	}
	// The request's context ends with the handler; the answer's keeps its values (the
	// request id, the principal), ends with the wait's own bound, and, like the
	// request's, when its token is revoked.
	ctx = detachRoute(context.WithoutCancel(ctx))
	var cancels []func()
	if pr := principalOf(ctx); pr != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		stop := context.AfterFunc(pr.Context(), func() { cancel(errTokenRevoked) })
		cancels = append(cancels, func() { stop(); cancel(nil) })
	}
	if p.requestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.requestTimeout+wait)
		cancels = append(cancels, cancel)
	}
	if p.metrics != nil {
		p.metrics.Parked()
	}
	aw.parked = &parkedRequest{
		p:       p,
		conn:    conn,
		clean:   clean,
		header:  header,
		req:     aw.req.WithContext(ctx),
		release: p.ln.Hold(),
		answer:  answer,
		cancel: func() {
			for _, c := range slices.Backward(cancels) {
				c()
			}
		},
	}
	return true
}

// finish waits for the answer, writes it, hands the connection back (or closes it), runs
// what waited for the answer and then logged, which is given the answer's status and
// size.
func (pr *parkedRequest) finish(logged func(ctx context.Context, status, bytes int)) {
	defer pr.release()
	defer pr.cancel()
	res := httppark.NewResponse(pr.header)
	if !pr.answerSafely(res) {
		_ = pr.conn.Close()
		for _, fn := range pr.after {
			fn()
		}
		logged(pr.req.Context(), http.StatusInternalServerError, 0)
		return
	}
	// What waited for the answer (the waiter slot) is released before it is written, as
	// for a request served in the handler: a client that asks again as soon as it reads
	// the answer finds its slot free.
	for _, fn := range pr.after {
		fn()
	}
	last := !pr.clean || pr.p.ln.Closed()
	err := res.WriteTo(pr.conn, last, time.Now().Add(parkWriteTimeout))
	status := res.Status()
	if status == 0 {
		status = http.StatusOK
	}
	logged(pr.req.Context(), status, res.Len())
	if err != nil || last {
		_ = pr.conn.Close()
		return
	}
	pr.p.ln.Return(pr.conn)
}

// answerSafely makes the answer into res, false if it panicked (logged, as recoverPanic
// does): the connection is then closed without one, which the client sees as a request
// cut.
func (pr *parkedRequest) answerSafely(res http.ResponseWriter) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			pr.p.pw.logger.Error("panic", "request_id", RequestID(pr.req.Context()), "method", pr.req.Method,
				"path", pr.req.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			ok = false
		}
	}()
	pr.answer(pr.req.Context(), res, pr.req)
	return true
}

// detachRoute gives ctx a copy of chi's route context: front reuses the one a request is
// served with once the request returns, and a parked request is answered after that.
func detachRoute(ctx context.Context) context.Context {
	rc := chi.RouteContext(ctx)
	if rc == nil {
		return ctx
	}
	c := chi.NewRouteContext()
	c.Routes = rc.Routes
	c.RoutePath = rc.RoutePath
	c.RouteMethod = rc.RouteMethod
	c.RoutePatterns = slices.Clone(rc.RoutePatterns)
	c.URLParams.Keys = slices.Clone(rc.URLParams.Keys)
	c.URLParams.Values = slices.Clone(rc.URLParams.Values)
	return context.WithValue(ctx, chi.RouteCtxKey, c)
}

// pendingWait is GetPending's answer when the wait outlasts the time after which it may be
// parked: the rest of the wait, parked if the request can be, else in the handler.
type pendingWait struct {
	s                *server
	ctx              context.Context
	job, participant string
	epoch            int64
	until            time.Time
}

func (p pendingWait) VisitGetPendingResponse(w http.ResponseWriter) error {
	if p.s.park.park(p.ctx, w, time.Until(p.until), p.answer) {
		return nil
	}
	res, err := p.wait(p.ctx)
	if err != nil {
		return err
	}
	return res.VisitGetPendingResponse(w)
}

func (p pendingWait) wait(ctx context.Context) (jsonResponse, error) {
	got, err := p.s.svc.Pending(ctx, p.job, p.participant, max(time.Until(p.until), 0), p.epoch)
	if err != nil {
		return jsonResponse{}, err
	}
	switch {
	case len(got.Items) > 0:
		p.s.park.idle.forget(p.job, p.participant)
	case !time.Now().Before(p.until):
		p.s.park.idle.note(p.job, p.participant)
	}
	return pendingAnswer(got), nil
}

// answer is the parked request's answer.
func (p pendingWait) answer(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	res, err := p.wait(ctx)
	if err != nil {
		p.s.park.pw.write(w, r, err)
		return
	}
	if err := res.VisitGetPendingResponse(w); err != nil {
		p.s.park.pw.write(w, r, err)
	}
}
