package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/twophase/coordinator/coordinator"
)

// The codes the HTTP layer adds to the domain's.
const (
	codeInvalidRequest       = string(coordinator.CodeInvalidRequest)
	codeNotFound             = string(coordinator.CodeNotFound)
	codeMethodNotAllowed     = "method_not_allowed"
	codePayloadTooLarge      = "payload_too_large"
	codeUnsupportedMediaType = "unsupported_media_type"
	codeUnavailable          = string(coordinator.CodeUnavailable)
	codeInternal             = "internal"
)

// problemTypeBase prefixes a code to name its problem type (RFC 9457 "type"): the path of
// the page about the code that every coordinator serves (problemPages). It is a relative
// reference, resolved against the request's URI, so that it names the coordinator that
// answered without trusting the client's Host header.
const problemTypeBase = "/problems/"

// problemKind is how one code is answered, and what its page says.
type problemKind struct {
	code   string
	status int
	title  string
	// when, retry and action are the page about the code (GET /problems/{code}, and
	// docs/problems.md): when the code is answered, whether to retry the request as it was,
	// and what to do instead. Text between backquotes is code. TestProblemPages checks
	// that none is missing.
	when, retry, action string
}

// problemTable lists every code the coordinator answers, in the order of its pages.
var problemTable = []problemKind{
	{
		code: codeInvalidRequest, status: http.StatusBadRequest, title: "Invalid request",
		when: "The request is not one the coordinator accepts as it is: malformed JSON, unknown or " +
			"repeated fields, fields in the wrong case, `null` or wrong types, a value out of bounds, " +
			"a job or participant name that does not match `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, " +
			"a checkpoint id below 1, a parameter or header that does not parse, a query parameter " +
			"the operation does not declare (`?limt=5`), or a query string that does not parse. " +
			"The member `errors` lists what is wrong, field by field, and `detail` spells it out.",
		retry: "No: the same request gets the same answer. It changed nothing.",
		action: "Fix the fields that `errors` names and send the corrected request. " +
			"The operations and their parameters are in `openapi.yaml`.",
	},
	{
		code: codeNotFound, status: http.StatusNotFound, title: "Not found",
		when: "No such job, checkpoint, or participant of the job or of the checkpoint (a checkpoint " +
			"keeps the participants its job had when it was opened), or no such path, or no such " +
			"problem code under `/problems`.",
		retry: "No, not as it is: it answers the same until the job or checkpoint exists.",
		action: "Check the names and the id. Create a job with `PUT /v1/jobs/{job}`; a participant " +
			"must be in the job's `participants`; checkpoint ids are those `POST /v1/jobs/{job}/checkpoints` " +
			"returned. `GET /v1/jobs` and `GET /v1/jobs/{job}/checkpoints` list what exists.",
	},
	{
		code: codeMethodNotAllowed, status: http.StatusMethodNotAllowed, title: "Method not allowed",
		when:   "The path exists, but not with this method. The `Allow` header lists the methods it takes.",
		retry:  "No.",
		action: "Use one of the methods in `Allow` (every `GET` also answers `HEAD`).",
	},
	{
		code: string(coordinator.CodeVoteConflict), status: http.StatusConflict, title: "Vote conflict",
		when: "A participant that already voted on the checkpoint sent a different vote (another kind, " +
			"or other committables). The vote recorded first stands, and `checkpoint` shows it. The " +
			"same vote again is no conflict: it answers 200.",
		retry: "No: a vote is never changed.",
		action: "This is a bug in the participant: it must send the same vote on every attempt. " +
			"Go on from the vote the checkpoint records.",
	},
	{
		code: string(coordinator.CodeFenced), status: http.StatusConflict, title: "Fenced: stale epoch",
		when: "A vote or ack carried an epoch that is not the participant's current one: the participant " +
			"registered again since (each registration gives a new epoch), normally as a newer instance " +
			"of it. Fencing is checked before idempotency, so even a repeat of an accepted request is " +
			"refused. `checkpoint` shows the checkpoint.",
		retry: "No: no request with this epoch will be accepted again.",
		action: "Stop this instance: stop writing and leave its prepared work alone, which is the newer " +
			"instance's to resolve. If no other instance runs, register again " +
			"(`POST /v1/jobs/{job}/participants/{participant}/register`) and start over from what " +
			"`pending` lists.",
	},
	{
		code: string(coordinator.CodeNotRegistered), status: http.StatusConflict, title: "Participant not registered",
		when:  "A vote or ack from a participant that never registered, or one with epoch 0.",
		retry: "No, not before registering.",
		action: "Register (`POST /v1/jobs/{job}/participants/{participant}/register`) on every start, " +
			"and send the epoch it returns with every vote and ack. Then do what its `pending` lists.",
	},
	{
		code: string(coordinator.CodeAlreadyDecided), status: http.StatusConflict, title: "Checkpoint already decided",
		when: "A first vote on a checkpoint that is already decided, also one aborted because its " +
			"deadline passed before the vote came; or a decision that would reverse one (a commit of an " +
			"aborted checkpoint, an abort of a committing or committed one). `checkpoint` shows the " +
			"checkpoint as it stands.",
		retry: "No: a decision is never reversed.",
		action: "After a vote: if `checkpoint` does not show your `prepared` vote, the vote was never " +
			"counted: roll that prepared work back yourself, since nobody will ask for it. After a commit " +
			"or an abort: the checkpoint's `status` is the decision; go by it.",
	},
	{
		code: string(coordinator.CodeNotDecided), status: http.StatusConflict, title: "Checkpoint not decided",
		when:  "An ack on a checkpoint that is still `preparing`.",
		retry: "Yes, once the checkpoint is decided and the decision applied.",
		action: "Wait for the decision (`GET /v1/jobs/{job}/checkpoints/{id}?wait_ms=10000` answers as " +
			"soon as it is decided), apply it, then ack. Never ack what you have not applied.",
	},
	{
		code: string(coordinator.CodeVotesMissing), status: http.StatusConflict, title: "Votes missing",
		when: "A commit (`POST .../commit`) of a checkpoint without a `prepared` vote from every " +
			"participant. `missing` names those without one, and `checkpoint` shows the checkpoint.",
		retry: "Yes, once the missing participants have voted `prepared`.",
		action: "Wait for their votes (a long-poll on the checkpoint), or abort the checkpoint. A job " +
			"with `auto_commit` commits by itself once every vote is in.",
	},
	{
		code: string(coordinator.CodeLowerCheckpointOpen), status: http.StatusConflict, title: "Lower checkpoint still open",
		when: "A commit while a lower checkpoint of the job is still `preparing` (with " +
			"`max_concurrent_checkpoints` above 1): checkpoints commit in order.",
		retry: "Yes, once every lower checkpoint is decided.",
		action: "Decide the lower checkpoints first, or wait for them. Aborting one of them aborts " +
			"this one too.",
	},
	{
		code: string(coordinator.CodeTooManyCheckpoints), status: http.StatusConflict, title: "Too many checkpoints preparing",
		when: "Opening a checkpoint (`POST /v1/jobs/{job}/checkpoints`) while the job's " +
			"`max_concurrent_checkpoints` are `preparing`. `checkpoint` shows the newest of them.",
		retry: "Yes, later, once one of them is decided; the same `Idempotency-Key` may be used again, " +
			"since the refusal opened nothing.",
		action: "Skip this checkpoint, or wait until one is decided (the Go library's `Trigger` skips " +
			"the tick). Raise `max_concurrent_checkpoints` if it happens often.",
	},
	{
		code: string(coordinator.CodeIdempotencyConflict), status: http.StatusConflict, title: "Idempotency-Key reused",
		when: "An `Idempotency-Key` already used on this job to open a checkpoint came with another " +
			"request body.",
		retry: "No, not with this key and this body.",
		action: "Send the same key only to retry the same request, body and all; use a new key for " +
			"each checkpoint you mean to open.",
	},
	{
		code: string(coordinator.CodeJobBusy), status: http.StatusConflict, title: "Job busy",
		when: "Deleting a job on which something is owed: a checkpoint `preparing` or `committing`, " +
			"or an aborted one with a `prepared` vote not yet acked.",
		retry: "Yes, once nothing is owed.",
		action: "Abort the `preparing` checkpoints, let the participants apply and ack what their " +
			"`pending` lists (`GET /v1/checkpoints` shows what is open), then delete the job again.",
	},
	{
		code: string(coordinator.CodeTokenExists), status: http.StatusConflict, title: "Token exists",
		when:  "Creating a token (`POST /v1/tokens`) under a name that a token has already, or under `admin`, the name of the configured admin token.",
		retry: "No, not under this name.",
		action: "Choose another name, or revoke the token of that name first (`DELETE /v1/tokens/{name}`) " +
			"if it is to be replaced.",
	},
	{
		code: string(coordinator.CodeUnauthenticated), status: http.StatusUnauthorized, title: "Unauthenticated",
		when: "Authentication is on and the request carries no `Authorization: Bearer <token>` header, or " +
			"its token is unknown, revoked or expired. Only `GET /healthz` and `GET /readyz` need no token. " +
			"The answer carries `WWW-Authenticate: Bearer`; it changed nothing.",
		retry: "No, not with this token.",
		action: "Send a token that an admin created for you (`POST /v1/tokens`, `coordinator token create`). " +
			"A revoked or expired token stays refused: ask for a new one.",
	},
	{
		code: string(coordinator.CodeForbidden), status: http.StatusForbidden, title: "Forbidden",
		when: "The token is valid but does not allow the request: the `detail` names the scope that would " +
			"(and, for a participant token, the participant it acts as). The answer is the same whether " +
			"the job exists or not, and it changed nothing. Or the request came from a web browser, for a " +
			"page the coordinator does not serve: it carries an `Origin` that is neither the coordinator's " +
			"own (its console's) nor one of `--allowed-origins` (`null` never is), or `Sec-Fetch-Site: cross-site` and no `Origin`. That " +
			"is checked first, whatever the method and the path, and changes nothing either.",
		retry: "No, not with this token, nor from this page.",
		action: "Use a token with the scope the `detail` names on this job (`GET /v1/tokens/{name}` shows " +
			"a token's scopes and job pattern), or ask an admin for one. From a web page: serve the page " +
			"from an origin in `--allowed-origins`. Programs that are not browsers send no `Origin` and " +
			"are not refused.",
	},
	{
		code: string(coordinator.CodeGone), status: http.StatusGone, title: "Gone",
		when: "A read, vote or ack of a checkpoint that is no more: it was final and owed nothing, and " +
			"the job's `retention_ms` passed since it completed, so it was deleted (or the job was deleted " +
			"and created again since). Its id is never reused.",
		retry: "No: it will not come back.",
		action: "Nothing is owed on it. A participant that still had it in mind drops it; a pipeline " +
			"restores from the job's `last_committed` checkpoint, which retention always keeps.",
	},
	{
		code: codePayloadTooLarge, status: http.StatusRequestEntityTooLarge, title: "Payload too large",
		when:  "A request body larger than the coordinator's `--max-body-bytes` (1 MiB unless set).",
		retry: "No: the same body gets the same answer.",
		action: "Send a smaller body: committables should name prepared data (a transaction id, a file " +
			"name), not carry it. Or start the coordinator with a larger `--max-body-bytes`.",
	},
	{
		code: codeUnsupportedMediaType, status: http.StatusUnsupportedMediaType, title: "Unsupported media type",
		when:   "A request body not declared as JSON.",
		retry:  "No, not without the header.",
		action: "Send `Content-Type: application/json` (or another `application/*+json` type) with the body.",
	},
	{
		code: codeMisdirectedRequest, status: http.StatusMisdirectedRequest, title: "Misdirected request",
		when: "The request's `Host` names a host this coordinator does not serve: neither one of its " +
			"loopback names (`localhost`, `127.0.0.0/8`, `::1`), nor the host of its `--listen` address, " +
			"nor one of its `--allowed-hosts`. This keeps a web page of another site from reaching it " +
			"through a name of its own that resolves to the coordinator's address (DNS rebinding). " +
			"`GET` and `HEAD` `/healthz` and `/readyz` are not checked. The request changed nothing.",
		retry: "No, not under this host name.",
		action: "Send the request to a name the coordinator serves, or start the coordinator with this " +
			"name in `--allowed-hosts` (`*` allows every name, behind a proxy that checks it).",
	},
	{
		code: codeUnavailable, status: http.StatusServiceUnavailable, title: "Service unavailable",
		when: "The database cannot be reached or refuses writes (its disk is full, it is read-only), " +
			"or the request ran out of the coordinator's `--request-timeout` (its job's row locked " +
			"elsewhere, say), or it is a long-poll while the coordinator holds as many as it may at once " +
			"(`--max-waiters`). `/readyz` answers it while the coordinator is not ready. The `detail` " +
			"says whether the request may have been applied.",
		retry: "Yes, as it was (same body, same `Idempotency-Key`), after the `Retry-After` seconds " +
			"and with backoff. That is safe even when it may have been applied: votes, acks, commits " +
			"and aborts are idempotent, a prepare with an `Idempotency-Key` is, and a registration " +
			"retried only gives one epoch more.",
		action: "Retry. If it lasts, look at the database and the coordinator's log (under the " +
			"problem's `request_id`).",
	},
	{
		code: codeInternal, status: http.StatusInternalServerError, title: "Internal server error",
		when: "A bug in the coordinator. The `detail` is generic; the coordinator's log has the error " +
			"under the problem's `request_id`.",
		retry:  "Yes, as it was and with backoff, as after any 5xx; it may fail again.",
		action: "Report it with the `request_id` and the log line that names it.",
	},
}

