package coordinatorclient

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Options configures a Coordinator. The zero value is usable.
type Options struct {
	// HTTPClient sends the requests. nil means a client of its own with no overall timeout
	// (each attempt is bounded by RequestTimeout instead), configured by RootCAs and
	// Certificates. A caller that passes an HTTPClient configures its TLS itself, and
	// must leave RootCAs and Certificates unset.
	HTTPClient *http.Client
	// Token, when set, is sent as "Authorization: Bearer <Token>" on every request,
	// including those made through [Coordinator.Client]. It is never logged nor put in
	// an error. Over http:// it travels in clear: use https:// for anything but loopback.
	Token string
	// RootCAs are the certificate authorities an https:// coordinator's certificate must
	// be signed by. nil means the system's.
	RootCAs *x509.CertPool
	// Certificates are the client certificates presented to an https:// coordinator that
	// asks for one (one with --tls-client-ca-file does).
	Certificates []tls.Certificate
	// RequestTimeout bounds one attempt of a request; a long poll gets its wait on top.
	// 0 means 10s.
	RequestTimeout time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff between attempts (with
	// jitter). 0 means 50ms and 5s. A Retry-After header is honoured up to MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// MaxAttempts bounds the attempts of one call; 0 means retry until the context ends.
	MaxAttempts int
	// Logger receives a debug line per retried attempt. nil means no logging.
	Logger *slog.Logger
	// UnencryptedHTTP2 makes the client NewCoordinator makes speak HTTP/2 to an http://
	// coordinator from the first byte (h2c with prior knowledge) instead of HTTP/1.1. All
	// of the Coordinator's requests, a Runner's long-polls included, then share a few
	// connections, and each waiting participant costs the coordinator a fraction of the
	// memory of a connection of its own. The coordinator serves it unless started with
	// --http2=false; a proxy in between must speak it too. Over https:// HTTP/2 is
	// negotiated whenever the coordinator offers it, whatever this says.
	UnencryptedHTTP2 bool
	// FullAnswers makes Vote and Ack return every participant's entry, as curl sees it;
	// by default they ask for the minimal answer (Prefer: return=minimal), whose size does
	// not grow with the participants.
	FullAnswers bool
}

// Coordinator is a typed connection to a coordinator that retries what can be retried:
// network errors, 5xx answers (503 honouring Retry-After), 408 and 429, with exponential
// backoff and jitter, until the call's context ends or MaxAttempts is reached; from the
// third attempt on, each retry is logged at warn. Every other answer is returned at once as
// an *APIError, which errors.Is matches against ErrFenced, ErrAlreadyDecided and the other
// sentinels (with the start of its body when it is no problem document). A transport error
// that sending again cannot cure is returned at once too, saying what is wrong: a
// certificate not trusted, not for the URL's host or expired, plain HTTP on the HTTPS port
// or TLS on a plain one, a client certificate refused.
//
// Every write of the protocol is idempotent when repeated word for word (votes, acks,
// commit, abort, OpenCheckpoint with an idempotency key), so retrying after a lost answer
// is safe. Register is the exception: a retry after a lost answer starts one more epoch,
// which is harmless since only the newest counts.
//
// A Coordinator has no global state and is safe for concurrent use.
type Coordinator struct {
	client *ClientWithResponses
	opts   Options
}

// NewCoordinator returns a Coordinator for the service at baseURL (e.g.
// "http://localhost:8080" or "https://coordinator.example:8443"). It fails only on an
// unusable URL or unusable Options: a Token that a header cannot carry, or RootCAs or
// Certificates given with an HTTPClient.
func NewCoordinator(baseURL string, opts Options) (*Coordinator, error) {
	var clientOpts []ClientOption
	if opts.Token != "" {
		for i := 0; i < len(opts.Token); i++ {
			// A bearer token is visible ASCII (RFC 6750); the token itself is not shown.
			if c := opts.Token[i]; c < 0x21 || c > 0x7e {
				return nil, fmt.Errorf("coordinator client for %q: Options.Token has a byte that is not visible ASCII (at %d)", baseURL, i)
			}
		}
		authorization := "Bearer " + opts.Token
		clientOpts = append(clientOpts, WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", authorization)
			return nil
		}))
	}
	if opts.HTTPClient == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		if opts.RootCAs != nil || len(opts.Certificates) > 0 {
			transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: opts.RootCAs, Certificates: opts.Certificates}
		}
		if opts.UnencryptedHTTP2 && strings.HasPrefix(strings.ToLower(baseURL), "http://") {
			// Without HTTP/1 in the set, http:// requests go over HTTP/2 (net/http's rule).
			transport.Protocols = new(http.Protocols)
			transport.Protocols.SetUnencryptedHTTP2(true)
		}
		opts.HTTPClient = &http.Client{Transport: transport}
	} else if opts.RootCAs != nil || len(opts.Certificates) > 0 || opts.UnencryptedHTTP2 {
		return nil, fmt.Errorf("coordinator client for %q: Options.RootCAs, Options.Certificates and Options.UnencryptedHTTP2 configure the client NewCoordinator makes: "+
			"with an Options.HTTPClient, configure its transport instead", baseURL)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 50 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = opts.MinBackoff
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	client, err := NewClientWithResponses(strings.TrimRight(baseURL, "/"), append(clientOpts, WithHTTPClient(opts.HTTPClient))...)
	if err != nil {
		return nil, fmt.Errorf("coordinator client for %q: %w", baseURL, err)
	}
	return &Coordinator{client: client, opts: opts}, nil
}

