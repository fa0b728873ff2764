package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

func TestProblemTable(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	cp := &coordinator.Checkpoint{
		Job: "orders", ID: 7, Status: coordinator.StatusPreparing, CreatedAt: now, Deadline: now.Add(time.Minute),
		Participants: []coordinator.ParticipantState{{Name: "sink-a"}, {Name: "sink-b"}},
	}
	tests := []struct {
		name   string
		err    error
		status int
		code   string
		check  func(t *testing.T, p Problem)
	}{
		{name: "invalid request with fields", err: &coordinator.Error{Code: coordinator.CodeInvalidRequest, Message: "the request is not valid",
			Fields: []coordinator.FieldError{{Field: "epoch", Message: "must be 1 or more"}}},
			status: 400, code: "invalid_request", check: func(t *testing.T, p Problem) {
				if p.Errors == nil || len(*p.Errors) != 1 || (*p.Errors)[0].Field != "epoch" {
					t.Errorf("errors = %+v, want one about epoch", p.Errors)
				}
				if p.Detail == nil || !strings.Contains(*p.Detail, "epoch: must be 1 or more") {
					t.Errorf("detail = %v, want the field spelt out", p.Detail)
				}
			}},
		{name: "not found", err: coordinator.ErrNotFound, status: 404, code: "not_found"},
		{name: "vote conflict", err: coordinator.ErrVoteConflict, status: 409, code: "vote_conflict"},
		{name: "fenced carries the checkpoint", err: &coordinator.Error{Code: coordinator.CodeFenced, Message: "stale", Checkpoint: cp},
			status: 409, code: "fenced", check: func(t *testing.T, p Problem) {
				if p.Checkpoint == nil || p.Checkpoint.Id != 7 || p.Checkpoint.Job != "orders" {
					t.Fatalf("checkpoint = %+v, want orders/7", p.Checkpoint)
				}
				if p.Checkpoint.CreatedAt.Location() != time.UTC {
					t.Errorf("created_at in %v, want UTC", p.Checkpoint.CreatedAt.Location())
				}
				if got := p.Checkpoint.Participants[0]; got.Vote != nil || got.Epoch != nil || string(got.Committables) != "[]" {
					t.Errorf("unvoted participant = %+v, want null vote and epoch, [] committables", got)
				}
			}},
		{name: "not registered", err: coordinator.ErrNotRegistered, status: 409, code: "not_registered"},
		{name: "already decided", err: coordinator.ErrAlreadyDecided, status: 409, code: "already_decided"},
		{name: "not decided", err: coordinator.ErrNotDecided, status: 409, code: "not_decided"},
		{name: "votes missing names them", err: &coordinator.Error{Code: coordinator.CodeVotesMissing, Message: "lacks", Checkpoint: cp, Missing: []string{"sink-b"}},
			status: 409, code: "votes_missing", check: func(t *testing.T, p Problem) {
				if p.Missing == nil || fmt.Sprint(*p.Missing) != "[sink-b]" {
					t.Errorf("missing = %v, want [sink-b]", p.Missing)
				}
			}},
		{name: "lower checkpoint open", err: coordinator.ErrLowerCheckpointOpen, status: 409, code: "lower_checkpoint_open"},
		{name: "too many checkpoints", err: coordinator.ErrTooManyCheckpoints, status: 409, code: "too_many_checkpoints"},
		{name: "idempotency conflict", err: coordinator.ErrIdempotencyConflict, status: 409, code: "idempotency_conflict"},
		{name: "job busy", err: coordinator.ErrJobBusy, status: 409, code: "job_busy"},
		{name: "wrapped domain error", err: fmt.Errorf("record vote: %w", coordinator.ErrFenced), status: 409, code: "fenced"},
		{name: "unavailable hides the cause", err: fmt.Errorf("update: %w", coordinator.Unavailable(errors.New("dial tcp 10.0.0.1: secret"))),
			status: 503, code: "unavailable", check: func(t *testing.T, p Problem) {
				if p.Detail == nil || strings.Contains(*p.Detail, "secret") {
					t.Errorf("detail = %v, want one without the cause", p.Detail)
				}
			}},
		{name: "timeout", err: fmt.Errorf("query: %w", context.DeadlineExceeded), status: 503, code: "unavailable"},
		{name: "canceled", err: context.Canceled, status: 503, code: "unavailable"},
		{name: "body too large", err: &http.MaxBytesError{Limit: 10}, status: 413, code: "payload_too_large"},
		{name: "media type", err: &requestError{code: codeUnsupportedMediaType, detail: "text/plain"}, status: 415, code: "unsupported_media_type"},
		{name: "bad path parameter", err: &paramError{err: &InvalidParamFormatError{ParamName: "id", Err: errors.New("strconv")}},
			status: 400, code: "invalid_request", check: func(t *testing.T, p Problem) {
				if p.Errors == nil || (*p.Errors)[0].Field != "id" || !strings.Contains((*p.Errors)[0].Message, "integer") {
					t.Errorf("errors = %+v, want id must be an integer", p.Errors)
				}
			}},
		{name: "repeated header", err: &paramError{err: &TooManyValuesForParamError{ParamName: "Idempotency-Key", Count: 2}}, status: 400, code: "invalid_request"},
		{name: "unknown domain code", err: &coordinator.Error{Code: "brand_new"}, status: 500, code: "internal"},
		{name: "unknown error", err: errors.New("pq: password authentication failed for secret"), status: 500, code: "internal",
			check: func(t *testing.T, p Problem) {
				if p.Detail == nil || strings.Contains(*p.Detail, "secret") {
					t.Errorf("detail = %v, want a generic one", p.Detail)
				}
			}},
		{name: "panic", err: errPanic, status: 500, code: "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			pw := &problemWriter{logger: slog.New(slog.NewJSONHandler(&logs, nil))}
			r := httptest.NewRequest(http.MethodGet, "/v1/jobs/x", nil)
			r = r.WithContext(coordinator.WithRequestID(r.Context(), "req-42"))
			w := httptest.NewRecorder()
			pw.write(w, r, tt.err)

			p := decodeProblem(t, w.Result(), tt.status, tt.code)
			if p.RequestId == nil || *p.RequestId != "req-42" {
				t.Errorf("request_id = %v, want req-42", p.RequestId)
			}
			if got := w.Header().Get("Retry-After"); (tt.status == 503) != (got == "1") {
				t.Errorf("Retry-After = %q with status %d", got, tt.status)
			}
			// A panic is logged by recoverer, with its stack (TestPanicIsLoggedWithRequestID).
			if tt.status == 500 && tt.err != errPanic && !strings.Contains(logs.String(), `"request_id":"req-42"`) {
				t.Errorf("a 500 must log the real error with the request id; log: %s", logs.String())
			}
			if tt.status < 500 && logs.Len() > 0 {
				t.Errorf("a client error logged: %s", logs.String())
			}
			if tt.check != nil {
				tt.check(t, p)
			}
		})
	}
}