// problemKinds is problemTable by code: the one table from a problem code to its HTTP
// status. Every error any part of this package answers goes through it (see problemFor),
// so a code always has the same status whoever produced it.
var problemKinds = func() map[string]problemKind {
	kinds := make(map[string]problemKind, len(problemTable))
	for _, k := range problemTable {
		if _, dup := kinds[k.code]; dup {
			panic("api: problem code " + k.code + " twice in problemTable")
		}
		kinds[k.code] = k
	}
	return kinds
}()

// retryAfterSeconds is sent as Retry-After with every 503.
const retryAfterSeconds = 1

// requestError is a refusal by the HTTP layer itself (bad parameters, bodies, media types,
// routes), before the domain sees the request. It carries a code of problemKinds.
type requestError struct {
	code   string
	detail string
	fields []coordinator.FieldError
	// allow lists the methods the path accepts, for a 405's Allow header.
	allow []string
}

func (e *requestError) Error() string {
	var b strings.Builder
	b.WriteString(e.code)
	if e.detail != "" {
		b.WriteString(": ")
		b.WriteString(e.detail)
	}
	return b.String()
}

// invalid returns an invalid_request error about one field.
func invalid(field, format string, args ...any) *requestError {
	msg := fmt.Sprintf(format, args...)
	return &requestError{
		code:   codeInvalidRequest,
		detail: fieldDetail("the request is not valid", []coordinator.FieldError{{Field: field, Message: msg}}),
		fields: []coordinator.FieldError{{Field: field, Message: msg}},
	}
}