// Client returns the generated client underneath, for calls this type does not wrap. It
// does not retry.
func (c *Coordinator) Client() *ClientWithResponses { return c.client }

// outcome is what one attempt produced: the HTTP response (nil on a transport error) and
// the problem document when the body was one.
type outcome struct {
	resp    *http.Response
	decoded bool   // a success body was decoded
	body    []byte // the answer's body as read: the problem document of an error
}

// warnAfter is the attempt from which a call that goes on retrying says so at warn: one
// failure is a glitch, several in a row something an operator should see.
const warnAfter = 3

// do sends a request until it succeeds (2xx), fails for good, or ctx ends.
// wait is the long-poll time the attempt may take on top of RequestTimeout.
func (c *Coordinator) do(ctx context.Context, op string, wait time.Duration, send func(context.Context) (outcome, error)) error {
	var last error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout+wait)
		out, err := send(actx)
		cancel()
		var retryAfter time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w (last error: %v)", op, context.Cause(ctx), err)
			}
			if hint, permanent := permanentTransport(err); permanent {
				return fmt.Errorf("%s: %s: %w", op, hint, err)
			}
			last = fmt.Errorf("%s: %w", op, err)
		case out.resp.StatusCode >= 200 && out.resp.StatusCode < 300:
			if !out.decoded {
				return fmt.Errorf("%s: HTTP %d without the expected JSON body", op, out.resp.StatusCode)
			}
			return nil
		default:
			apiErr := &APIError{Op: op, StatusCode: out.resp.StatusCode, Problem: ProblemIn(out.resp, out.body),
				RetryAfter: parseRetryAfter(out.resp.Header.Get("Retry-After"))}
			if apiErr.Problem == nil {
				apiErr.Body = bodyExcerpt(out.body)
			}
			if !apiErr.transient() {
				return apiErr
			}
			last, retryAfter = apiErr, apiErr.RetryAfter
		}
		if c.opts.MaxAttempts > 0 && attempt >= c.opts.MaxAttempts {
			return last
		}
		delay := max(c.backoff(attempt), min(retryAfter, c.opts.MaxBackoff))
		level := slog.LevelDebug
		if attempt >= warnAfter {
			level = slog.LevelWarn
		}
		c.opts.Logger.Log(ctx, level, "coordinator call failed, retrying", "op", op, "attempt", attempt, "delay", delay, "error", last)
		if err := sleep(ctx, delay); err != nil {
			return fmt.Errorf("%s: %w (last error: %v)", op, context.Cause(ctx), last)
		}
	}
}

