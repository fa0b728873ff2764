package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/metrics"
)

// server implements the generated StrictServerInterface on a coordinator.Service. Each
// method only translates: request objects to service calls, domain values to models. An
// error is returned as is; the strict handler's ResponseErrorHandlerFunc answers it with
// the problem table (problemFor).
type server struct {
	problemPages // GET /problems and /problems/{code}
	svc          *coordinator.Service
	build        *BuildInfo          // for GET /v1/info; nil: not known
	tokens       *coordinator.Tokens // for /v1/tokens; nil: authentication is off
	auth         *coordinator.Authenticator
	metrics      *metrics.Metrics      // for /metrics; nil: not served
	park         *parking              // nil: long-polls are not parked
	hub          *coordinator.EventHub // the event streams; nil when the store records no events
	keepAlive    time.Duration         // Options.StreamKeepAlive
}

var _ StrictServerInterface = (*server)(nil)

// defaultOpenStatuses is what GET /v1/checkpoints lists without a status filter.
var defaultOpenStatuses = []coordinator.Status{coordinator.StatusPreparing, coordinator.StatusCommitting}

func (s *server) GetHealthz(context.Context, GetHealthzRequestObject) (GetHealthzResponseObject, error) {
	return ok(Health{Status: "ok"}), nil
}

func (s *server) GetReadyz(ctx context.Context, _ GetReadyzRequestObject) (GetReadyzResponseObject, error) {
	if err := s.svc.Ready(ctx); err != nil {
		// Whatever the cause, not ready is 503, never 500: a load balancer retries. The
		// store's own message says why (it holds no secret: the cause is only logged).
		msg := "not ready: the database does not answer, its schema is not current or it cannot be written"
		var e *coordinator.Error
		if errors.As(err, &e) && e.Code == coordinator.CodeUnavailable && e.Message != "" {
			msg = "not ready: " + e.Message
		}
		return nil, &coordinator.Error{Code: coordinator.CodeUnavailable, Message: msg, Err: err}
	}
	return ok(Health{Status: "ok"}), nil
}

func (s *server) ListJobs(ctx context.Context, req ListJobsRequestObject) (ListJobsResponseObject, error) {
	limit := pageLimit(req.Params.Limit)
	after, err := jobCursor(req.Params.Cursor)
	if err != nil {
		return nil, err
	}
	jobs, more, err := s.svc.ListJobs(ctx, reachOf(ctx), after, limit)
	if err != nil {
		return nil, err
	}
	out := JobList{Items: make([]Job, len(jobs))}
	for i, j := range jobs {
		out.Items[i] = jobBody(j)
	}
	if more && len(jobs) > 0 {
		out.NextCursor = ptr(encodeCursor(cursorJobs, jobs[len(jobs)-1].Name))
	}
	return ok(out), nil
}

func (s *server) PutJob(ctx context.Context, req PutJobRequestObject) (PutJobResponseObject, error) {
	if req.Body == nil {
		return nil, invalid("body", "a JobConfig is required")
	}
	job, created, err := s.svc.PutJob(ctx, req.Job, jobConfig(req.Body))
	if err != nil {
		return nil, err
	}
	if created {
		return jsonResponse{status: http.StatusCreated, body: jobBody(job), location: jobPath(req.Job)}, nil
	}
	return ok(jobBody(job)), nil
}

func (s *server) GetJob(ctx context.Context, req GetJobRequestObject) (GetJobResponseObject, error) {
	job, err := s.svc.GetJob(ctx, req.Job)
	if err != nil {
		return nil, err
	}
	return ok(jobBody(job)), nil
}

func (s *server) ListParticipants(ctx context.Context, req ListParticipantsRequestObject) (ListParticipantsResponseObject, error) {
	ps, err := s.svc.Participants(ctx, req.Job)
	if err != nil {
		return nil, err
	}
	items := make([]ParticipantView, len(ps))
	for i, p := range ps {
		items[i] = ParticipantView{Name: p.Name, Epoch: p.Epoch, RegisteredAt: utc(p.RegisteredAt), LastVoteAt: utc(p.LastVoteAt),
			LastAckAt: utc(p.LastAckAt), Owed: p.Owed}
		if p.LastVote != nil {
			ms := p.LastVote.Milliseconds()
			items[i].LastVoteMs = &ms
		}
	}
	return ok(ParticipantList{Job: req.Job, Items: items}), nil
}

func (s *server) DeleteJob(ctx context.Context, req DeleteJobRequestObject) (DeleteJobResponseObject, error) {
	if err := s.svc.DeleteJob(ctx, req.Job); err != nil {
		return nil, err
	}
	return jsonResponse{status: http.StatusNoContent}, nil
}