// invalidFields returns an invalid_request error listing what was wrong, field by field.
func invalidFields(fields []coordinator.FieldError) *requestError {
	return &requestError{code: codeInvalidRequest, detail: fieldDetail("the request is not valid", fields), fields: fields}
}

// fieldDetail spells the field errors out in the human-readable detail, so that a user of
// curl sees what to fix without parsing the errors member.
func fieldDetail(message string, fields []coordinator.FieldError) string {
	if len(fields) == 0 {
		return message
	}
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return message + ": " + strings.Join(parts, "; ")
}

// problem is what problemFor decides about an error: the document, and what to log.
type problem struct {
	body  Problem
	allow []string
	// logLevel and logMsg say how the error is logged; the zero level with an empty
	// message logs nothing (a refusal of the client's request is in the access log).
	logLevel slog.Level
	logMsg   string
}

// problemFor maps any error to its problem document: the one place that decides which
// status and code an error gets. Unknown errors become 500 internal with a generic detail;
// the real error is only logged.
func problemFor(err error) problem {
	var (
		reqErr    *requestError
		domainErr *coordinator.Error
		paramErr  *paramError
		maxBytes  *http.MaxBytesError
	)
	switch {
	case errors.As(err, &reqErr):
		p := newProblem(reqErr.code, reqErr.detail)
		p.body.Errors = fieldErrors(reqErr.fields)
		p.allow = reqErr.allow
		return p
	case errors.As(err, &paramErr):
		return problemFor(paramErr.requestError())
	case errors.As(err, &maxBytes):
		return newProblem(codePayloadTooLarge, fmt.Sprintf("the request body is larger than %d bytes", maxBytes.Limit))
	case errors.As(err, &domainErr):
		return domainProblem(domainErr)
	case errors.Is(err, errPanic):
		// recoverPanic has logged the panic and its stack.
		return newProblem(codeInternal, "an internal error occurred; the request_id names it in the server's log")
	case errors.Is(err, context.DeadlineExceeded):
		p := newProblem(codeUnavailable, "the request timed out; retry later")
		p.logLevel, p.logMsg = slog.LevelWarn, "request timed out"
		return p
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer, but it must still be one.
		p := newProblem(codeUnavailable, "the request was canceled")
		p.logLevel, p.logMsg = slog.LevelDebug, "request canceled"
		return p
	}
	p := newProblem(codeInternal, "an internal error occurred; the request_id names it in the server's log")
	p.logLevel, p.logMsg = slog.LevelError, "internal error"
	return p
}