// TestProblemKindsAreComplete checks that every domain code has a row in the table and
// every row a real HTTP status and title.
func TestProblemKindsAreComplete(t *testing.T) {
	t.Parallel()
	for _, code := range []coordinator.Code{
		coordinator.CodeInvalidRequest, coordinator.CodeNotFound, coordinator.CodeVoteConflict,
		coordinator.CodeFenced, coordinator.CodeNotRegistered, coordinator.CodeAlreadyDecided,
		coordinator.CodeNotDecided, coordinator.CodeVotesMissing, coordinator.CodeLowerCheckpointOpen,
		coordinator.CodeTooManyCheckpoints, coordinator.CodeIdempotencyConflict, coordinator.CodeJobBusy,
		coordinator.CodeUnavailable,
	} {
		if _, ok := problemKinds[string(code)]; !ok {
			t.Errorf("domain code %s has no row in problemKinds", code)
		}
	}
	for code, k := range problemKinds {
		if http.StatusText(k.status) == "" || k.title == "" {
			t.Errorf("%s: status %d, title %q", code, k.status, k.title)
		}
	}
}

// TestProblemAfterResponseBegan checks that an error after the answer began does not
// write a second status line.
func TestProblemAfterResponseBegan(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h := testFront(slog.New(slog.DiscardHandler))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"partial":`))
		(&problemWriter{logger: slog.New(slog.NewTextHandler(&logs, nil))}).write(w, r, errors.New("encoder broke"))
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != 200 || w.Body.String() != `{"partial":` {
		t.Errorf("got %d %q, want the begun answer untouched", w.Code, w.Body.String())
	}
	if !strings.Contains(logs.String(), "encoder broke") {
		t.Errorf("the error was not logged: %s", logs.String())
	}
}

// testFront is front with logger, every Host allowed and no authentication.
func testFront(logger *slog.Logger) func(http.Handler) http.Handler {
	return front(Options{Logger: logger, AllowedHosts: []string{AnyHost}}, &problemWriter{logger: logger}, nil)
}

// decodeProblem checks that resp is a problem document with status and code and returns it.
func decodeProblem(t *testing.T, resp *http.Response, status int, code string) Problem {
	t.Helper()
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != status {
		t.Errorf("status = %d, want %d; body %s", resp.StatusCode, status, body.String())
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p Problem
	dec := json.NewDecoder(&body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decode problem: %v", err)
	}
	if string(p.Code) != code || p.Status != status || p.Type != "/problems/"+code || p.Title == "" {
		t.Errorf("problem = code %q status %d type %q title %q, want %s %d", p.Code, p.Status, p.Type, p.Title, code, status)
	}
	if strconv.Itoa(p.Status) != strconv.Itoa(resp.StatusCode) {
		t.Errorf("body status %d differs from the response's %d", p.Status, resp.StatusCode)
	}
	return p
}

// The request line carries the trace id of a W3C traceparent header, and only of a valid one.
func TestTraceparentLogged(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h := testFront(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for header, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       "4bf92f3577b34da6a3ce929d0e0e4736",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":       "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":       "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x":     "",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       "",
		"garbage": "",
	} {
		logs.Reset()
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("traceparent", header)
		h.ServeHTTP(httptest.NewRecorder(), req)
		var line map[string]any
		if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", logs.String(), err)
		}
		got, _ := line["trace_id"].(string)
		if got != want {
			t.Errorf("traceparent %q: trace_id %q, want %q", header, got, want)
		}
	}
}

// unavailableServer answers every prepare as the service does when the store gave up on
// the request.
type unavailableServer struct{ stubServer }

func (unavailableServer) PrepareCheckpoint(ctx context.Context, _ PrepareCheckpointRequestObject) (PrepareCheckpointResponseObject, error) {
	return nil, &coordinator.Error{Code: coordinator.CodeUnavailable, Message: "the request timed out before it was applied, and nothing of it was: retry it"}
}

// A 503 is a warning in the log, unless its client had gone away: a trigger or a
// participant stopping mid-request is nothing an operator must look at.
func TestUnavailableOfAGoneClientIsNotAWarning(t *testing.T) {
	t.Parallel()
	for _, gone := range []bool{false, true} {
		var logs bytes.Buffer
		h := newHandler(unavailableServer{}, Options{MaxBodyBytes: 256, AllowedHosts: testHosts,
			Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		ctx, cancel := context.WithCancel(context.Background())
		if gone {
			cancel()
		}
		r := httptest.NewRequestWithContext(ctx, "POST", "/v1/jobs/j/checkpoints", strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		cancel()
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("gone %v: status %d, want 503: %s", gone, w.Code, w.Body.String())
		}
		warnings := strings.Count(logs.String(), `"level":"WARN"`)
		debug := strings.Count(logs.String(), `"msg":"request canceled"`)
		switch {
		case gone && (warnings != 0 || debug != 1):
			t.Errorf("client gone: %d warnings and %d \"request canceled\" debug lines, want 0 and 1; log:\n%s", warnings, debug, logs.String())
		case !gone && warnings != 1:
			t.Errorf("client there: %d warnings, want 1 (unavailable); log:\n%s", warnings, logs.String())
		}
	}
}

// A request aborted by a panic (http.ErrAbortHandler, which recoverer passes on so that
// the server drops the connection) still gets its access log line.
func TestAccessLogOfAnAbortedRequest(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := testFront(logger)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Errorf("panic %v passed on, want http.ErrAbortHandler", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/jobs/j/checkpoints", nil))
	}()
	if !strings.Contains(logs.String(), "msg=request method=POST path=/v1/jobs/j/checkpoints") {
		t.Fatalf("no access log line for the aborted request: %q", logs.String())
	}
}
