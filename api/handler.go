package api

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/internal/httppark"
	"github.com/twophase/coordinator/metrics"
)

// DefaultMaxBodyBytes is the request body limit when Options.MaxBodyBytes is not set.
const DefaultMaxBodyBytes = 1 << 20

// Options configures NewHandler. The zero value is usable.
type Options struct {
	// MaxBodyBytes bounds a request body; a larger one gets 413 payload_too_large.
	// 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives one line per request and the errors behind 5xx answers. nil means
	// slog.Default().
	Logger *slog.Logger
	// RequestTimeout, when positive, bounds each operation (a long poll gets its wait_ms
	// on top); a request that runs out answers 503 unavailable.
	RequestTimeout time.Duration
	// Build is what GET /v1/info answers about the running build and its store. nil
	// answers it 404 not_found, as a server older than the operation does.
	Build *BuildInfo
	// AllowedOrigins are the origins (scheme://host[:port], see CheckOrigin) of the web
	// pages whose requests are served. A request with any other Origin ("null" never
	// matches), or with Sec-Fetch-Site: cross-site and no Origin, gets 403 forbidden,
	// whatever its method and path. None by default: browsers cannot be used against the
	// coordinator. Clients that are not browsers send neither header.
	AllowedOrigins []string
	// AllowedHosts are the hosts (names or addresses, see CheckHost) a request's Host may
	// name besides the loopback ones (localhost, 127.0.0.0/8, ::1), which are always
	// allowed; they are compared without the port, in any case. AnyHost allows every
	// host. Any other Host gets 421 misdirected_request, except on GET and HEAD /healthz
	// and /readyz.
	AllowedHosts []string
	// Auth, when not nil, turns authentication on: every request but the probes needs a
	// token it accepts, and each route allows only the scopes routeAccess says.
	Auth *coordinator.Authenticator
	// Tokens serves /v1/tokens; nil, or authentication off, refuses those routes.
	Tokens *coordinator.Tokens
	// Metrics counts every request by route template, method and status, and serves
	// GET /metrics; nil answers that route 404.
	Metrics *metrics.Metrics
	// MaxWaiters bounds the requests that may wait on purpose (long-polls) held at once;
	// past it they get 503 unavailable with Retry-After. 0 means no bound.
	MaxWaiters int
	// Park, when not nil, is the listener the server serves on: an HTTP/1.1 long-poll on
	// pending that has waited ParkAfter (0: DefaultParkAfter) is then parked, its
	// connection set aside until its answer is written and then handed back to the
	// server through Park (park.go).
	Park      *httppark.Listener
	ParkAfter time.Duration
	// MaxAnswerBytes bounds the bytes large answers in flight hold at once (answers.go);
	// past it, a page of checkpoints or a single checkpoint gets 503 unavailable with
	// Retry-After. 0 means no bound.
	MaxAnswerBytes int64
	// LargeAnswerWriteTimeout bounds the writing of an answer of LargeAnswerBytes or more:
	// a client that has not read it by then has its connection closed. 0 means
	// DefaultLargeAnswerWriteTimeout.
	LargeAnswerWriteTimeout time.Duration
	// StreamKeepAlive is how long an event stream may send nothing before a comment keeps
	// it open; 0 means 10 seconds.
	StreamKeepAlive time.Duration
	// UI, when set, serves the console's pages under /ui/ (ui.Handler): before
	// authentication, since the pages hold no data and ask for the token themselves; the
	// browser and Host guards apply to them as to the API.
	UI http.Handler
}

// NewHandler returns the HTTP API of openapi.yaml on svc: the generated routes, with a
// request id on every request and response (X-Request-Id), one access log line per
// request, the strict input check, and problem+json answers for every error, including
// unknown routes, wrong methods, bad parameters and panics.
func NewHandler(svc *coordinator.Service, opts Options) http.Handler {
	srv := &server{svc: svc, build: opts.Build, metrics: opts.Metrics, hub: coordinator.NewEventHub(svc, encodeCheckpoint),
		keepAlive: opts.StreamKeepAlive}
	if srv.keepAlive <= 0 {
		srv.keepAlive = streamKeepAlive
	}
	if opts.Park != nil {
		logger := opts.Logger
		if logger == nil {
			logger = slog.Default()
		}
		srv.park = &parking{ln: opts.Park, after: opts.ParkAfter, requestTimeout: opts.RequestTimeout, metrics: opts.Metrics,
			pw: &problemWriter{logger: logger}}
		if srv.park.after <= 0 {
			srv.park.after = DefaultParkAfter
		}
	}
	if opts.Auth != nil {
		srv.tokens, srv.auth = opts.Tokens, opts.Auth
	}
	return newHandler(srv, opts)
}

