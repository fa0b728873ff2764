package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/twophase/coordinator/coordinator"
)

// Access control (docs/protocol.md, "Access control"): who may call which route is decided
// here, from routeAccess alone, before any handler runs. authenticate tells the token's
// principal from the Authorization header, for every request; authorize, once the route is
// known, asks the principal whether it may take that route on the job and participant the
// path names. A refusal is answered before the body is read, so it changes nothing.

// access is what a route needs of a token.
type access int

const (
	// accessPublic needs no token: liveness and readiness probes.
	accessPublic access = iota
	// accessAnyToken needs a valid token of any scope: build information, problem pages.
	accessAnyToken
	// accessReach needs a valid token; the handler lists only the jobs the token reaches.
	accessReach
	// accessRead needs a right to read the path's job: any scope on it.
	accessRead
	// accessOpen needs trigger or operator on the path's job.
	accessOpen
	// accessOperate needs operator on the path's job.
	accessOperate
	// accessAsParticipant needs the participant scope as the path's participant of its job.
	accessAsParticipant
	// accessPending needs the path's participant's own token, or a scope on the job other
	// than participant (read, trigger, operator) or admin: what a participant owes holds
	// its committables, which another participant's token may not read.
	accessPending
	// accessAbort needs operator on the path's job, or the participant scope in it: the
	// service then lets it abort only a checkpoint that expects that participant.
	accessAbort
	// accessAdmin needs the admin scope.
	accessAdmin
	// accessAudit needs operator on some jobs (it sees their entries) or admin.
	accessAudit
	// accessMetrics needs a token that reads every job: metrics cover them all.
	accessMetrics
)

// routeAccess is the authorisation table: every route of openapi.yaml, by method (HEAD is
// GET's) and path template, with what it needs. A route missing here is refused to every
// token (TestRouteAccessCoversEveryRoute keeps it complete).
var routeAccess = map[string]access{
	"GET /healthz":                    accessPublic,
	"GET /readyz":                     accessPublic,
	"GET /v1/info":                    accessAnyToken,
	"GET /problems":                   accessAnyToken,
	"GET /problems/{code}":            accessAnyToken,
	"GET /v1/jobs":                    accessReach,
	"GET /v1/checkpoints":             accessReach,
	"PUT /v1/jobs/{job}":              accessOperate,
	"GET /v1/jobs/{job}":              accessRead,
	"DELETE /v1/jobs/{job}":           accessOperate,
	"GET /v1/jobs/{job}/participants": accessRead,
	"POST /v1/jobs/{job}/participants/{participant}/register": accessAsParticipant,
	"GET /v1/jobs/{job}/participants/{participant}/pending":   accessPending,
	"POST /v1/jobs/{job}/checkpoints":                         accessOpen,
	"GET /v1/jobs/{job}/checkpoints":                          accessRead,
	"GET /v1/jobs/{job}/checkpoints/{id}":                     accessRead,
	"PUT /v1/jobs/{job}/checkpoints/{id}/votes/{participant}": accessAsParticipant,
	"POST /v1/jobs/{job}/checkpoints/{id}/commit":             accessOperate,
	"POST /v1/jobs/{job}/checkpoints/{id}/abort":              accessAbort,
	"PUT /v1/jobs/{job}/checkpoints/{id}/acks/{participant}":  accessAsParticipant,
	"POST /v1/jobs/{job}/checkpoints/{id}/complete":           accessOperate,
	"GET /v1/jobs/{job}/events":                               accessRead,
	"GET /v1/events":                                          accessReach,
	"GET /v1/audit":                                           accessAudit,
	"GET /metrics":                                            accessMetrics,
	"POST /v1/tokens":                                         accessAdmin,
	"GET /v1/tokens":                                          accessAdmin,
	"GET /v1/tokens/{name}":                                   accessAdmin,
	"DELETE /v1/tokens/{name}":                                accessAdmin,
}

// publicPaths are the paths that need no token, so that probes work before routing.
var publicPaths = map[string]bool{"/healthz": true, "/readyz": true}

type principalKey struct{}

// principalOf is the principal of the request's token; nil when authentication is off.
func principalOf(ctx context.Context) *coordinator.Principal {
	p, _ := ctx.Value(principalKey{}).(*coordinator.Principal)
	return p
}

// reachOf is the pattern of the jobs a request may see in a list: every job without
// authentication.
func reachOf(ctx context.Context) coordinator.JobPattern {
	if p := principalOf(ctx); p != nil {
		return p.Reach()
	}
	return coordinator.AllJobs
}

// errTokenRevoked is the cause a long-poll's context is cancelled with when its token is
// revoked while it waits.
var errTokenRevoked = errors.New("the token was revoked while the request waited")

