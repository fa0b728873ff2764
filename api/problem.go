package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

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

// problemTypeBase prefixes a code to name its problem type (RFC 9457 "type").
const problemTypeBase = "https://twophase.dev/problems/"

// problemKind is how one code is answered.
type problemKind struct {
	status int
	title  string
}

// problemKinds is the one table from a problem code to its HTTP status. Every error any
// part of this package answers goes through it (see problemFor), so a code always has
// the same status whoever produced it.
var problemKinds = map[string]problemKind{
	codeInvalidRequest:                          {http.StatusBadRequest, "Invalid request"},
	codeNotFound:                                {http.StatusNotFound, "Not found"},
	codeMethodNotAllowed:                        {http.StatusMethodNotAllowed, "Method not allowed"},
	string(coordinator.CodeVoteConflict):        {http.StatusConflict, "Vote conflict"},
	string(coordinator.CodeFenced):              {http.StatusConflict, "Fenced: stale epoch"},
	string(coordinator.CodeNotRegistered):       {http.StatusConflict, "Participant not registered"},
	string(coordinator.CodeAlreadyDecided):      {http.StatusConflict, "Checkpoint already decided"},
	string(coordinator.CodeNotDecided):          {http.StatusConflict, "Checkpoint not decided"},
	string(coordinator.CodeVotesMissing):        {http.StatusConflict, "Votes missing"},
	string(coordinator.CodeLowerCheckpointOpen): {http.StatusConflict, "Lower checkpoint still open"},
	string(coordinator.CodeTooManyCheckpoints):  {http.StatusConflict, "Too many checkpoints preparing"},
	string(coordinator.CodeIdempotencyConflict): {http.StatusConflict, "Idempotency-Key reused"},
	string(coordinator.CodeJobBusy):             {http.StatusConflict, "Job busy"},
	codePayloadTooLarge:                         {http.StatusRequestEntityTooLarge, "Payload too large"},
	codeUnsupportedMediaType:                    {http.StatusUnsupportedMediaType, "Unsupported media type"},
	codeUnavailable:                             {http.StatusServiceUnavailable, "Service unavailable"},
	codeInternal:                                {http.StatusInternalServerError, "Internal server error"},
}

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
		// recoverer has logged the panic and its stack.
		return newProblem(codeInternal, "an internal error occurred; the request_id names it in the server's log")
	case errors.Is(err, context.DeadlineExceeded):
		p := newProblem(codeUnavailable, "the request timed out; retry later")
		p.logLevel, p.logMsg = slog.LevelWarn, "request timed out"
		return p
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer, but it must still be one.
		p := newProblem(codeUnavailable, "the request was canceled")
		p.logLevel, p.logMsg = slog.LevelInfo, "request canceled"
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
		Code:   code,
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
	p := problemFor(err)
	id := RequestID(r.Context())
	if id != "" {
		p.body.RequestId = &id
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
