package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
)

// stubServer answers the operations the HTTP-layer tests use with what the generated code
// decoded, so a test sees exactly what a real handler would get. Any other operation
// panics (the embedded interface is nil), which the recoverer answers with a 500.
type stubServer struct {
	StrictServerInterface
}

// The problem pages are the real ones: they depend on no service.

func (stubServer) ListProblemTypes(ctx context.Context, req ListProblemTypesRequestObject) (ListProblemTypesResponseObject, error) {
	return problemPages{}.ListProblemTypes(ctx, req)
}

func (stubServer) GetProblemType(ctx context.Context, req GetProblemTypeRequestObject) (GetProblemTypeResponseObject, error) {
	return problemPages{}.GetProblemType(ctx, req)
}

func (stubServer) GetHealthz(context.Context, GetHealthzRequestObject) (GetHealthzResponseObject, error) {
	return ok(Health{Status: "ok"}), nil
}

func (stubServer) PutVote(_ context.Context, req PutVoteRequestObject) (PutVoteResponseObject, error) {
	return ok(req.Body), nil
}

func (stubServer) PutJob(_ context.Context, req PutJobRequestObject) (PutJobResponseObject, error) {
	return ok(req.Body), nil
}

func (stubServer) PutAck(_ context.Context, req PutAckRequestObject) (PutAckResponseObject, error) {
	return ok(req.Body), nil
}

func (stubServer) PrepareCheckpoint(_ context.Context, req PrepareCheckpointRequestObject) (PrepareCheckpointResponseObject, error) {
	return jsonResponse{status: http.StatusCreated, body: map[string]any{"body": req.Body, "key": req.Params.IdempotencyKey}}, nil
}

func (stubServer) AbortCheckpoint(_ context.Context, req AbortCheckpointRequestObject) (AbortCheckpointResponseObject, error) {
	return ok(map[string]any{"body": req.Body}), nil
}

func (stubServer) RegisterParticipant(_ context.Context, req RegisterParticipantRequestObject) (RegisterParticipantResponseObject, error) {
	return ok(Registration{Job: req.Job, Participant: req.Participant, Epoch: 1, Pending: []PendingItem{}}), nil
}

func (stubServer) CommitCheckpoint(_ context.Context, req CommitCheckpointRequestObject) (CommitCheckpointResponseObject, error) {
	return ok(map[string]any{"id": req.Id}), nil
}

func (stubServer) CompleteCheckpoint(_ context.Context, req CompleteCheckpointRequestObject) (CompleteCheckpointResponseObject, error) {
	return ok(map[string]any{"id": req.Id}), nil
}

func (stubServer) GetCheckpoint(_ context.Context, req GetCheckpointRequestObject) (GetCheckpointResponseObject, error) {
	return ok(map[string]any{"id": req.Id, "wait_ms": req.Params.WaitMs}), nil
}

func (stubServer) ListJobs(_ context.Context, req ListJobsRequestObject) (ListJobsResponseObject, error) {
	return ok(JobList{Items: []Job{}}), nil
}

func (stubServer) GetReadyz(context.Context, GetReadyzRequestObject) (GetReadyzResponseObject, error) {
	panic("the stub's readiness probe panics on purpose")
}

// stubHandler is the HTTP layer on stubServer, with a small body limit.
func stubHandler(t *testing.T, logs io.Writer) http.Handler {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	return newHandler(stubServer{}, Options{MaxBodyBytes: 256, Logger: slog.New(slog.NewJSONHandler(logs, nil)), AllowedHosts: testHosts})
}

type rawRequest struct {
	method, path, contentType, body string
	header                          http.Header
	chunked                         bool
}