// unauthenticatedError is a 401: no token, or one that is no token (any more).
func unauthenticatedError(detail string) *coordinator.Error {
	return &coordinator.Error{Code: coordinator.CodeUnauthenticated, Message: detail}
}

// bearerToken returns the token of an Authorization header "Bearer <token>" (the scheme
// in any case, RFC 9110 11.1), ok false if there is none or the header is malformed.
func bearerToken(header string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(rest, " ")
	if token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}

// authenticate tells the principal of a request that is not a public probe from its
// Authorization header, and returns r with it in its context, and, for the rules, its name
// (coordinator.WithActor); or the 401 to answer without a valid token, with its
// WWW-Authenticate header set on w. A long-poll's context is cancelled when its token is
// revoked, until done is called (nil for other requests).
func authenticate(auth *coordinator.Authenticator, w http.ResponseWriter, r *http.Request) (_ *http.Request, done func(), _ error) {
	if n := len(r.Header.Values("Authorization")); n > 1 {
		// Which of them would count is a guess a proxy and the coordinator could make
		// differently: refuse the request.
		return r, nil, invalid("Authorization", "send one Authorization header, not %d", n)
	}
	header := r.Header.Get("Authorization")
	token, ok := bearerToken(header)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="coordinator"`)
		detail := "this coordinator needs a token: send Authorization: Bearer <token>"
		if header != "" {
			detail = "the Authorization header is not Bearer <token>"
		}
		return r, nil, unauthenticatedError(detail)
	}
	p, err := auth.Authenticate(r.Context(), token)
	if err != nil {
		if errors.Is(err, coordinator.ErrUnauthenticated) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="coordinator", error="invalid_token"`)
		}
		return r, nil, err
	}
	ctx := context.WithValue(r.Context(), principalKey{}, p)
	ctx = coordinator.WithActor(ctx, p.Name())
	if longPoll(r) > 0 || isStream(r) {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		stop := context.AfterFunc(p.Context(), func() { cancel(errTokenRevoked) })
		done = func() {
			stop()
			cancel(nil)
		}
	}
	return r.WithContext(ctx), done, nil
}

// authorize refuses, with 403 forbidden, a request that its token does not allow by
// routeAccess. It runs once the route is known; without authentication it allows all.
func authorize(r *http.Request) error {
	p := principalOf(r.Context())
	if p == nil {
		return nil
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	route := method + " " + routePattern(r)
	need, known := routeAccess[route]
	if !known {
		return forbidden("no token may call %s", route)
	}
	job, participant := chi.URLParam(r, "job"), chi.URLParam(r, "participant")
	switch need {
	case accessPublic, accessAnyToken, accessReach:
		return nil
	case accessRead:
		if p.Reads(job) {
			return nil
		}
		return forbidden("reading job %s needs a token with any scope on it (read, participant, trigger, operator) or admin", job)
	case accessOpen:
		if p.Can(coordinator.ScopeTrigger, job) || p.Can(coordinator.ScopeOperator, job) {
			return nil
		}
		return forbidden("opening a checkpoint of job %s needs the trigger or operator scope on it", job)
	case accessOperate:
		if p.Can(coordinator.ScopeOperator, job) {
			return nil
		}
		return forbidden("this request needs the operator scope on job %s", job)
	case accessAsParticipant:
		if p.ActsAs(job, participant) {
			return nil
		}
		return forbidden("acting as participant %s of job %s needs a participant token of that participant of that job", participant, job)
	case accessPending:
		if p.ActsAs(job, participant) || p.Can(coordinator.ScopeRead, job) || p.Can(coordinator.ScopeTrigger, job) || p.Can(coordinator.ScopeOperator, job) {
			return nil
		}
		return forbidden("reading what participant %s of job %s owes needs that participant's own token, or the read, trigger or operator scope on the job", participant, job)
	case accessAbort:
		if p.Can(coordinator.ScopeOperator, job) {
			return nil
		}
		if _, ok := p.Participant(job); ok {
			return nil // the service checks the checkpoint expects it
		}
		return forbidden("aborting a checkpoint of job %s needs the operator scope on it, or a participant token of a participant it expects", job)
	case accessAdmin:
		if p.Admin() {
			return nil
		}
		return forbidden("this request needs the admin scope")
	case accessMetrics:
		if p.ReadsMetrics() {
			return nil
		}
		return forbidden("the metrics cover every job: reading them needs a token whose job pattern is *")
	case accessAudit:
		if p.Admin() || p.Token().Has(coordinator.ScopeOperator) {
			return nil
		}
		return forbidden("reading the audit needs the operator or the admin scope")
	}
	return forbidden("no token may call %s", route)
}

func forbidden(format string, args ...any) *coordinator.Error {
	return &coordinator.Error{Code: coordinator.CodeForbidden, Message: fmt.Sprintf(format, args...)}
}