func domainProblem(e *coordinator.Error) problem {
	code := string(e.Code)
	if _, ok := problemKinds[code]; !ok {
		p := newProblem(codeInternal, "an internal error occurred; the request_id names it in the server's log")
		p.logLevel, p.logMsg = slog.LevelError, "domain error with an unknown code"
		return p
	}
	detail := e.Message
	if e.Code == coordinator.CodeInvalidRequest {
		detail = fieldDetail(e.Message, e.Fields)
	}
	p := newProblem(code, detail)
	if e.Code == coordinator.CodeUnavailable {
		if detail == "" {
			p.body.Detail = ptr("the service is unavailable; retry later")
		}
		p.logLevel, p.logMsg = slog.LevelWarn, "unavailable"
	}
	if e.Checkpoint != nil {
		cp := checkpointBody(e.Checkpoint)
		p.body.Checkpoint = &cp
	}
	if e.Code == coordinator.CodeVotesMissing {
		missing := append([]string{}, e.Missing...)
		p.body.Missing = &missing
	}
	p.body.Errors = fieldErrors(e.Fields)
	return p
}

func newProblem(code, detail string) problem {
	kind := problemKinds[code]
	p := problem{body: Problem{
		Type:   problemTypeBase + code,
		Title:  kind.title,
		Status: kind.status,
		Code:   ProblemCode(code),
	}}
	if detail != "" {
		p.body.Detail = &detail
	}
	return p
}