func (s *server) RegisterParticipant(ctx context.Context, req RegisterParticipantRequestObject) (RegisterParticipantResponseObject, error) {
	p, err := s.svc.Register(ctx, req.Job, req.Participant)
	if err != nil {
		return nil, err
	}
	return ok(Registration{Job: p.Job, Participant: p.Participant, Epoch: p.Epoch, Pending: pendingItems(p.Items)}), nil
}

func (s *server) GetPending(ctx context.Context, req GetPendingRequestObject) (GetPendingResponseObject, error) {
	wait, err := waitOf(req.Params.WaitMs)
	if err != nil {
		return nil, err
	}
	var epoch int64
	if req.Params.Epoch != nil {
		if epoch = *req.Params.Epoch; epoch < 1 {
			return nil, invalid("epoch", "must be 1 or more (the epoch that register returned)")
		}
	}
	total := wait
	if s.park != nil && total > s.park.after {
		// Wait here for a while; past it, a wait that goes on may be parked (park.go). A
		// participant whose last parked wait ended with nothing owed is idle: it is
		// parked at once.
		first := s.park.after
		if s.park.idle.has(req.Job, req.Participant) {
			first = time.Millisecond
		}
		start := time.Now()
		p, err := s.svc.Pending(ctx, req.Job, req.Participant, first, epoch)
		if err != nil {
			return nil, err
		}
		// An answer before the time was up is the answer (something owed, a new epoch,
		// the coordinator shutting down); one at the time found nothing, and the wait
		// goes on, at the epoch it knew.
		if !coordinator.PendingAnswers(p, epoch, epoch == 0) && time.Since(start) >= first {
			return pendingWait{s: s, ctx: ctx, job: req.Job, participant: req.Participant,
				epoch: p.Epoch, until: start.Add(total)}, nil
		}
		if len(p.Items) > 0 {
			s.park.idle.forget(req.Job, req.Participant)
		}
		return pendingAnswer(p), nil
	}
	p, err := s.svc.Pending(ctx, req.Job, req.Participant, total, epoch)
	if err != nil {
		return nil, err
	}
	return pendingAnswer(p), nil
}

// pendingAnswer is the answer of GET pending.
func pendingAnswer(p *coordinator.Pending) jsonResponse {
	return ok(Pending{Job: p.Job, Participant: p.Participant, Epoch: p.Epoch, Items: pendingItems(p.Items)})
}

func (s *server) PrepareCheckpoint(ctx context.Context, req PrepareCheckpointRequestObject) (PrepareCheckpointResponseObject, error) {
	body := PrepareRequest{}
	if req.Body != nil {
		body = *req.Body
	}
	var pr coordinator.PrepareRequest
	if body.TimeoutMs != nil {
		// 0 means "the job's timeout" to the domain; on the wire it is out of range.
		if ms := *body.TimeoutMs; ms < coordinator.MinCheckpointTimeout.Milliseconds() || ms > coordinator.MaxCheckpointTimeout.Milliseconds() {
			return nil, invalid("timeout_ms", "must be from %d to %d", coordinator.MinCheckpointTimeout.Milliseconds(), coordinator.MaxCheckpointTimeout.Milliseconds())
		}
		pr.Timeout = milliseconds(*body.TimeoutMs)
	}
	if key := req.Params.IdempotencyKey; key != nil {
		if *key == "" {
			return nil, invalid("Idempotency-Key", "must be 1 to %d printable ASCII characters", coordinator.MaxIdempotencyKeyLength)
		}
		pr.IdempotencyKey = *key
		pr.Fingerprint = fingerprint(body)
	}
	cp, _, err := s.svc.Prepare(ctx, req.Job, pr)
	if err != nil {
		return nil, err
	}
	s.hub.Note(cp)
	// A replay answers as the first request did: 201 with the checkpoint as it stands.
	return jsonResponse{status: http.StatusCreated, checkpoint: cp, location: checkpointPath(cp.Job, cp.ID)}, nil
}

// fingerprint identifies a prepare request's body for its Idempotency-Key: a hash of its
// canonical JSON, so that no body, {} and the same fields spaced otherwise are the same
// request.
func fingerprint(body PrepareRequest) string {
	canonical, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("marshal PrepareRequest: %v", err)) // a struct of an *int64 always marshals
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