func (rr rawRequest) do(t *testing.T, h http.Handler) *http.Response {
	t.Helper()
	var body io.Reader
	if rr.body != "" {
		body = strings.NewReader(rr.body)
	}
	r := httptest.NewRequest(rr.method, rr.path, body)
	if rr.chunked {
		r.ContentLength = -1
	}
	for k, vs := range rr.header {
		r.Header[k] = vs
	}
	if rr.contentType != "" {
		r.Header.Set("Content-Type", rr.contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

const votePath = "/v1/jobs/orders/checkpoints/1/votes/sink-a"

func TestInputCheck(t *testing.T) {
	t.Parallel()
	const jsonCT = "application/json"
	big := `{"epoch":1,"vote":"prepared","committables":["` + strings.Repeat("x", 300) + `"]}`
	tests := []struct {
		name   string
		req    rawRequest
		status int
		code   string // for a problem answer
		field  string // the field a 400 must name
		detail string // a substring of the detail
		want   string // for a 2xx answer, its body
	}{
		{name: "valid vote", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT,
			body: `{"epoch":1,"vote":"prepared","committables":[{"txn":"a<b&c"}, 2]}`},
			status: 200, want: `{"committables":[{"txn":"a<b&c"},2],"epoch":1,"vote":"prepared"}`},
		{name: "charset utf-8", req: rawRequest{method: "PUT", path: votePath, contentType: "application/json; charset=UTF-8",
			body: `{"epoch":1,"vote":"abort"}`}, status: 200, want: `{"epoch":1,"vote":"abort"}`},
		{name: "structured suffix", req: rawRequest{method: "PUT", path: votePath, contentType: "application/vnd.twophase+json",
			body: `{"epoch":1,"vote":"abort"}`}, status: 200, want: `{"epoch":1,"vote":"abort"}`},
		{name: "trailing white space", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT,
			body: "{\"epoch\":1,\"vote\":\"abort\"}\r\n\t "}, status: 200, want: `{"epoch":1,"vote":"abort"}`},

		{name: "text/plain", req: rawRequest{method: "PUT", path: votePath, contentType: "text/plain", body: `{"epoch":1,"vote":"abort"}`},
			status: 415, code: "unsupported_media_type"},
		{name: "form", req: rawRequest{method: "PUT", path: votePath, contentType: "application/x-www-form-urlencoded", body: `epoch=1`},
			status: 415, code: "unsupported_media_type"},
		{name: "no content type", req: rawRequest{method: "PUT", path: votePath, body: `{"epoch":1,"vote":"abort"}`},
			status: 415, code: "unsupported_media_type"},
		{name: "latin-1", req: rawRequest{method: "PUT", path: votePath, contentType: "application/json; charset=iso-8859-1", body: `{"epoch":1,"vote":"abort"}`},
			status: 415, code: "unsupported_media_type"},
		{name: "garbled content type", req: rawRequest{method: "PUT", path: votePath, contentType: "application/json; ;;=", body: `{}`},
			status: 415, code: "unsupported_media_type"},
		{name: "jsonp is not json", req: rawRequest{method: "PUT", path: votePath, contentType: "application/jsonp", body: `{}`},
			status: 415, code: "unsupported_media_type"},

		{name: "too large", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: big},
			status: 413, code: "payload_too_large"},
		{name: "too large chunked", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: big, chunked: true},
			status: 413, code: "payload_too_large"},
		{name: "too large without content type", req: rawRequest{method: "PUT", path: votePath, body: big},
			status: 413, code: "payload_too_large"},

		{name: "missing body", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT},
			status: 400, code: "invalid_request", detail: "body is required"},
		{name: "blank body", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: "  \n"},
			status: 400, code: "invalid_request", detail: "body is required"},
		{name: "malformed", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":1,`},
			status: 400, code: "invalid_request", detail: "not valid JSON"},
		{name: "single quotes", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{'epoch':1}`},
			status: 400, code: "invalid_request", detail: "not valid JSON"},
		{name: "two values", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":1,"vote":"abort"} {"epoch":2}`},
			status: 400, code: "invalid_request", detail: "exactly one JSON value"},
		{name: "trailing garbage", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":1,"vote":"abort"}x`},
			status: 400, code: "invalid_request", detail: "exactly one JSON value"},
		{name: "array", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `[{"epoch":1}]`},
			status: 400, code: "invalid_request", detail: "JSON object"},
		{name: "null body", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `null`},
			status: 400, code: "invalid_request", detail: "JSON object"},
		{name: "unknown field", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":1,"vote":"abort","force":true}`},
			status: 400, code: "invalid_request", field: "force", detail: "not a field of VoteRequest"},
		{name: "field in the wrong case", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"Epoch":1,"vote":"abort"}`},
			status: 400, code: "invalid_request", field: "Epoch", detail: `did you mean \"epoch\"`},
		{name: "duplicate field", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":1,"vote":"abort","epoch":2}`},
			status: 400, code: "invalid_request", field: "epoch", detail: "more than once"},
		{name: "missing epoch", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"vote":"abort"}`},
			status: 400, code: "invalid_request", field: "epoch", detail: "required"},
		{name: "missing vote", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":1}`},
			status: 400, code: "invalid_request", field: "vote", detail: "required"},
		{name: "null epoch", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":null,"vote":"abort"}`},
			status: 400, code: "invalid_request", field: "epoch", detail: "null"},
		{name: "null committables", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":1,"vote":"prepared","committables":null}`},
			status: 400, code: "invalid_request", field: "committables", detail: "null"},
		{name: "epoch as a string", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":"1","vote":"abort"}`},
			status: 400, code: "invalid_request", field: "epoch", detail: "must be an integer, got string"},
		{name: "fractional epoch", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":1.5,"vote":"abort"}`},
			status: 400, code: "invalid_request", field: "epoch", detail: "must be an integer"},
		{name: "huge epoch", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":99999999999999999999,"vote":"abort"}`},
			status: 400, code: "invalid_request", field: "epoch", detail: "must be an integer"},
		{name: "vote as a number", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: `{"epoch":1,"vote":1}`},
			status: 400, code: "invalid_request", field: "vote", detail: "must be a string"},
		{name: "invalid UTF-8", req: rawRequest{method: "PUT", path: votePath, contentType: jsonCT, body: "{\"epoch\":1,\"vote\":\"abort\",\"reason\":\"\xff\"}"},
			status: 400, code: "invalid_request", detail: "UTF-8"},

		{name: "job config", req: rawRequest{method: "PUT", path: "/v1/jobs/orders", contentType: jsonCT, body: `{"participants":["a","b"],"auto_commit":false}`},
			status: 200, want: `{"auto_commit":false,"participants":["a","b"]}`},
		{name: "job without participants", req: rawRequest{method: "PUT", path: "/v1/jobs/orders", contentType: jsonCT, body: `{"auto_commit":false}`},
			status: 400, code: "invalid_request", field: "participants", detail: "required"},
		{name: "participants not strings", req: rawRequest{method: "PUT", path: "/v1/jobs/orders", contentType: jsonCT, body: `{"participants":["a",1]}`},
			status: 400, code: "invalid_request", field: "participants", detail: "must be an array of strings"},
		{name: "auto_commit as a string", req: rawRequest{method: "PUT", path: "/v1/jobs/orders", contentType: jsonCT, body: `{"participants":["a"],"auto_commit":"yes"}`},
			status: 400, code: "invalid_request", field: "auto_commit", detail: "true or false"},
		{name: "ack", req: rawRequest{method: "PUT", path: "/v1/jobs/orders/checkpoints/1/acks/sink-a", contentType: jsonCT, body: `{"epoch":3}`},
			status: 200, want: `{"epoch":3}`},
		{name: "ack without epoch", req: rawRequest{method: "PUT", path: "/v1/jobs/orders/checkpoints/1/acks/sink-a", contentType: jsonCT, body: `{}`},
			status: 400, code: "invalid_request", field: "epoch", detail: "required"},

		{name: "prepare without body", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints"},
			status: 201, want: `{"body":null,"key":null}`},
		{name: "prepare with {}", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints", contentType: jsonCT, body: `{}`},
			status: 201, want: `{"body":{},"key":null}`},
		{name: "prepare with a timeout and a key", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints", contentType: jsonCT,
			body: `{"timeout_ms":5000}`, header: http.Header{"Idempotency-Key": {"k1"}}},
			status: 201, want: `{"body":{"timeout_ms":5000},"key":"k1"}`},
		{name: "prepare with two keys", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints", header: http.Header{"Idempotency-Key": {"k1", "k2"}}},
			status: 400, code: "invalid_request", field: "Idempotency-Key"},
		{name: "prepare with a text body", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints", contentType: "text/plain", body: `timeout=5`},
			status: 415, code: "unsupported_media_type"},
		{name: "prepare with null", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints", contentType: jsonCT, body: `null`},
			status: 400, code: "invalid_request", detail: "JSON object"},
		{name: "abort without body", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints/1/abort"},
			status: 200, want: `{"body":null}`},
		{name: "abort with a reason", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints/1/abort", contentType: jsonCT, body: `{"reason":"disk full"}`},
			status: 200, want: `{"body":{"reason":"disk full"}}`},
		{name: "abort with an unknown field", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints/1/abort", contentType: jsonCT, body: `{"why":"x"}`},
			status: 400, code: "invalid_request", field: "why"},

		// Operations without a body: curl -X POST sends none and no Content-Type.
		{name: "register without body", req: rawRequest{method: "POST", path: "/v1/jobs/orders/participants/sink-a/register"},
			status: 200, want: `{"epoch":1,"job":"orders","participant":"sink-a","pending":[]}`},
		{name: "register with {}", req: rawRequest{method: "POST", path: "/v1/jobs/orders/participants/sink-a/register", contentType: jsonCT, body: ` {} `},
			status: 200, want: `{"epoch":1,"job":"orders","participant":"sink-a","pending":[]}`},
		{name: "register with fields", req: rawRequest{method: "POST", path: "/v1/jobs/orders/participants/sink-a/register", contentType: jsonCT, body: `{"epoch":3}`},
			status: 400, code: "invalid_request", field: "epoch", detail: "takes no body"},
		{name: "register with a text body", req: rawRequest{method: "POST", path: "/v1/jobs/orders/participants/sink-a/register", contentType: "text/plain", body: `hello`},
			status: 415, code: "unsupported_media_type"},
		{name: "commit without body", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints/3/commit"},
			status: 200, want: `{"id":3}`},
		{name: "commit with JSON content type and no body", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints/3/commit", contentType: jsonCT},
			status: 200, want: `{"id":3}`},
		{name: "commit with an array", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints/3/commit", contentType: jsonCT, body: `[]`},
			status: 400, code: "invalid_request", detail: "JSON object"},

		// Parameters.
		{name: "id not a number", req: rawRequest{method: "GET", path: "/v1/jobs/orders/checkpoints/abc"},
			status: 400, code: "invalid_request", field: "id", detail: "integer"},
		{name: "id too large", req: rawRequest{method: "POST", path: "/v1/jobs/orders/checkpoints/99999999999999999999/commit"},
			status: 400, code: "invalid_request", field: "id"},
		{name: "wait_ms not a number", req: rawRequest{method: "GET", path: "/v1/jobs/orders/checkpoints/1?wait_ms=soon"},
			status: 400, code: "invalid_request", field: "wait_ms", detail: "integer"},
		{name: "limit not a number", req: rawRequest{method: "GET", path: "/v1/jobs?limit=x"},
			status: 400, code: "invalid_request", field: "limit", detail: "integer"},
		{name: "wait_ms passes", req: rawRequest{method: "GET", path: "/v1/jobs/orders/checkpoints/1?wait_ms=250"},
			status: 200, want: `{"id":1,"wait_ms":250}`},

		// Routing.
		{name: "unknown path", req: rawRequest{method: "GET", path: "/v2/jobs"}, status: 404, code: "not_found"},
		{name: "unknown subresource", req: rawRequest{method: "GET", path: "/v1/jobs/orders/nothing"}, status: 404, code: "not_found"},
		{name: "wrong method", req: rawRequest{method: "PATCH", path: "/v1/jobs/orders"}, status: 405, code: "method_not_allowed"},
		{name: "unknown method", req: rawRequest{method: "BREW", path: "/healthz"}, status: 405, code: "method_not_allowed"},
		{name: "panic", req: rawRequest{method: "GET", path: "/readyz"}, status: 500, code: "internal"},
	}
	h := stubHandler(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp := tt.req.do(t, h)
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id on the response")
			}
			if tt.code == "" {
				defer resp.Body.Close()
				got, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != tt.status || strings.TrimSpace(string(got)) != tt.want {
					t.Fatalf("got %d %s, want %d %s", resp.StatusCode, got, tt.status, tt.want)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q", ct)
				}
				return
			}
			p := decodeProblem(t, resp, tt.status, tt.code)
			raw, _ := json.Marshal(p)
			if tt.detail != "" && !strings.Contains(string(raw), tt.detail) {
				t.Errorf("problem %s does not say %q", raw, tt.detail)
			}
			if tt.field != "" {
				found := false
				if p.Errors != nil {
					for _, e := range *p.Errors {
						found = found || e.Field == tt.field
					}
				}
				if !found {
					t.Errorf("problem %s does not name the field %q", raw, tt.field)
				}
			}
		})
	}
}