func fieldErrors(fields []coordinator.FieldError) *[]struct {
	Field   string `json:"field"`
	Message string `json:"message"`
} {
	if len(fields) == 0 {
		return nil
	}
	out := make([]struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	}, len(fields))
	for i, f := range fields {
		out[i].Field = f.Field
		out[i].Message = f.Message
	}
	return &out
}

// problemWriter writes problem documents; every error hook of chi and of the generated
// server is one of its methods, so nothing answers text/plain.
type problemWriter struct {
	logger *slog.Logger
}

// write answers err as an application/problem+json document.
func (pw *problemWriter) write(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(context.Cause(r.Context()), errTokenRevoked) {
		// A long-poll whose token was revoked while it waited.
		w.Header().Set("WWW-Authenticate", `Bearer realm="coordinator", error="invalid_token"`)
		err = unauthenticatedError("the token was revoked while the request waited")
	}
	p := problemFor(err)
	if e := (*coordinator.Error)(nil); p.body.Checkpoint != nil && prefersMinimal(r.Header.Get("Prefer")) && errors.As(err, &e) && e.Checkpoint != nil {
		// The checkpoint a refusal carries is as minimal as the answer would have been.
		participant := chi.URLParam(r, "participant")
		if participant == "" {
			participant = r.URL.Query().Get("participant")
		}
		cp := minimalBody(e.Checkpoint, participant)
		p.body.Checkpoint = &cp
		w.Header().Set("Preference-Applied", "return=minimal")
	}
	id := RequestID(r.Context())
	if id != "" {
		p.body.RequestId = &id
	}
	if p.logMsg != "" && p.logLevel > slog.LevelDebug && errors.Is(context.Cause(r.Context()), context.Canceled) {
		// The client went away (a trigger or participant stopping mid-request): nobody
		// reads this answer, and nothing is wrong with the service.
		p.logLevel, p.logMsg = slog.LevelDebug, "request canceled"
	}
	if p.logMsg != "" {
		pw.logger.Log(r.Context(), p.logLevel, p.logMsg,
			"request_id", id, "method", r.Method, "path", r.URL.Path, "code", p.body.Code, "error", err.Error())
	}
	if s, ok := w.(interface{ Status() int }); ok && s.Status() != 0 {
		// The answer has begun: too late for a problem document. The log has the error.
		pw.logger.Error("error after the response began", "request_id", id, "error", err.Error())
		return
	}
	h := w.Header()
	for _, m := range p.allow {
		h.Add("Allow", m)
	}
	if p.body.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", fmt.Sprint(retryAfterSeconds))
	}
	if err := writeJSON(w, "application/problem+json", p.body.Status, p.body); err != nil {
		pw.logger.Warn("write problem", "request_id", id, "error", err.Error())
	}
}