func (s *server) ListCheckpoints(ctx context.Context, req ListCheckpointsRequestObject) (ListCheckpointsResponseObject, error) {
	limit := pageLimit(req.Params.Limit)
	after, err := positionCursor(cursorCheckpoints, req.Params.Cursor)
	if err != nil {
		return nil, err
	}
	if err := checkPageLimit(limit); err != nil {
		return nil, err
	}
	// Read once the answer's memory is reserved (answers.go).
	return checkpointPage{s: s, ctx: ctx, limit: limit, cursor: cursorOf(cursorCheckpoints, true), q: coordinator.CheckpointQuery{
		Job:      req.Job,
		Statuses: statuses(req.Params.Status),
		After:    after, // newest first: ids below After
	}}, nil
}

func (s *server) ListOpenCheckpoints(ctx context.Context, req ListOpenCheckpointsRequestObject) (ListOpenCheckpointsResponseObject, error) {
	limit := pageLimit(req.Params.Limit)
	after, err := positionCursor(cursorAll, req.Params.Cursor)
	if err != nil {
		return nil, err
	}
	sts := statuses(req.Params.Status)
	if req.Params.Status == nil {
		sts = defaultOpenStatuses
	}
	jobs := reachOf(ctx)
	if req.Params.Job != nil {
		if !coordinator.ValidJobPattern(coordinator.JobPattern(*req.Params.Job)) {
			return nil, invalid("job", "%q is not a job pattern: a job's name, a prefix of one ending in *, or *", *req.Params.Job)
		}
		narrow, overlap := coordinator.JobPattern(*req.Params.Job).Narrow(jobs)
		if !overlap {
			return ok(CheckpointList{Items: []Checkpoint{}}), nil
		}
		jobs = narrow
	}
	var olderThan time.Duration
	if req.Params.OlderThanMs != nil {
		if ms := *req.Params.OlderThanMs; ms < 0 || ms > maxOlderThan.Milliseconds() {
			return nil, invalid("older_than_ms", "must be an integer from 0 to %d (a year)", maxOlderThan.Milliseconds())
		}
		olderThan = milliseconds(*req.Params.OlderThanMs)
	}
	if err := checkPageLimit(limit); err != nil {
		return nil, err
	}
	return checkpointPage{s: s, ctx: ctx, limit: limit, cursor: cursorOf(cursorAll, false), q: coordinator.CheckpointQuery{
		Jobs:      jobs,
		OlderThan: olderThan,
		Statuses:  sts,
		After:     after, // oldest first: Seq above After
	}}, nil
}

func (s *server) GetCheckpoint(ctx context.Context, req GetCheckpointRequestObject) (GetCheckpointResponseObject, error) {
	wait, err := waitOf(req.Params.WaitMs)
	if err != nil {
		return nil, err
	}
	var participant string
	if req.Params.Participant != nil {
		if participant = *req.Params.Participant; !coordinator.ValidName(participant) {
			return nil, invalid("participant", "%q is not a participant's name", participant)
		}
	}
	cp, err := s.svc.GetCheckpoint(ctx, req.Job, req.Id, wait)
	if err != nil {
		return nil, err
	}
	answer := checkpointAnswer(cp, req.Params.Prefer, participant)
	answer.shed = true
	return answer, nil
}

func (s *server) PutVote(ctx context.Context, req PutVoteRequestObject) (PutVoteResponseObject, error) {
	if req.Body == nil {
		return nil, invalid("body", "a VoteRequest is required")
	}
	v := coordinator.Vote{Epoch: req.Body.Epoch, Kind: coordinator.VoteKind(req.Body.Vote)}
	if req.Body.Committables != nil {
		v.Committables = *req.Body.Committables
	}
	if req.Body.Reason != nil {
		v.Reason = *req.Body.Reason
	}
	wait, err := waitOf(req.Params.WaitMs)
	if err != nil {
		return nil, err
	}
	cp, err := s.svc.VoteAndWait(ctx, req.Job, req.Id, req.Participant, v, wait)
	if err != nil {
		return nil, err
	}
	s.hub.Note(cp)
	return callerAnswer(cp, req.Params.Prefer, req.Participant), nil
}

func (s *server) CommitCheckpoint(ctx context.Context, req CommitCheckpointRequestObject) (CommitCheckpointResponseObject, error) {
	var reason string
	if req.Body != nil && req.Body.Reason != nil {
		reason = *req.Body.Reason
	}
	cp, err := s.svc.Commit(ctx, req.Job, req.Id, reason)
	if err != nil {
		return nil, err
	}
	s.hub.Note(cp)
	return jsonResponse{status: http.StatusOK, checkpoint: cp}, nil
}

func (s *server) CompleteCheckpoint(ctx context.Context, req CompleteCheckpointRequestObject) (CompleteCheckpointResponseObject, error) {
	var reason string
	if req.Body != nil && req.Body.Reason != nil {
		reason = *req.Body.Reason
	}
	cp, err := s.svc.Complete(ctx, req.Job, req.Id, reason)
	if err != nil {
		return nil, err
	}
	s.hub.Note(cp)
	return jsonResponse{status: http.StatusOK, checkpoint: cp}, nil
}