func TestMethodNotAllowedListsAllow(t *testing.T) {
	t.Parallel()
	h := stubHandler(t, nil)
	resp := rawRequest{method: "POST", path: "/v1/jobs/orders"}.do(t, h)
	decodeProblem(t, resp, 405, "method_not_allowed")
	if got := strings.Join(resp.Header.Values("Allow"), ","); got != "GET,HEAD,PUT,DELETE" {
		t.Errorf("Allow = %q, want GET,HEAD,PUT,DELETE", got)
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	h := stubHandler(t, nil)
	tests := []struct {
		name, sent string
		echoed     bool
	}{
		{"uuid", "3f2b8c1e-8f0e-4c2a-9a51-6d1c0e7f4b2a", true},
		{"trace id", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"none", "", false},
		{"spaces", "hello world", false},
		{"newline injection", "abc\r\nSet-Cookie: x=y", false},
		{"too long", strings.Repeat("a", 129), false},
		{"unicode", "ïd", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/v1/nowhere", nil)
			if tt.sent != "" {
				r.Header["X-Request-Id"] = []string{tt.sent}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			got := w.Header().Get("X-Request-Id")
			if tt.echoed && got != tt.sent {
				t.Errorf("X-Request-Id = %q, want %q echoed", got, tt.sent)
			}
			if !tt.echoed && (got == "" || got == tt.sent || !saneRequestID(got)) {
				t.Errorf("X-Request-Id = %q, want a fresh sane one", got)
			}
			p := decodeProblem(t, w.Result(), 404, "not_found")
			if p.RequestId == nil || *p.RequestId != got {
				t.Errorf("problem request_id = %v, header %q", p.RequestId, got)
			}
		})
	}
}

// One line per request, with its method, path, status, duration, request id and size: at
// info for a change, at debug for a read that succeeded (the bulk of the traffic: probes,
// long-polls), so an info log shows what changed.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	var line struct {
		Level      string  `json:"level"`
		Msg        string  `json:"msg"`
		Method     string  `json:"method"`
		Path       string  `json:"path"`
		Status     int     `json:"status"`
		DurationMS float64 `json:"duration_ms"`
		RequestID  string  `json:"request_id"`
		Bytes      int     `json:"bytes"`
	}
	serve := func(level slog.Level, method, path string) (*httptest.ResponseRecorder, []byte) {
		var logs bytes.Buffer
		h := newHandler(stubServer{}, Options{MaxBodyBytes: 256, AllowedHosts: testHosts,
			Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: level}))})
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("X-Request-Id", "log-me")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w, logs.Bytes()
	}
	w, logs := serve(slog.LevelDebug, "GET", "/healthz")
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"status":"ok"}` {
		t.Fatalf("healthz = %d %s", w.Code, w.Body.String())
	}
	if err := json.Unmarshal(logs, &line); err != nil {
		t.Fatalf("log %q: %v", logs, err)
	}
	if line.Msg != "request" || line.Method != "GET" || line.Path != "/healthz" || line.Status != 200 ||
		line.RequestID != "log-me" || line.Bytes != w.Body.Len() || line.DurationMS < 0 || line.Level != "DEBUG" {
		t.Errorf("access log line of a read = %+v", line)
	}
	if _, logs := serve(slog.LevelInfo, "GET", "/healthz"); len(logs) != 0 {
		t.Errorf("a read that succeeded logged at info: %s", logs)
	}
	// A change refused before it reaches the service (no body declared JSON: 415).
	w, logs = serve(slog.LevelInfo, "POST", "/v1/jobs/j/checkpoints")
	line.Level = ""
	if err := json.Unmarshal(logs, &line); err != nil {
		t.Fatalf("log of a change %q: %v", logs, err)
	}
	if line.Method != "POST" || line.Status != w.Code || w.Code >= 500 || line.Level != "INFO" {
		t.Errorf("access log line of a change = %+v (answer %d)", line, w.Code)
	}
}

func TestPanicIsLoggedWithRequestID(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h := stubHandler(t, &logs)
	r := httptest.NewRequest("GET", "/readyz", nil)
	r.Header.Set("X-Request-Id", "panic-1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	p := decodeProblem(t, w.Result(), 500, "internal")
	if strings.Contains(*p.Detail, "on purpose") {
		t.Errorf("the panic leaked into the answer: %s", *p.Detail)
	}
	if !strings.Contains(logs.String(), "on purpose") || !strings.Contains(logs.String(), `"request_id":"panic-1"`) {
		t.Errorf("the panic is not logged with its request id: %s", logs.String())
	}
	// The access log line is written after the panic is answered, and says so.
	var line struct {
		Msg    string `json:"msg"`
		Status int    `json:"status"`
	}
	found := false
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "request" {
			found = true
			if line.Status != 500 {
				t.Errorf("the access log line says status %d, want the 500 answered: %s", line.Status, l)
			}
		}
	}
	if !found {
		t.Errorf("no access log line: %s", logs.String())
	}
}

// TestRequestBodiesCoverRoutes checks requestBodies against the generated routes, so that
// a renamed path cannot silently drop its body check.
func TestRequestBodiesCoverRoutes(t *testing.T) {
	t.Parallel()
	routes := map[string]bool{}
	mux := newRouter(stubServer{}, Options{AllowedHosts: testHosts}, &problemWriter{logger: slog.New(slog.DiscardHandler)})
	err := chi.Walk(mux, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 29 {
		t.Errorf("%d routes, want the 29 operations of openapi.yaml: %v", len(routes), routes)
	}
	for key, spec := range requestBodies {
		if !routes[key] {
			t.Errorf("requestBodies has %q, which is no route", key)
		}
		if spec.model.Kind().String() != "struct" {
			t.Errorf("%s: model %v is not a struct", key, spec.model)
		}
	}
}

func TestCheckMediaType(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/json":                   true,
		"Application/JSON":                   true,
		"application/json;charset=utf-8":     true,
		"application/json; charset=\"utf8\"": true,
		"application/problem+json":           true,
		"application/merge-patch+json":       true,
		"application/json; version=2":        true,
		"":                                   false,
		"text/json":                          false,
		"application/json+xml":               false,
		"application/+json ":                 true,
		"application/json; charset=utf-16":   false,
		"application":                        false,
		"multipart/form-data; boundary=x":    false,
	} {
		if got := checkMediaType(ct) == nil; got != want {
			t.Errorf("checkMediaType(%q) accepted = %v, want %v", ct, got, want)
		}
	}
}

// slowServer waits for its context to end, as a handler stuck on the database would.
type slowServer struct{ stubServer }

func (slowServer) ListJobs(ctx context.Context, _ ListJobsRequestObject) (ListJobsResponseObject, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// GetCheckpoint answers how long its context had left, to show the long poll's extension.
func (slowServer) GetCheckpoint(ctx context.Context, _ GetCheckpointRequestObject) (GetCheckpointResponseObject, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return ok200("no deadline"), nil
	}
	return ok200(time.Until(deadline).Round(time.Second).String()), nil
}

func ok200(s string) jsonResponse { return ok(map[string]string{"left": s}) }

func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	h := newHandler(slowServer{}, Options{RequestTimeout: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), AllowedHosts: testHosts})
	resp := rawRequest{method: "GET", path: "/v1/jobs"}.do(t, h)
	decodeProblem(t, resp, 503, "unavailable")
	if resp.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q", resp.Header.Get("Retry-After"))
	}

	h = newHandler(slowServer{}, Options{RequestTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler), AllowedHosts: testHosts})
	for query, want := range map[string]string{"": "10s", "?wait_ms=20000": "30s", "?wait_ms=0": "10s"} {
		resp := rawRequest{method: "GET", path: "/v1/jobs/j/checkpoints/1" + query}.do(t, h)
		got, _ := io.ReadAll(resp.Body)
		if strings.TrimSpace(string(got)) != `{"left":"`+want+`"}` {
			t.Errorf("GET checkpoint%s: %s, want %s left", query, got, want)
		}
	}
}

// FuzzInputCheck sends arbitrary bodies and content types to every operation that reads a
// body: the answer is never a 5xx, an error is always a problem document, and a body the
// check lets through decodes into the operation's model with nothing unknown or missing.
func FuzzInputCheck(f *testing.F) {
	for _, seed := range []struct{ contentType, body string }{
		{"application/json", `{"epoch":1,"vote":"prepared","committables":[{"txn":"a"}]}`},
		{"application/json", `{"participants":["a","b"],"checkpoint_timeout_ms":100}`},
		{"application/json", `{"epoch":1,"vote":"abort","reason":"x","epoch":2}`},
		{"application/json; charset=utf-8", `{"timeout_ms":1000}`},
		{"application/json", `{"Epoch":1}`},
		{"application/json", `{}`},
		{"application/json", `null`},
		{"application/json", `[1] 2`},
		{"application/merge-patch+json", `{"reason":"\u0000"}`},
		{"text/plain", `{}`},
		{"", ``},
		{"", ` `},
	} {
		f.Add(seed.contentType, seed.body)
	}
	h := newHandler(stubServer{}, Options{MaxBodyBytes: 4096, Logger: slog.New(slog.DiscardHandler), AllowedHosts: testHosts})
	operations := []struct {
		method, path string
		model        any
	}{
		{"PUT", votePath, &VoteRequest{}},
		{"PUT", "/v1/jobs/orders", &JobConfig{}},
		{"PUT", "/v1/jobs/orders/checkpoints/1/acks/sink-a", &AckRequest{}},
		{"POST", "/v1/jobs/orders/checkpoints", &PrepareRequest{}},
		{"POST", "/v1/jobs/orders/checkpoints/1/abort", &AbortRequest{}},
		{"POST", "/v1/jobs/orders/participants/sink-a/register", &struct{}{}},
		{"POST", "/v1/jobs/orders/checkpoints/1/commit", &CommitRequest{}},
		{"POST", "/v1/jobs/orders/checkpoints/1/complete", &CompleteRequest{}},
	}
	f.Fuzz(func(t *testing.T, contentType, body string) {
		for _, op := range operations {
			resp := rawRequest{method: op.method, path: op.path, contentType: contentType, body: body}.do(t, h)
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode >= 500 {
				t.Fatalf("%s %s with %q %q: %d %s", op.method, op.path, contentType, body, resp.StatusCode, got)
			}
			if resp.StatusCode >= 400 {
				if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("%s %s: error answered as %q", op.method, op.path, ct)
				}
				continue
			}
			if strings.TrimSpace(body) == "" {
				continue
			}
			dec := json.NewDecoder(strings.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(op.model); err != nil {
				t.Fatalf("%s %s accepted %q, which does not decode strictly: %v", op.method, op.path, body, err)
			}
		}
	})
}