// requestErrorHandler is the strict server's RequestErrorHandlerFunc: the generated code
// could not decode a body. The input check runs first, so this is a fallback.
func (pw *problemWriter) requestErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	var reqErr *requestError
	var maxBytes *http.MaxBytesError
	if !errors.As(err, &reqErr) && !errors.As(err, &maxBytes) {
		err = &requestError{code: codeInvalidRequest, detail: "the body is not valid JSON for this operation: " + err.Error()}
	}
	pw.write(w, r, err)
}

// paramErrorHandler is the chi server's ErrorHandlerFunc: a path, query or header
// parameter that does not parse.
func (pw *problemWriter) paramErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	pw.write(w, r, &paramError{err: err})
}

// notFound answers a path that names no route.
func (pw *problemWriter) notFound(w http.ResponseWriter, r *http.Request) {
	pw.write(w, r, &requestError{code: codeNotFound, detail: fmt.Sprintf("no route for %s", r.URL.Path)})
}

// paramError is a parameter error of the generated server.
type paramError struct{ err error }

func (e *paramError) Error() string { return e.err.Error() }
func (e *paramError) Unwrap() error { return e.err }

// requestError names the parameter and says what is wrong with it in words.
func (e *paramError) requestError() *requestError {
	var (
		format   *InvalidParamFormatError
		required *RequiredParamError
		header   *RequiredHeaderError
		tooMany  *TooManyValuesForParamError
		unmarsh  *UnmarshalingParamError
	)
	switch {
	case errors.As(e.err, &format):
		return invalid(format.ParamName, "%s", paramMessage(format.ParamName, format.Err))
	case errors.As(e.err, &required):
		return invalid(required.ParamName, "is required")
	case errors.As(e.err, &header):
		return invalid(header.ParamName, "header is required")
	case errors.As(e.err, &tooMany):
		return invalid(tooMany.ParamName, "must be given once, got %d values", tooMany.Count)
	case errors.As(e.err, &unmarsh):
		return invalid(unmarsh.ParamName, "%s", paramMessage(unmarsh.ParamName, unmarsh.Err))
	}
	return &requestError{code: codeInvalidRequest, detail: "a parameter is not valid: " + e.err.Error()}
}

// integerParams are the integer parameters of openapi.yaml, with a plainer message than
// strconv's.
var integerParams = map[string]string{
	"id":      "must be a checkpoint id: an integer of 1 or more",
	"limit":   fmt.Sprintf("must be an integer from 1 to %d", coordinator.MaxPageSize),
	"wait_ms": fmt.Sprintf("must be an integer from 0 to %d", coordinator.MaxLongPoll.Milliseconds()),
}

func paramMessage(name string, err error) string {
	if msg, ok := integerParams[name]; ok {
		return msg
	}
	if err == nil {
		return "is not valid"
	}
	return "is not valid: " + err.Error()
}