func (s *server) ListAudit(ctx context.Context, req ListAuditRequestObject) (ListAuditResponseObject, error) {
	before, err := positionCursor(cursorAudit, req.Params.Cursor)
	if err != nil {
		return nil, err
	}
	q := coordinator.AuditQuery{Jobs: reachOf(ctx), Before: before, Limit: pageLimit(req.Params.Limit)}
	// Token actions belong to no job: an admin's only.
	q.WithTokens = principalOf(ctx) == nil || principalOf(ctx).Admin()
	if req.Params.Job != nil {
		narrow, overlap := coordinator.JobPattern(*req.Params.Job).Narrow(q.Jobs)
		if !coordinator.ValidJobPattern(coordinator.JobPattern(*req.Params.Job)) {
			return nil, invalid("job", "%q is not a job pattern: a job's name, a prefix of one ending in *, or *", *req.Params.Job)
		}
		if !overlap {
			return ok(AuditList{Items: []AuditEntry{}}), nil
		}
		q.Jobs, q.WithTokens = narrow, false
	}
	entries, more, err := s.svc.ListAudit(ctx, q)
	if err != nil {
		return nil, err
	}
	out := AuditList{Items: make([]AuditEntry, len(entries))}
	for i, e := range entries {
		out.Items[i] = auditBody(e)
	}
	if more && len(entries) > 0 {
		out.NextCursor = ptr(encodeCursor(cursorAudit, strconv.FormatInt(entries[len(entries)-1].ID, 10)))
	}
	return ok(out), nil
}

func (s *server) AbortCheckpoint(ctx context.Context, req AbortCheckpointRequestObject) (AbortCheckpointResponseObject, error) {
	var reason string
	if req.Body != nil && req.Body.Reason != nil {
		reason = *req.Body.Reason
	}
	var cp *coordinator.Checkpoint
	var err error
	if p := principalOf(ctx); p != nil && !p.Can(coordinator.ScopeOperator, req.Job) {
		// authorize let a participant token through: it may veto what expects it.
		participant, _ := p.Participant(req.Job)
		cp, err = s.svc.AbortAsParticipant(ctx, req.Job, req.Id, participant, reason)
	} else {
		cp, err = s.svc.Abort(ctx, req.Job, req.Id, reason)
	}
	if err != nil {
		return nil, err
	}
	s.hub.Note(cp)
	return jsonResponse{status: http.StatusOK, checkpoint: cp}, nil
}

func (s *server) PutAck(ctx context.Context, req PutAckRequestObject) (PutAckResponseObject, error) {
	if req.Body == nil {
		return nil, invalid("body", "an AckRequest is required")
	}
	cp, err := s.svc.Ack(ctx, req.Job, req.Id, req.Participant, req.Body.Epoch)
	if err != nil {
		return nil, err
	}
	s.hub.Note(cp)
	return callerAnswer(cp, req.Params.Prefer, req.Participant), nil
}

// checkPageLimit refuses a page size out of range, as the service would: a page of
// checkpoints is read in parts, each asked with a size of its own.
func checkPageLimit(limit int) error {
	if limit < 1 || limit > coordinator.MaxPageSize {
		return invalid("limit", "must be an integer from 1 to %d", coordinator.MaxPageSize)
	}
	return nil
}

// pageLimit is the page size asked for, DefaultPageSize when the parameter is absent.
func pageLimit(limit *int) int {
	if limit == nil {
		return coordinator.DefaultPageSize
	}
	return *limit
}

func jobPath(job string) string { return "/v1/jobs/" + url.PathEscape(job) }

func checkpointPath(job string, id int64) string {
	return jobPath(job) + "/checkpoints/" + strconv.FormatInt(id, 10)
}

// maxOlderThan is the largest older_than_ms of GET /v1/checkpoints: a year.
const maxOlderThan = 365 * 24 * time.Hour

// waitOf is a request's wait_ms, refused outside 0 to coordinator.MaxLongPoll before any
// waiting begins (a wait on pending may be parked before the service sees it).
func waitOf(ms *int64) (time.Duration, error) {
	if ms == nil {
		return 0, nil
	}
	if *ms < 0 || *ms > coordinator.MaxLongPoll.Milliseconds() {
		return 0, invalid("wait_ms", "must be an integer from 0 to %d", coordinator.MaxLongPoll.Milliseconds())
	}
	return milliseconds(*ms), nil
}