// backoff is the delay before attempt+1: exponential from MinBackoff, capped at
// MaxBackoff, with "equal jitter" (half fixed, half random) so that participants that
// failed together do not retry together.
func (c *Coordinator) backoff(attempt int) time.Duration {
	return jitteredBackoff(c.opts.MinBackoff, c.opts.MaxBackoff, attempt)
}

func jitteredBackoff(lo, hi time.Duration, attempt int) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return half + rand.N(half+1)
}

// permanentTransport reports whether a transport-level error cannot go away by sending
// the request again, with what to tell the caller: the coordinator's certificate is not
// trusted, not for this name, or expired; the coordinator speaks plain HTTP to this HTTPS
// client; it refused this client's certificate; or an answer could not be decoded (a bug
// on one side, not a glitch). Everything else (refused, reset, timed out) may pass.
func permanentTransport(err error) (hint string, permanent bool) {
	var (
		syn       *json.SyntaxError
		typ       *json.UnmarshalTypeError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		record    tls.RecordHeaderError
		op        *net.OpError
	)
	switch {
	case errors.As(err, &syn), errors.As(err, &typ):
		return "the answer could not be decoded", true
	case errors.As(err, &authority):
		return "the coordinator's TLS certificate is signed by an authority this client does not trust " +
			"(give its CA: Options.RootCAs)", true
	case errors.As(err, &hostname):
		return "the coordinator's TLS certificate is not valid for the host name in the URL", true
	case errors.As(err, &invalid):
		return "the coordinator's TLS certificate is not valid (expired, not yet valid, or not for a server)", true
	case errors.As(err, &verify):
		return "the coordinator's TLS certificate could not be verified", true
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "the coordinator does not speak TLS on this port (use http://, or the port it serves HTTPS on)", true
	case errors.As(err, &op) && op.Op == "remote error" && strings.Contains(op.Err.Error(), "tls:"):
		return "the coordinator refused the TLS handshake (a client certificate it does not accept, or none)", true
	}
	return "", false
}