// newHandler serves ssi; tests pass a stub to check the HTTP layer alone.
func newHandler(ssi StrictServerInterface, opts Options) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	pw := &problemWriter{logger: opts.Logger}
	mux := newRouter(ssi, opts, pw)
	routes := new(routeTable)
	routes.load(mux.Routes())
	return front(opts, pw, routes)(mux)
}

// newRouter is the router of the generated routes on ssi, which front comes before.
func newRouter(ssi StrictServerInterface, opts Options, pw *problemWriter) *chi.Mux {
	r := chi.NewRouter()
	r.NotFound(pw.notFound)
	r.MethodNotAllowed(methodNotAllowed(r, pw))

	// No strict middlewares: boundOperations calls ssi as the generated code would with none.
	strict := NewStrictHandlerWithOptions(ssi, nil, StrictHTTPServerOptions{
		RequestErrorHandlerFunc:  pw.requestErrorHandler,
		ResponseErrorHandlerFunc: pw.write,
	})
	HandlerWithOptions(boundOperations{ServerInterface: strict, ssi: ssi, pw: pw}, ChiServerOptions{
		BaseRouter:       r,
		ErrorHandlerFunc: pw.paramErrorHandler,
		// The last runs first: the input check, then the bound on long-polls.
		Middlewares: []MiddlewareFunc{waiterLimit(opts.MaxWaiters, opts.Metrics, pw), operationMiddleware(opts, pw)},
	})
	if len(r.Middlewares()) != 0 {
		// A route front finds is served without going through the router's middlewares.
		panic("api: the router must have no middlewares: front comes before it")
	}
	return r
}

// operationMiddleware runs once the route is known and its parameters parsed, before the
// generated code reads the body: it refuses what the token does not allow, then applies
// the strict input check of the query string and the body. (front has set the timeout.)
func operationMiddleware(opts Options, pw *problemWriter) MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := authorize(r); err != nil {
				pw.write(w, r, err)
				return
			}
			if err := checkQuery(r); err != nil {
				pw.write(w, r, err)
				return
			}
			body, bound, err := checkBody(w, r, opts.MaxBodyBytes, bodySpecFor(r))
			if err != nil {
				pw.write(w, r, err)
				return
			}
			cb := &checkedBody{bound: bound}
			cb.Reset(body)
			r.Body = cb
			r.ContentLength = int64(len(body))
			next.ServeHTTP(w, r)
		})
	}
}

// longPoll is how long the request may wait on purpose: the wait_ms of a GET or HEAD
// (a checkpoint, pending) or of a vote.
func longPoll(r *http.Request) time.Duration {
	if r.URL.RawQuery == "" || r.Method != http.MethodGet && r.Method != http.MethodHead && !(r.Method == http.MethodPut && isVotePath(r.URL.Path)) {
		return 0
	}
	ms, err := strconv.ParseInt(r.URL.Query().Get("wait_ms"), 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return min(milliseconds(ms), coordinator.MaxLongPoll)
}

// isVotePath reports whether path is a vote's: /v1/jobs/{job}/checkpoints/{id}/votes/{p}.
func isVotePath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/jobs/")
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	return len(parts) == 5 && parts[1] == "checkpoints" && parts[3] == "votes"
}

// methodNotAllowed answers 405 with the methods the path does accept in Allow.
func methodNotAllowed(mux *chi.Mux, pw *problemWriter) http.HandlerFunc {
	candidates := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions}
	return func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		var allow []string
		for _, m := range candidates {
			if mux.Match(chi.NewRouteContext(), m, path) || m == http.MethodHead && slices.Contains(allow, http.MethodGet) {
				allow = append(allow, m)
			}
		}
		pw.write(w, r, &requestError{
			code:   codeMethodNotAllowed,
			detail: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path),
			allow:  allow,
		})
	}
}

// RequestID returns the id of the request ctx belongs to, "" outside a request served by
// NewHandler's handler.
func RequestID(ctx context.Context) string {
	return coordinator.RequestID(ctx)
}

// maxRequestIDLength bounds a caller's X-Request-Id; a longer one is replaced.
const maxRequestIDLength = 128

// saneRequestID reports whether a caller's X-Request-Id can be echoed and logged as is:
// 1 to 128 characters that need no quoting anywhere (UUIDs, trace ids, base64).
func saneRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '/', c == '+', c == '=', c == '@', c == '~':
		default:
			return false
		}
	}
	return true
}

// front is what every request goes through before its route is found, in this order: its
// request id and timeout, its access log line, the recovery from a panic, the browser and
// Host guards, its token, HEAD routed as GET, and the route found in routes (or by chi,
// next, when routes cannot tell). One handler calls each step in turn, rather than one
// handler per step wrapping the next: a request waiting for its commit holds every frame
// of its stack meanwhile, and the garbage collector scans them all at each of its cycles,
// so under a memory limit and many requests in flight each frame costs CPU.
func front(opts Options, pw *problemWriter, routes *routeTable) func(http.Handler) http.Handler {
	check := guards(opts)
	cors := corsFor(opts.AllowedOrigins)
	budget := newAnswerBudget(opts.MaxAnswerBytes, opts.LargeAnswerWriteTimeout, opts.Metrics)
	return func(next http.Handler) http.Handler {
		// In front of a chi router, front gives each request the router's routing context
		// itself, from a pool as chi does, so that the request is copied once, not twice.
		mux, _ := next.(*chi.Mux)
		rctxs := sync.Pool{New: func() any { return chi.NewRouteContext() }}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var rctx *chi.Context
			if mux != nil {
				rctx = rctxs.Get().(*chi.Context)
				rctx.Reset()
				rctx.Routes = mux
				defer rctxs.Put(rctx) // after the access log, which reads the route
			}
			r, cancel := withRequestContext(w, r, rctx, opts.RequestTimeout)
			defer cancel()
			aw := &answerWriter{ResponseWriter: w, req: r, budget: budget}
			// Deferred, so that a request aborted by a panic (http.ErrAbortHandler, passed
			// on by recoverPanic) is logged too; recoverPanic runs first, and the line
			// carries its 500.
			defer logAnswer(&accessEntry{logger: opts.Logger, metrics: opts.Metrics, req: r, start: time.Now()}, aw)
			defer recoverPanic(pw, aw, r)
			if err := check(r); err != nil {
				pw.write(aw, r, err)
				return
			}
			if cors(aw, r) {
				return // a preflight, answered
			}
			if opts.UI != nil && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) {
				opts.UI.ServeHTTP(aw, r)
				return
			}
			if opts.Auth != nil && !publicPaths[r.URL.Path] {
				authed, done, err := authenticate(opts.Auth, aw, r)
				if err != nil {
					pw.write(aw, r, err)
					return
				}
				if done != nil {
					defer done()
				}
				r = authed
			}
			headAsGet(r)
			if h := routes.lookup(chi.RouteContext(r.Context()), r); h != nil {
				h.ServeHTTP(aw, r)
				return
			}
			next.ServeHTTP(aw, r)
		})
	}
}

// withRequestContext gives r, in one copy of the request (each copy is garbage to
// collect), the context it is served with: its request id (the caller's X-Request-Id
// when it is sane, else a new one, also set on the response before anything else can
// answer), rctx as chi's routing context when not nil (chi then routes with it instead of
// copying the request to add its own), and the request's timeout (a long poll's wait_ms on
// top), which cancel releases.
func withRequestContext(w http.ResponseWriter, r *http.Request, rctx *chi.Context, timeout time.Duration) (_ *http.Request, cancel context.CancelFunc) {
	id := r.Header.Get("X-Request-Id")
	if !saneRequestID(id) {
		id = rand.Text()
	}
	w.Header().Set("X-Request-Id", id)
	ctx := coordinator.WithRequestID(r.Context(), id)
	if rctx != nil {
		ctx = context.WithValue(ctx, chi.RouteCtxKey, rctx)
	}
	cancel = func() {}
	if timeout > 0 && !isStream(r) {
		ctx, cancel = context.WithTimeout(ctx, timeout+longPoll(r))
	}
	return r.WithContext(ctx), cancel
}