// bodyExcerpt is the start of an answer's body that is no problem document, for its error:
// at most 1 KiB, valid UTF-8.
func bodyExcerpt(body []byte) string {
	const most = 1 << 10
	if len(body) > most {
		body = body[:most]
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(body), ""))
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// sleep waits d or until ctx ends, returning ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// PutJob creates or replaces a job's configuration.
func (c *Coordinator) PutJob(ctx context.Context, job string, cfg JobConfig) (*Job, error) {
	var out *Job
	err := c.do(ctx, "put job "+job, 0, func(ctx context.Context) (outcome, error) {
		r, err := c.client.PutJobWithResponse(ctx, job, cfg)
		if err != nil {
			return outcome{}, err
		}
		// 201 created or 200 replaced: both succeed.
		out = r.JSON201
		if out == nil {
			out = r.JSON200
		}
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// Job returns a job's configuration, epochs, last checkpoint and restore point.
func (c *Coordinator) Job(ctx context.Context, job string) (*Job, error) {
	var out *Job
	err := c.do(ctx, "get job "+job, 0, func(ctx context.Context) (outcome, error) {
		r, err := c.client.GetJobWithResponse(ctx, job)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON200
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// Register starts a new epoch for participant and returns it with what the participant
// owes. Every checkpoint still preparing that it had not voted on is aborted by it.
func (c *Coordinator) Register(ctx context.Context, job, participant string) (*Registration, error) {
	var out *Registration
	err := c.do(ctx, "register "+job+"/"+participant, 0, func(ctx context.Context) (outcome, error) {
		r, err := c.client.RegisterParticipantWithResponse(ctx, job, participant)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON200
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// Pending returns what participant owes, oldest first, and its current epoch. With wait >
// 0 and nothing owed, the coordinator waits up to wait (at most a minute) until something
// is, or the participant registers again, before it answers: a long-poll that costs one
// request per wait while idle.
func (c *Coordinator) Pending(ctx context.Context, job, participant string, wait time.Duration) (*Pending, error) {
	return c.PendingFor(ctx, job, participant, 0, wait)
}

// PendingFor is Pending for the instance that registered with epoch (0: any): its wait ends
// at once when the participant has registered again since, even before the call, and the
// answer's Epoch is then the newer one (the instance is fenced). The Runner uses it.
func (c *Coordinator) PendingFor(ctx context.Context, job, participant string, epoch int64, wait time.Duration) (*Pending, error) {
	var params GetPendingParams
	if wait > 0 {
		ms := min(wait, time.Minute).Milliseconds()
		params.WaitMs = &ms
	}
	if epoch > 0 {
		params.Epoch = &epoch
	}
	var out *Pending
	err := c.do(ctx, "pending "+job+"/"+participant, wait, func(ctx context.Context) (outcome, error) {
		r, err := c.client.GetPendingWithResponse(ctx, job, participant, &params)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON200
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// OpenCheckpoint opens the job's next checkpoint (phase one). Every attempt carries an
// Idempotency-Key, so that the retries of this call never open a second checkpoint (an
// attempt whose answer was lost may have opened one): idempotencyKey, or a random one when
// it is empty. Pass your own key to make your own retries of the call safe too: a repeat
// returns the checkpoint the key opened. timeout 0 means the job's checkpoint_timeout_ms.
// It returns ErrTooManyCheckpoints while max_concurrent_checkpoints are preparing.
func (c *Coordinator) OpenCheckpoint(ctx context.Context, job, idempotencyKey string, timeout time.Duration) (*Checkpoint, error) {
	if idempotencyKey == "" {
		idempotencyKey = "open-" + crand.Text()
	}
	params := PrepareCheckpointParams{IdempotencyKey: &idempotencyKey}
	var body PrepareRequest
	if timeout > 0 {
		ms := timeout.Milliseconds()
		body.TimeoutMs = &ms
	}
	var out *Checkpoint
	err := c.do(ctx, "open checkpoint of "+job, 0, func(ctx context.Context) (outcome, error) {
		r, err := c.client.PrepareCheckpointWithResponse(ctx, job, &params, body)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON201
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// Checkpoint returns one checkpoint. With wait > 0 it long-polls: while the checkpoint is
// preparing, the coordinator answers when it is decided or after wait (at most 60s).
func (c *Coordinator) Checkpoint(ctx context.Context, job string, id int64, wait time.Duration) (*Checkpoint, error) {
	return c.getCheckpoint(ctx, job, id, wait, GetCheckpointParams{})
}

// getCheckpoint reads a checkpoint with params, long-polling up to wait.
func (c *Coordinator) getCheckpoint(ctx context.Context, job string, id int64, wait time.Duration, params GetCheckpointParams) (*Checkpoint, error) {
	wait = min(wait, time.Minute)
	if wait > 0 {
		ms := wait.Milliseconds()
		params.WaitMs = &ms
	}
	var out *Checkpoint
	err := c.do(ctx, fmt.Sprintf("get checkpoint %s/%d", job, id), wait, func(ctx context.Context) (outcome, error) {
		r, err := c.client.GetCheckpointWithResponse(ctx, job, id, &params)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON200
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// Checkpoints returns the job's checkpoints with one of the given statuses (all when
// none), newest first, following every page.
func (c *Coordinator) Checkpoints(ctx context.Context, job string, statuses ...CheckpointStatus) ([]Checkpoint, error) {
	var all []Checkpoint
	var params ListCheckpointsParams
	if len(statuses) > 0 {
		params.Status = &statuses
	}
	limit := 1000
	params.Limit = &limit
	for {
		var page *CheckpointList
		err := c.do(ctx, "list checkpoints of "+job, 0, func(ctx context.Context) (outcome, error) {
			r, err := c.client.ListCheckpointsWithResponse(ctx, job, &params)
			if err != nil {
				return outcome{}, err
			}
			page = r.JSON200
			return outcome{r.HTTPResponse, page != nil, r.Body}, nil
		})
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil {
			return all, nil
		}
		params.Cursor = page.NextCursor
	}
}

// minimal is the Prefer header of the answers a participant needs: its own entry and the
// counts, not every participant's committables (openapi.yaml, PreferMinimal).
var minimal = "return=minimal"

// Vote records participant's vote and returns the checkpoint after it (so the last voter
// sees the decision): with only participant's entry, and the counts Votes and Acks, unless
// Options.FullAnswers. It returns ErrFenced when epoch is no longer current,
// ErrAlreadyDecided (with the checkpoint in the *APIError) when the checkpoint was decided
// first, ErrVoteConflict when another vote was recorded for this participant.
func (c *Coordinator) Vote(ctx context.Context, job string, id int64, participant string, v VoteRequest) (*Checkpoint, error) {
	return c.VoteAndWait(ctx, job, id, participant, v, 0)
}

// VoteAndWait is Vote, and then, when the vote leaves the checkpoint preparing, a wait of
// up to wait (at most a minute) for its decision: the answer is the checkpoint decided, or
// still preparing when wait ended. The vote is recorded before the wait. For jobs that
// hold one checkpoint open at a time: a checkpoint opened meanwhile does not end the wait.
func (c *Coordinator) VoteAndWait(ctx context.Context, job string, id int64, participant string, v VoteRequest, wait time.Duration) (*Checkpoint, error) {
	params, wait := c.voteParams(wait)
	var out *Checkpoint
	err := c.do(ctx, fmt.Sprintf("vote %s %s/%d/%s", v.Vote, job, id, participant), wait, func(ctx context.Context) (outcome, error) {
		r, err := c.client.PutVoteWithResponse(ctx, job, id, participant, &params, v)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON200
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// voteParams are a vote's parameters, with its wait (at most a minute).
func (c *Coordinator) voteParams(wait time.Duration) (PutVoteParams, time.Duration) {
	params := PutVoteParams{Prefer: c.prefer()}
	wait = min(wait, time.Minute)
	if wait > 0 {
		ms := wait.Milliseconds()
		params.WaitMs = &ms
	}
	return params, wait
}

// voteStatus is VoteAndWait for the Runner, which needs only the checkpoint's status from
// a successful vote's answer: the rest of the answer is read but not decoded. Refusals
// are decoded as VoteAndWait's are (ErrAlreadyDecided carries the checkpoint).
func (c *Coordinator) voteStatus(ctx context.Context, job string, id int64, participant string, v VoteRequest, wait time.Duration) (CheckpointStatus, error) {
	params, wait := c.voteParams(wait)
	var status CheckpointStatus
	err := c.do(ctx, fmt.Sprintf("vote %s %s/%d/%s", v.Vote, job, id, participant), wait, func(ctx context.Context) (outcome, error) {
		resp, err := c.client.PutVote(ctx, job, id, participant, &params, v)
		if err != nil {
			return outcome{}, err
		}
		if jsonOK(resp) {
			var answer struct {
				Status CheckpointStatus `json:"status"`
			}
			err := json.NewDecoder(resp.Body).Decode(&answer)
			if err = errors.Join(err, drain(resp.Body)); err != nil {
				return outcome{}, err
			}
			status = answer.Status
			return outcome{resp, status != "", nil}, nil
		}
		r, err := ParsePutVoteResponse(resp)
		if err != nil {
			return outcome{}, err
		}
		return outcome{r.HTTPResponse, false, r.Body}, nil
	})
	return status, err
}

// jsonOK reports whether resp is a 200 answer in JSON: a success whose body the Runner
// reads itself, or not at all (drain), rather than through the generated parser.
func jsonOK(resp *http.Response) bool {
	return resp.StatusCode == http.StatusOK && strings.Contains(resp.Header.Get("Content-Type"), "json")
}

// drain reads the rest of body, so that its connection can carry the next request, and
// closes it.
func drain(body io.ReadCloser) error {
	_, err := io.Copy(io.Discard, body)
	return errors.Join(err, body.Close())
}

// Ack tells the coordinator that participant applied the checkpoint's decision, and
// returns the checkpoint after it (minimal, as Vote's). It returns ErrFenced when epoch is
// no longer current and ErrNotDecided while the checkpoint is preparing.
func (c *Coordinator) Ack(ctx context.Context, job string, id int64, participant string, epoch int64) (*Checkpoint, error) {
	return c.ack(ctx, job, id, participant, epoch, true)
}

// ack is Ack; with keep false the answer of a successful ack is read but not decoded, and
// the checkpoint returned is nil: the Runner, which acks a decision it applied, has no use
// for it.
func (c *Coordinator) ack(ctx context.Context, job string, id int64, participant string, epoch int64, keep bool) (*Checkpoint, error) {
	var out *Checkpoint
	params := &PutAckParams{Prefer: c.prefer()}
	body := AckRequest{Epoch: epoch}
	err := c.do(ctx, fmt.Sprintf("ack %s/%d/%s", job, id, participant), 0, func(ctx context.Context) (outcome, error) {
		resp, err := c.client.PutAck(ctx, job, id, participant, params, body)
		if err != nil {
			return outcome{}, err
		}
		if !keep && jsonOK(resp) {
			if err := drain(resp.Body); err != nil {
				return outcome{}, err
			}
			return outcome{resp, true, nil}, nil
		}
		r, err := ParsePutAckResponse(resp)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON200
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// Commit decides commit (for jobs without auto_commit); reason, if not empty, goes to the
// audit. It returns ErrAlreadyDecided on an aborted checkpoint; other refusals
// (votes_missing, lower_checkpoint_open) as *APIError.
func (c *Coordinator) Commit(ctx context.Context, job string, id int64, reason string) (*Checkpoint, error) {
	var body CommitRequest
	if reason != "" {
		body.Reason = &reason
	}
	var out *Checkpoint
	err := c.do(ctx, fmt.Sprintf("commit %s/%d", job, id), 0, func(ctx context.Context) (outcome, error) {
		r, err := c.client.CommitCheckpointWithResponse(ctx, job, id, body)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON200
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// Complete settles, as an operator, the acks that participants gone for good will never
// send (see POST .../complete in openapi.yaml); reason, if not empty, goes to the audit. It
// returns ErrNotDecided on a preparing checkpoint.
func (c *Coordinator) Complete(ctx context.Context, job string, id int64, reason string) (*Checkpoint, error) {
	var body CompleteRequest
	if reason != "" {
		body.Reason = &reason
	}
	var out *Checkpoint
	err := c.do(ctx, fmt.Sprintf("complete %s/%d", job, id), 0, func(ctx context.Context) (outcome, error) {
		r, err := c.client.CompleteCheckpointWithResponse(ctx, job, id, body)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON200
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// Abort decides abort (cascading to higher preparing checkpoints). It returns
// ErrAlreadyDecided, with the checkpoint in the *APIError, when commit was decided first.
func (c *Coordinator) Abort(ctx context.Context, job string, id int64, reason string) (*Checkpoint, error) {
	var body AbortRequest
	if reason != "" {
		body.Reason = &reason
	}
	var out *Checkpoint
	err := c.do(ctx, fmt.Sprintf("abort %s/%d", job, id), 0, func(ctx context.Context) (outcome, error) {
		r, err := c.client.AbortCheckpointWithResponse(ctx, job, id, body)
		if err != nil {
			return outcome{}, err
		}
		out = r.JSON200
		return outcome{r.HTTPResponse, out != nil, r.Body}, nil
	})
	return out, err
}

// prefer is the Prefer header of Vote and Ack: minimal unless Options.FullAnswers.
func (c *Coordinator) prefer() *string {
	if c.opts.FullAnswers {
		return nil
	}
	return &minimal
}

// decision long-polls checkpoint id for participant, with a minimal answer: its status and
// participant's entry (the Runner's wait for a decision).
func (c *Coordinator) decision(ctx context.Context, job string, id int64, participant string, wait time.Duration) (*Checkpoint, error) {
	return c.getCheckpoint(ctx, job, id, wait, GetCheckpointParams{Prefer: &minimal, Participant: &participant})
}