// headAsGet routes a HEAD request as GET when no route answers HEAD itself, as chi's
// middleware.GetHead does: every GET route answers HEAD, without its body (RFC 9110
// 9.3.2: load balancers and monitors probe /healthz with HEAD).
func headAsGet(r *http.Request) {
	if r.Method != http.MethodHead {
		return
	}
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return // not served by a chi router
	}
	path := rctx.RoutePath
	if path == "" {
		path = r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
	}
	if !rctx.Routes.Match(chi.NewRouteContext(), http.MethodHead, path) {
		rctx.RouteMethod, rctx.RoutePath = http.MethodGet, path
	}
}

// accessEntry is the access log line of one request, logged once it is answered: when
// the handler returns, or, for a request the handler parked, once its answer is written.
type accessEntry struct {
	logger  *slog.Logger
	metrics *metrics.Metrics
	req     *http.Request
	start   time.Time
	route   string
}

// logAnswer logs e once the handler has returned: at once, or, for a parked request, once
// its answer is written.
func logAnswer(e *accessEntry, aw *answerWriter) {
	// The route template, never the path: no label takes a name or an id. Read now: front
	// reuses the route context once this request returns.
	e.route = routePattern(e.req)
	aw.releaseHold() // the answer is written, or its client was cut off
	if aw.parked != nil {
		go aw.parked.finish(e.log)
		return
	}
	status := aw.status
	if status == 0 {
		status = http.StatusOK
	}
	e.log(e.req.Context(), status, aw.bytes)
}

func (e *accessEntry) log(ctx context.Context, status, bytes int) {
	r := e.req
	if e.metrics != nil {
		e.metrics.Request(e.route, r.Method, status, time.Since(e.start))
	}
	// Reads are the bulk of the traffic (long-polls, pending, probes): logged at debug
	// unless they fail; changes at info.
	level := slog.LevelInfo
	switch {
	case errors.Is(context.Cause(ctx), context.Canceled) && status == http.StatusServiceUnavailable:
		// The client went away (a participant stopping in the middle of its long-poll):
		// nobody reads the answer, and nothing failed.
		level = slog.LevelDebug
	case status >= 500:
		level = slog.LevelError
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && status < 400:
		level = slog.LevelDebug
	}
	if !e.logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("proto", r.Proto),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(time.Since(e.start).Microseconds())/1000),
		slog.String("request_id", RequestID(ctx)),
		slog.Int("bytes", bytes),
	}
	if trace, ok := traceID(r.Header.Get("traceparent")); ok {
		attrs = append(attrs, slog.String("trace_id", trace))
	}
	e.logger.LogAttrs(ctx, level, "request", attrs...)
}

// recoverPanic, deferred, turns a panic into a logged 500 problem document.
// http.ErrAbortHandler is passed on: it asks the server to drop the connection.
func recoverPanic(pw *problemWriter, w http.ResponseWriter, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	pw.logger.Error("panic", "request_id", RequestID(r.Context()), "method", r.Method,
		"path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	pw.write(w, r, errPanic)
}

// errPanic stands for a recovered panic, which problemFor answers as 500 internal; the
// panic itself is logged by recoverer.
var errPanic = panicError{}

type panicError struct{}

func (panicError) Error() string { return "handler panicked" }

// traceID is the trace id of a W3C Trace Context traceparent header
// ("00-<32 hex>-<16 hex>-<2 hex>"), so that one request can be followed across the services
// that log it; ok is false for a header that is absent or malformed, or an all-zero id.
func traceID(traceparent string) (string, bool) {
	if len(traceparent) < 55 {
		return "", false
	}
	version, trace, parent, flags := traceparent[0:2], traceparent[3:35], traceparent[36:52], traceparent[53:55]
	if traceparent[2] != '-' || traceparent[35] != '-' || traceparent[52] != '-' ||
		!lowerHex(version) || version == "ff" || !lowerHex(trace) || !lowerHex(parent) || !lowerHex(flags) ||
		version == "00" && len(traceparent) != 55 || len(traceparent) > 55 && traceparent[55] != '-' {
		return "", false
	}
	if strings.Trim(trace, "0") == "" || strings.Trim(parent, "0") == "" {
		return "", false
	}
	return trace, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
