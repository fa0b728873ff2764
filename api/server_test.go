package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
	"github.com/twophase/coordinator/store/sqlite"
)

// These tests run the HTTP layer on the real service, once on a real Postgres database (one
// per test, from pgtest) and once on the embedded store (one data directory per test),
// through the generated client and through raw requests.

// bundle is what a test needs: a server on its own database and clients of it.
type bundle struct {
	url    string
	client *coordinatorclient.ClientWithResponses
	store  coordinator.Store
}

// storeKinds are the stores every HTTP test runs on: the same behaviour is asserted of
// both (the conformance suite, at the HTTP level).
var storeKinds = []string{"postgres", "embedded"}

// onEachStore runs test once per store, as subtests named after the store; setup reads
// the name to open the right one.
func onEachStore(t *testing.T, test func(t *testing.T)) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t)
		})
	}
}

func TestCurlRound(t *testing.T)               { onEachStore(t, testCurlRound) }
func TestClientRound(t *testing.T)             { onEachStore(t, testClientRound) }
func TestErrorCodes(t *testing.T)              { onEachStore(t, testErrorCodes) }
func TestBadInputChangesNothing(t *testing.T)  { onEachStore(t, testBadInputChangesNothing) }
func TestCommittablesByteForByte(t *testing.T) { onEachStore(t, testCommittablesByteForByte) }
func TestPagination(t *testing.T)              { onEachStore(t, testPagination) }
func TestDeadlineAndLongPoll(t *testing.T)     { onEachStore(t, testDeadlineAndLongPoll) }
func TestIdempotentWrites(t *testing.T)        { onEachStore(t, testIdempotentWrites) }
func TestRequestIDEchoed(t *testing.T)         { onEachStore(t, testRequestIDEchoed) }
func TestUnavailable(t *testing.T)             { onEachStore(t, testUnavailable) }

// testStore opens the store the test's name says (".../embedded" or ".../postgres"), closed
// when the test ends.
func testStore(t *testing.T) coordinator.Store {
	t.Helper()
	var store coordinator.Store
	var err error
	if strings.Contains(t.Name(), "/embedded") {
		store, err = sqlite.Open(context.Background(), t.TempDir(), sqlite.Options{Migrate: true})
	} else {
		store, err = postgres.Open(context.Background(), pgtest.URL(t), postgres.Options{})
	}
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(store.Close)
	return store
}

func setup(t *testing.T) *bundle {
	t.Helper()
	store := testStore(t)
	svc := coordinator.NewService(store, nil)
	srv := httptest.NewServer(NewHandler(svc, Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute}))
	t.Cleanup(srv.Close)
	client, err := coordinatorclient.NewClientWithResponses(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{url: srv.URL, client: client, store: store}
}

// answer is a raw HTTP response, read.
type answer struct {
	status int
	header http.Header
	body   []byte
	// url is the request's: a problem's type resolves against it.
	url *url.URL
}

// call sends a raw request. body "" sends none; contentType "" sends no Content-Type.
func (b *bundle) call(t *testing.T, method, path, contentType, body string, header ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s: no X-Request-Id", method, path)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusNoContent &&
		ct != "application/json" && ct != "application/problem+json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: got, url: req.URL}
}

// json sends body as curl --json does.
func (b *bundle) json(t *testing.T, method, path, body string, header ...string) answer {
	t.Helper()
	return b.call(t, method, path, "application/json", body, header...)
}

// ok checks a 2xx answer and decodes it into v.
func (a answer) ok(t *testing.T, status int, v any) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	if v != nil {
		dec := json.NewDecoder(bytes.NewReader(a.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("decode %s: %v", a.body, err)
		}
	}
}

// problem checks a problem answer, and that its type resolves against the request's URL to
// the page about its code on the server that answered; it returns the problem.
func (a answer) problem(t *testing.T, status int, code string) Problem {
	t.Helper()
	p := decodeProblem(t, &http.Response{StatusCode: a.status, Header: a.header, Body: io.NopCloser(bytes.NewReader(a.body))}, status, code)
	checkProblemTypeResolves(t, http.DefaultClient, a.url, p)
	return p
}

func (b *bundle) checkpoint(t *testing.T, job string, id int64) Checkpoint {
	t.Helper()
	var cp Checkpoint
	b.call(t, "GET", fmt.Sprintf("/v1/jobs/%s/checkpoints/%d", job, id), "", "").ok(t, 200, &cp)
	return cp
}

func (b *bundle) rawCheckpoint(t *testing.T, job string, id int64) string {
	t.Helper()
	a := b.call(t, "GET", fmt.Sprintf("/v1/jobs/%s/checkpoints/%d", job, id), "", "")
	a.ok(t, 200, nil)
	return string(a.body)
}

// job creates a job and registers every participant once (epoch 1).
func (b *bundle) job(t *testing.T, name, config string, participants ...string) {
	t.Helper()
	b.json(t, "PUT", "/v1/jobs/"+name, config).ok(t, 201, nil)
	for _, p := range participants {
		b.call(t, "POST", "/v1/jobs/"+name+"/participants/"+p+"/register", "", "").ok(t, 200, nil)
	}
}

func votePathOf(job string, id int64, p string) string {
	return fmt.Sprintf("/v1/jobs/%s/checkpoints/%d/votes/%s", job, id, p)
}

func ackPathOf(job string, id int64, p string) string {
	return fmt.Sprintf("/v1/jobs/%s/checkpoints/%d/acks/%s", job, id, p)
}

// TestHeadAnswersAsGet: every GET route answers HEAD with the GET's status and headers,
// without the body (RFC 9110 9.3.2), as a load balancer probing /healthz expects.
func TestHeadAnswersAsGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.job(t, "j", `{"participants":["a"]}`, "a")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	for _, path := range []string{"/healthz", "/readyz", "/v1/jobs/j", "/v1/jobs/j/checkpoints/1", "/v1/jobs/j/checkpoints",
		"/v1/jobs/nope", "/v1/jobs/j/checkpoints/x"} {
		get := b.call(t, "GET", path, "", "")
		head := b.call(t, "HEAD", path, "", "")
		if head.status != get.status || len(head.body) != 0 {
			t.Errorf("HEAD %s: %d with %d body bytes, GET: %d", path, head.status, len(head.body), get.status)
		}
		for _, h := range []string{"Content-Type", "Content-Length"} {
			if head.header.Get(h) != get.header.Get(h) {
				t.Errorf("HEAD %s: %s %q, GET: %q", path, h, head.header.Get(h), get.header.Get(h))
			}
		}
		if get.header.Get("Content-Length") != strconv.Itoa(len(get.body)) {
			t.Errorf("GET %s: Content-Length %q for %d bytes", path, get.header.Get("Content-Length"), len(get.body))
		}
	}
	// Not on routes without GET.
	a := b.call(t, "HEAD", votePathOf("j", 1, "a"), "", "")
	if a.status != 405 || strings.Join(a.header.Values("Allow"), ",") != "PUT" {
		t.Errorf("HEAD on a vote: %d, Allow %q; want 405, Allow PUT", a.status, a.header.Values("Allow"))
	}
}

// TestCurlRound plays the README's "A round, by curl", request for request.
func testCurlRound(t *testing.T) {
	b := setup(t)

	var job Job
	b.json(t, "PUT", "/v1/jobs/orders", `{"participants":["sink-a","sink-b"]}`).ok(t, 201, &job)
	if job.CheckpointTimeoutMs != 60000 || job.MaxConcurrentCheckpoints != 1 || !job.AutoCommit ||
		job.LastCheckpoint != nil || job.LastCommitted != nil || job.Epochs["sink-a"] != 0 || job.Epochs["sink-b"] != 0 {
		t.Errorf("new job = %+v, want the defaults, no checkpoint, epochs 0", job)
	}

	var reg Registration
	b.call(t, "POST", "/v1/jobs/orders/participants/sink-a/register", "", "").ok(t, 200, &reg)
	if reg.Epoch != 1 || reg.Job != "orders" || reg.Participant != "sink-a" || reg.Pending == nil || len(reg.Pending) != 0 {
		t.Errorf("register sink-a = %+v, want epoch 1 and nothing pending", reg)
	}
	b.call(t, "POST", "/v1/jobs/orders/participants/sink-b/register", "", "").ok(t, 200, &reg)
	if reg.Epoch != 1 {
		t.Errorf("register sink-b = %+v, want epoch 1", reg)
	}

	var cp Checkpoint
	a := b.call(t, "POST", "/v1/jobs/orders/checkpoints", "", "")
	a.ok(t, 201, &cp)
	if cp.Id != 1 || cp.Status != Preparing || a.header.Get("Location") != "/v1/jobs/orders/checkpoints/1" {
		t.Errorf("prepare = %+v (Location %q), want checkpoint 1 preparing", cp, a.header.Get("Location"))
	}

	b.json(t, "PUT", votePathOf("orders", 1, "sink-a"), `{"epoch":1,"vote":"prepared","committables":[{"txn":"a-1"}]}`).ok(t, 200, &cp)
	if cp.Status != Preparing {
		t.Errorf("after the first vote: %s, want preparing", cp.Status)
	}
	b.json(t, "PUT", votePathOf("orders", 1, "sink-b"), `{"epoch":1,"vote":"prepared","committables":[{"file":"/out/.part-7"}]}`).ok(t, 200, &cp)
	if cp.Status != Committing || cp.DecidedAt == nil {
		t.Errorf("after the last vote: %+v, want committing", cp)
	}
	b.json(t, "PUT", ackPathOf("orders", 1, "sink-a"), `{"epoch":1}`).ok(t, 200, &cp)
	if cp.Status != Committing {
		t.Errorf("after the first ack: %s, want committing", cp.Status)
	}
	b.json(t, "PUT", ackPathOf("orders", 1, "sink-b"), `{"epoch":1}`).ok(t, 200, &cp)
	if cp.Status != Committed || cp.CompletedAt == nil || cp.AbortReason != nil {
		t.Errorf("after the last ack: %+v, want committed", cp)
	}
	if string(cp.Participants[0].Committables) != `[{"txn":"a-1"}]` || string(cp.Participants[1].Committables) != `[{"file":"/out/.part-7"}]` {
		t.Errorf("committables = %s, %s", cp.Participants[0].Committables, cp.Participants[1].Committables)
	}

	b.call(t, "GET", "/v1/jobs/orders", "", "").ok(t, 200, &job)
	if job.LastCheckpoint == nil || *job.LastCheckpoint != 1 || job.LastCommitted == nil || *job.LastCommitted != 1 ||
		job.Epochs["sink-a"] != 1 || job.Epochs["sink-b"] != 1 {
		t.Errorf("job after the round = %+v", job)
	}
}

// TestClientRound drives every operation through the generated client.
func testClientRound(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	c := b.client

	health, err := c.GetHealthzWithResponse(ctx)
	if err != nil || health.StatusCode() != 200 || health.JSON200.Status != "ok" {
		t.Fatalf("healthz: %v %+v", err, health)
	}
	ready, err := c.GetReadyzWithResponse(ctx)
	if err != nil || ready.StatusCode() != 200 || ready.JSON200.Status != "ok" {
		t.Fatalf("readyz: %v %s", err, ready.Body)
	}

	timeout := int64(30000)
	put, err := c.PutJobWithResponse(ctx, "payments", coordinatorclient.JobConfig{
		Participants: []string{"kafka-sink-0", "pg-sink-1"}, CheckpointTimeoutMs: &timeout,
	})
	if err != nil || put.StatusCode() != 201 || put.JSON201.CheckpointTimeoutMs != 30000 {
		t.Fatalf("create job: %v %s", err, put.Body)
	}
	if loc := put.HTTPResponse.Header.Get("Location"); loc != "/v1/jobs/payments" {
		t.Errorf("Location = %q", loc)
	}
	autoCommit := false
	put, err = c.PutJobWithResponse(ctx, "payments", coordinatorclient.JobConfig{
		Participants: []string{"kafka-sink-0", "pg-sink-1"}, AutoCommit: &autoCommit,
	})
	if err != nil || put.StatusCode() != 200 || put.JSON200.AutoCommit || put.JSON200.CheckpointTimeoutMs != 60000 {
		t.Fatalf("update job: %v %s", err, put.Body)
	}
	if put.JSON200.CreatedAt.Location() != time.UTC || put.JSON200.UpdatedAt.Before(put.JSON200.CreatedAt) {
		t.Errorf("times = %v, %v", put.JSON200.CreatedAt, put.JSON200.UpdatedAt)
	}

	jobs, err := c.ListJobsWithResponse(ctx, nil)
	if err != nil || jobs.StatusCode() != 200 || len(jobs.JSON200.Items) != 1 || jobs.JSON200.NextCursor != nil {
		t.Fatalf("list jobs: %v %s", err, jobs.Body)
	}

	epochs := map[string]int64{}
	for _, p := range []string{"kafka-sink-0", "pg-sink-1"} {
		reg, err := c.RegisterParticipantWithResponse(ctx, "payments", p)
		if err != nil || reg.StatusCode() != 200 {
			t.Fatalf("register %s: %v %s", p, err, reg.Body)
		}
		epochs[p] = reg.JSON200.Epoch
	}

	key := "prepare-1"
	prep, err := c.PrepareCheckpointWithBodyWithResponse(ctx, "payments", &coordinatorclient.PrepareCheckpointParams{IdempotencyKey: &key}, "", nil)
	if err != nil || prep.StatusCode() != 201 {
		t.Fatalf("prepare: %v %s", err, prep.Body)
	}
	cp := prep.JSON201
	if cp.Id != 1 || cp.Status != coordinatorclient.Preparing || cp.AutoCommit || cp.DecidedAt != nil ||
		cp.CompletedAt != nil || cp.AbortReason != nil || cp.CreatedAt.Location() != time.UTC ||
		cp.Deadline.Sub(cp.CreatedAt) != time.Minute {
		t.Errorf("prepared = %+v", cp)
	}
	// A retry with the same key, as the client sends it with an empty JSON body, replays.
	replay, err := c.PrepareCheckpointWithResponse(ctx, "payments", &coordinatorclient.PrepareCheckpointParams{IdempotencyKey: &key}, coordinatorclient.PrepareRequest{})
	if err != nil || replay.StatusCode() != 201 || replay.JSON201.Id != 1 {
		t.Fatalf("replay: %v %s", err, replay.Body)
	}
	for _, p := range cp.Participants {
		if p.Vote != nil || p.Epoch != nil || p.VotedAt != nil || p.AckedAt != nil || string(p.Committables) != "[]" {
			t.Errorf("unvoted participant = %+v, want nulls and []", p)
		}
	}
	raw := b.rawCheckpoint(t, "payments", 1)
	for _, want := range []string{`"vote":null`, `"epoch":null`, `"committables":[]`, `"abort_reason":null`, `"decided_at":null`} {
		if !strings.Contains(raw, want) {
			t.Errorf("checkpoint %s lacks %s", raw, want)
		}
	}

	pending, err := c.GetPendingWithResponse(ctx, "payments", "pg-sink-1", nil)
	if err != nil || pending.StatusCode() != 200 || len(pending.JSON200.Items) != 1 ||
		pending.JSON200.Items[0].Action != coordinatorclient.PendingActionVote || pending.JSON200.Epoch != epochs["pg-sink-1"] {
		t.Fatalf("pending: %v %s", err, pending.Body)
	}

	committables := json.RawMessage(`[{"topic":"orders","partition":3,"offset":1041}, "x"]`)
	vote, err := c.PutVoteWithResponse(ctx, "payments", 1, "kafka-sink-0", nil, coordinatorclient.VoteRequest{
		Epoch: epochs["kafka-sink-0"], Vote: coordinatorclient.VoteKindPrepared, Committables: &committables,
	})
	if err != nil || vote.StatusCode() != 200 || vote.JSON200.Status != coordinatorclient.Preparing {
		t.Fatalf("vote: %v %s", err, vote.Body)
	}
	voted := vote.JSON200.Participants[0]
	if voted.Vote == nil || *voted.Vote != coordinatorclient.VoteKindPrepared || voted.Epoch == nil || *voted.Epoch != epochs["kafka-sink-0"] ||
		voted.VotedAt == nil || string(voted.Committables) != `[{"topic":"orders","partition":3,"offset":1041},"x"]` {
		t.Errorf("voted participant = %+v (committables %s)", voted, voted.Committables)
	}
	vote, err = c.PutVoteWithResponse(ctx, "payments", 1, "pg-sink-1", nil, coordinatorclient.VoteRequest{
		Epoch: epochs["pg-sink-1"], Vote: coordinatorclient.VoteKindPrepared,
	})
	if err != nil || vote.StatusCode() != 200 || vote.JSON200.Status != coordinatorclient.Preparing {
		t.Fatalf("second vote (auto_commit off): %v %s", err, vote.Body)
	}
	if got := string(vote.JSON200.Participants[1].Committables); got != "[]" {
		t.Errorf("a prepared vote without committables has %s, want []", got)
	}

	commit, err := c.CommitCheckpointWithResponse(ctx, "payments", 1, coordinatorclient.CommitRequest{})
	if err != nil || commit.StatusCode() != 200 || commit.JSON200.Status != coordinatorclient.Committing {
		t.Fatalf("commit: %v %s", err, commit.Body)
	}

	list, err := c.ListCheckpointsWithResponse(ctx, "payments", nil)
	if err != nil || list.StatusCode() != 200 || len(list.JSON200.Items) != 1 || list.JSON200.NextCursor != nil {
		t.Fatalf("list checkpoints: %v %s", err, list.Body)
	}
	open, err := c.ListOpenCheckpointsWithResponse(ctx, nil)
	if err != nil || open.StatusCode() != 200 || len(open.JSON200.Items) != 1 || open.JSON200.Items[0].Status != coordinatorclient.Committing {
		t.Fatalf("list open checkpoints: %v %s", err, open.Body)
	}

	del, err := c.DeleteJobWithResponse(ctx, "payments")
	if err != nil || del.StatusCode() != 409 || del.ApplicationproblemJSON409 == nil || del.ApplicationproblemJSON409.Code != "job_busy" {
		t.Fatalf("delete while committing: %v %d %s", err, del.StatusCode(), del.Body)
	}

	pending, err = c.GetPendingWithResponse(ctx, "payments", "kafka-sink-0", nil)
	if err != nil || len(pending.JSON200.Items) != 1 || pending.JSON200.Items[0].Action != coordinatorclient.PendingActionCommit ||
		string(pending.JSON200.Items[0].Committables) != `[{"topic":"orders","partition":3,"offset":1041},"x"]` {
		t.Fatalf("pending commit: %v %s", err, pending.Body)
	}

	for _, p := range []string{"kafka-sink-0", "pg-sink-1"} {
		ack, err := c.PutAckWithResponse(ctx, "payments", 1, p, nil, coordinatorclient.AckRequest{Epoch: epochs[p]})
		if err != nil || ack.StatusCode() != 200 {
			t.Fatalf("ack %s: %v %s", p, err, ack.Body)
		}
		cp = ack.JSON200
	}
	if cp.Status != coordinatorclient.Committed {
		t.Errorf("after every ack: %s", cp.Status)
	}

	get, err := c.GetJobWithResponse(ctx, "payments")
	if err != nil || get.StatusCode() != 200 || get.JSON200.LastCommitted == nil || *get.JSON200.LastCommitted != 1 {
		t.Fatalf("get job: %v %s", err, get.Body)
	}

	del, err = c.DeleteJobWithResponse(ctx, "payments")
	if err != nil || del.StatusCode() != 204 || len(del.Body) != 0 {
		t.Fatalf("delete: %v %d %s", err, del.StatusCode(), del.Body)
	}
	get, err = c.GetJobWithResponse(ctx, "payments")
	if err != nil || get.StatusCode() != 404 || get.ApplicationproblemJSON404.Code != "not_found" {
		t.Fatalf("get deleted job: %v %d %s", err, get.StatusCode(), get.Body)
	}

	// Created again, the job continues its ids and epochs.
	put, err = c.PutJobWithResponse(ctx, "payments", coordinatorclient.JobConfig{Participants: []string{"kafka-sink-0"}})
	if err != nil || put.StatusCode() != 201 {
		t.Fatalf("create again: %v %s", err, put.Body)
	}
	reg, err := c.RegisterParticipantWithResponse(ctx, "payments", "kafka-sink-0")
	if err != nil || reg.JSON200 == nil || reg.JSON200.Epoch <= epochs["kafka-sink-0"] {
		t.Fatalf("register after re-creation: %v %s", err, reg.Body)
	}
	prep, err = c.PrepareCheckpointWithBodyWithResponse(ctx, "payments", nil, "", nil)
	if err != nil || prep.JSON201 == nil || prep.JSON201.Id != 2 {
		t.Fatalf("prepare after re-creation: %v %s", err, prep.Body)
	}
}

// TestErrorCodes provokes every error code of openapi.yaml through the real service.
func testErrorCodes(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a","b"],"auto_commit":false,"max_concurrent_checkpoints":2}`, "a", "b")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil) // 1
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil) // 2

	t.Run("too_many_checkpoints", func(t *testing.T) {
		p := b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").problem(t, 409, "too_many_checkpoints")
		if p.Checkpoint == nil {
			t.Error("no checkpoint in the problem")
		}
	})
	t.Run("not_registered", func(t *testing.T) {
		b.job(t, "fresh", `{"participants":["a"]}`)
		b.call(t, "POST", "/v1/jobs/fresh/checkpoints", "", "").ok(t, 201, nil)
		p := b.json(t, "PUT", votePathOf("fresh", 1, "a"), `{"epoch":1,"vote":"prepared"}`).problem(t, 409, "not_registered")
		if p.Checkpoint == nil || p.Checkpoint.Id != 1 {
			t.Errorf("checkpoint = %+v", p.Checkpoint)
		}
	})
	t.Run("not_decided", func(t *testing.T) {
		b.json(t, "PUT", ackPathOf("j", 1, "a"), `{"epoch":1}`).problem(t, 409, "not_decided")
	})
	t.Run("votes_missing", func(t *testing.T) {
		b.json(t, "PUT", votePathOf("j", 2, "a"), `{"epoch":1,"vote":"prepared"}`).ok(t, 200, nil)
		p := b.call(t, "POST", "/v1/jobs/j/checkpoints/2/commit", "", "").problem(t, 409, "votes_missing")
		if p.Missing == nil || strings.Join(*p.Missing, ",") != "b" {
			t.Errorf("missing = %v, want [b]", p.Missing)
		}
		if p.Checkpoint == nil || p.Checkpoint.Id != 2 || p.Checkpoint.Status != Preparing {
			t.Errorf("checkpoint = %+v", p.Checkpoint)
		}
	})
	t.Run("lower_checkpoint_open", func(t *testing.T) {
		b.json(t, "PUT", votePathOf("j", 2, "b"), `{"epoch":1,"vote":"prepared"}`).ok(t, 200, nil)
		b.call(t, "POST", "/v1/jobs/j/checkpoints/2/commit", "", "").problem(t, 409, "lower_checkpoint_open")
	})
	t.Run("vote_conflict", func(t *testing.T) {
		b.json(t, "PUT", votePathOf("j", 1, "a"), `{"epoch":1,"vote":"prepared","committables":[1]}`).ok(t, 200, nil)
		before := b.rawCheckpoint(t, "j", 1)
		b.json(t, "PUT", votePathOf("j", 1, "a"), `{"epoch":1,"vote":"prepared","committables":[2]}`).problem(t, 409, "vote_conflict")
		// The same vote again is no conflict (rule 4), also spaced otherwise.
		b.json(t, "PUT", votePathOf("j", 1, "a"), `{ "vote" : "prepared", "epoch" : 1, "committables" : [ 1 ] }`).ok(t, 200, nil)
		if after := b.rawCheckpoint(t, "j", 1); after != before {
			t.Errorf("checkpoint changed:\n%s\n%s", before, after)
		}
	})
	t.Run("fenced", func(t *testing.T) {
		b.job(t, "fence", `{"participants":["a"],"auto_commit":false}`, "a")
		b.call(t, "POST", "/v1/jobs/fence/checkpoints", "", "").ok(t, 201, nil)
		b.json(t, "PUT", votePathOf("fence", 1, "a"), `{"epoch":1,"vote":"prepared"}`).ok(t, 200, nil)
		var reg Registration
		b.call(t, "POST", "/v1/jobs/fence/participants/a/register", "", "").ok(t, 200, &reg)
		if reg.Epoch != 2 || len(reg.Pending) != 0 {
			t.Errorf("re-register = %+v", reg)
		}
		// Even word for word the earlier vote: fencing comes before idempotency.
		p := b.json(t, "PUT", votePathOf("fence", 1, "a"), `{"epoch":1,"vote":"prepared"}`).problem(t, 409, "fenced")
		if p.Checkpoint == nil || p.Checkpoint.Status != Preparing {
			t.Errorf("checkpoint = %+v", p.Checkpoint)
		}
		b.json(t, "PUT", ackPathOf("fence", 1, "a"), `{"epoch":3}`).problem(t, 409, "fenced")
	})
	t.Run("already_decided", func(t *testing.T) {
		var cp Checkpoint
		b.json(t, "POST", "/v1/jobs/j/checkpoints/1/abort", `{"reason":"operator said so"}`).ok(t, 200, &cp)
		if cp.Status != Aborted || cp.AbortReason == nil || *cp.AbortReason != "operator said so" || cp.CompletedAt == nil {
			t.Errorf("aborted = %+v", cp)
		}
		// The cascade aborted checkpoint 2 as well.
		if cp2 := b.checkpoint(t, "j", 2); cp2.Status != Aborted {
			t.Errorf("checkpoint 2 = %s, want aborted by the cascade", cp2.Status)
		}
		// Abort again is idempotent; commit and a vote are refused.
		b.call(t, "POST", "/v1/jobs/j/checkpoints/1/abort", "", "").ok(t, 200, nil)
		p := b.call(t, "POST", "/v1/jobs/j/checkpoints/1/commit", "", "").problem(t, 409, "already_decided")
		if p.Checkpoint == nil || p.Checkpoint.Status != Aborted {
			t.Errorf("checkpoint = %+v", p.Checkpoint)
		}
		b.json(t, "PUT", votePathOf("j", 1, "b"), `{"epoch":1,"vote":"prepared"}`).problem(t, 409, "already_decided")
		// Acks are accepted on an aborted checkpoint, for visibility.
		b.json(t, "PUT", ackPathOf("j", 1, "a"), `{"epoch":1}`).ok(t, 200, nil)
	})
	t.Run("job_busy", func(t *testing.T) {
		b.job(t, "busy", `{"participants":["a"]}`)
		b.call(t, "POST", "/v1/jobs/busy/checkpoints", "", "").ok(t, 201, nil)
		b.call(t, "DELETE", "/v1/jobs/busy", "", "").problem(t, 409, "job_busy")
	})
	t.Run("idempotency_conflict", func(t *testing.T) {
		b.job(t, "idem", `{"participants":["a"],"max_concurrent_checkpoints":5}`)
		var first, again Checkpoint
		b.json(t, "POST", "/v1/jobs/idem/checkpoints", `{"timeout_ms":5000}`, "Idempotency-Key", "k").ok(t, 201, &first)
		b.json(t, "POST", "/v1/jobs/idem/checkpoints", `{ "timeout_ms": 5000 }`, "Idempotency-Key", "k").ok(t, 201, &again)
		if first.Id != again.Id {
			t.Errorf("replay opened %d, first %d", again.Id, first.Id)
		}
		b.json(t, "POST", "/v1/jobs/idem/checkpoints", `{"timeout_ms":6000}`, "Idempotency-Key", "k").problem(t, 409, "idempotency_conflict")
		b.call(t, "POST", "/v1/jobs/idem/checkpoints", "", "", "Idempotency-Key", "k").problem(t, 409, "idempotency_conflict")
		// No body and {} are the same request.
		b.call(t, "POST", "/v1/jobs/idem/checkpoints", "", "", "Idempotency-Key", "empty").ok(t, 201, &first)
		b.json(t, "POST", "/v1/jobs/idem/checkpoints", `{}`, "Idempotency-Key", "empty").ok(t, 201, &again)
		if first.Id != again.Id {
			t.Errorf("{} after no body opened %d, first %d", again.Id, first.Id)
		}
	})
	t.Run("not_found", func(t *testing.T) {
		b.call(t, "GET", "/v1/jobs/nope", "", "").problem(t, 404, "not_found")
		b.call(t, "GET", "/v1/jobs/nope/checkpoints", "", "").problem(t, 404, "not_found")
		b.call(t, "GET", "/v1/jobs/j/checkpoints/99", "", "").problem(t, 404, "not_found")
		b.call(t, "POST", "/v1/jobs/j/participants/zed/register", "", "").problem(t, 404, "not_found")
		b.call(t, "GET", "/v1/jobs/j/participants/zed/pending", "", "").problem(t, 404, "not_found")
		b.json(t, "PUT", votePathOf("j", 2, "zed"), `{"epoch":1,"vote":"abort"}`).problem(t, 404, "not_found")
		b.call(t, "DELETE", "/v1/jobs/nope", "", "").problem(t, 404, "not_found")
		b.call(t, "GET", "/v1/nothing", "", "").problem(t, 404, "not_found")
	})
	t.Run("method_not_allowed", func(t *testing.T) {
		a := b.call(t, "DELETE", "/v1/jobs/j/checkpoints/1", "", "")
		a.problem(t, 405, "method_not_allowed")
		if got := strings.Join(a.header.Values("Allow"), ","); got != "GET,HEAD" {
			t.Errorf("Allow = %q, want GET,HEAD", got)
		}
	})
	t.Run("payload_too_large", func(t *testing.T) {
		big := `{"epoch":1,"vote":"prepared","committables":["` + strings.Repeat("x", DefaultMaxBodyBytes) + `"]}`
		b.json(t, "PUT", votePathOf("j", 2, "a"), big).problem(t, 413, "payload_too_large")
	})
	t.Run("unsupported_media_type", func(t *testing.T) {
		b.call(t, "PUT", votePathOf("j", 2, "a"), "text/plain", `{"epoch":1,"vote":"abort"}`).problem(t, 415, "unsupported_media_type")
		b.call(t, "PUT", "/v1/jobs/other", "application/x-www-form-urlencoded", `participants=a`).problem(t, 415, "unsupported_media_type")
	})
}

// TestBadInputChangesNothing sends malformed requests and checks that the state is as it
// was (rule 10), and that each one is a 4xx problem.
func testBadInputChangesNothing(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a","b"]}`, "a", "b")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	b.json(t, "PUT", votePathOf("j", 1, "a"), `{"epoch":1,"vote":"prepared","committables":[{"t":1}]}`).ok(t, 200, nil)
	checkpointBefore := b.rawCheckpoint(t, "j", 1)
	jobBefore := b.call(t, "GET", "/v1/jobs/j", "", "")

	vote := votePathOf("j", 1, "b")
	tests := []struct {
		name, method, path, contentType, body string
		status                                int
		code                                  string
	}{
		{"malformed vote", "PUT", vote, "application/json", `{"epoch":1,"vote":"prepared"`, 400, "invalid_request"},
		{"unknown field", "PUT", vote, "application/json", `{"epoch":1,"vote":"prepared","force":true}`, 400, "invalid_request"},
		{"wrong type", "PUT", vote, "application/json", `{"epoch":"1","vote":"prepared"}`, 400, "invalid_request"},
		{"null vote", "PUT", vote, "application/json", `{"epoch":1,"vote":null}`, 400, "invalid_request"},
		{"unknown vote", "PUT", vote, "application/json", `{"epoch":1,"vote":"maybe"}`, 400, "invalid_request"},
		{"epoch 0: never registered, refused as such", "PUT", vote, "application/json", `{"epoch":0,"vote":"prepared"}`, 409, "not_registered"},
		{"epoch -1", "PUT", vote, "application/json", `{"epoch":-1,"vote":"prepared"}`, 400, "invalid_request"},
		{"ack with epoch 0", "PUT", "/v1/jobs/j/checkpoints/1/acks/a", "application/json", `{"epoch":0}`, 409, "not_registered"},
		{"committables not an array", "PUT", vote, "application/json", `{"epoch":1,"vote":"prepared","committables":{"t":1}}`, 400, "invalid_request"},
		{"reason on a prepared vote", "PUT", vote, "application/json", `{"epoch":1,"vote":"prepared","reason":"x"}`, 400, "invalid_request"},
		{"committables on an abort", "PUT", vote, "application/json", `{"epoch":1,"vote":"abort","committables":[1]}`, 400, "invalid_request"},
		{"reason too long", "PUT", vote, "application/json", `{"epoch":1,"vote":"abort","reason":"` + strings.Repeat("r", 1025) + `"}`, 400, "invalid_request"},
		{"NUL in reason", "PUT", vote, "application/json", `{"epoch":1,"vote":"abort","reason":"a\u0000b"}`, 400, "invalid_request"},
		{"trailing data", "PUT", vote, "application/json", `{"epoch":1,"vote":"abort"} {}`, 400, "invalid_request"},
		{"text body", "PUT", vote, "text/plain", `{"epoch":1,"vote":"abort"}`, 415, "unsupported_media_type"},
		{"oversized", "PUT", vote, "application/json", `{"epoch":1,"vote":"abort","reason":"` + strings.Repeat("r", 2<<20) + `"}`, 413, "payload_too_large"},
		{"bad participant name", "PUT", votePathOf("j", 1, "b%20c"), "application/json", `{"epoch":1,"vote":"abort"}`, 400, "invalid_request"},
		{"id 0", "PUT", votePathOf("j", 0, "b"), "application/json", `{"epoch":1,"vote":"abort"}`, 400, "invalid_request"},
		{"id negative", "POST", "/v1/jobs/j/checkpoints/-1/abort", "", "", 400, "invalid_request"},
		{"id not a number", "POST", "/v1/jobs/j/checkpoints/one/abort", "", "", 400, "invalid_request"},
		{"abort with an unknown field", "POST", "/v1/jobs/j/checkpoints/1/abort", "application/json", `{"reason":"x","all":true}`, 400, "invalid_request"},
		{"abort reason as a number", "POST", "/v1/jobs/j/checkpoints/1/abort", "application/json", `{"reason":1}`, 400, "invalid_request"},
		{"abort with NUL", "POST", "/v1/jobs/j/checkpoints/1/abort", "application/json", `{"reason":"\u0000"}`, 400, "invalid_request"},
		{"abort with text", "POST", "/v1/jobs/j/checkpoints/1/abort", "text/plain", `stop`, 415, "unsupported_media_type"},
		{"ack without epoch", "PUT", ackPathOf("j", 1, "a"), "application/json", `{}`, 400, "invalid_request"},
		{"commit with a body", "POST", "/v1/jobs/j/checkpoints/1/commit", "application/json", `{"force":true}`, 400, "invalid_request"},
		{"register with text", "POST", "/v1/jobs/j/participants/a/register", "text/plain", `again`, 415, "unsupported_media_type"},
		{"register with a body", "POST", "/v1/jobs/j/participants/a/register", "application/json", `{"epoch":5}`, 400, "invalid_request"},
		{"prepare timeout 0", "POST", "/v1/jobs/j/checkpoints", "application/json", `{"timeout_ms":0}`, 400, "invalid_request"},
		{"prepare timeout too long", "POST", "/v1/jobs/j/checkpoints", "application/json", `{"timeout_ms":86400001}`, 400, "invalid_request"},
		{"job without participants", "PUT", "/v1/jobs/j", "application/json", `{"participants":[]}`, 400, "invalid_request"},
		{"job with duplicates", "PUT", "/v1/jobs/j", "application/json", `{"participants":["a","a"]}`, 400, "invalid_request"},
		{"job with a bad name", "PUT", "/v1/jobs/j", "application/json", `{"participants":["a b"]}`, 400, "invalid_request"},
		{"job with null participants", "PUT", "/v1/jobs/j", "application/json", `{"participants":null}`, 400, "invalid_request"},
		{"job with a null participant", "PUT", "/v1/jobs/j", "application/json", `{"participants":["a",null]}`, 400, "invalid_request"},
		{"job timeout 0", "PUT", "/v1/jobs/j", "application/json", `{"participants":["a"],"checkpoint_timeout_ms":0}`, 400, "invalid_request"},
		{"job timeout that overflows", "PUT", "/v1/jobs/j", "application/json", `{"participants":["a"],"checkpoint_timeout_ms":9223372036854775807}`, 400, "invalid_request"},
		{"job timeout that wraps", "PUT", "/v1/jobs/j", "application/json", `{"participants":["a"],"checkpoint_timeout_ms":18446744073710}`, 400, "invalid_request"},
		{"job concurrency 0", "PUT", "/v1/jobs/j", "application/json", `{"participants":["a"],"max_concurrent_checkpoints":0}`, 400, "invalid_request"},
		{"job concurrency as a float", "PUT", "/v1/jobs/j", "application/json", `{"participants":["a"],"max_concurrent_checkpoints":1.0}`, 400, "invalid_request"},
		{"job with an extra field", "PUT", "/v1/jobs/j", "application/json", `{"participants":["a"],"name":"j"}`, 400, "invalid_request"},
		{"job name too long", "PUT", "/v1/jobs/" + strings.Repeat("n", 129), "application/json", `{"participants":["a"]}`, 400, "invalid_request"},
		{"job name with a dot first", "PUT", "/v1/jobs/.hidden", "application/json", `{"participants":["a"]}`, 400, "invalid_request"},
		{"job name with a slash", "PUT", "/v1/jobs/a%2Fb", "application/json", `{"participants":["a"]}`, 400, "invalid_request"},
		{"delete with a bad name", "DELETE", "/v1/jobs/a%20b", "", "", 400, "invalid_request"},
		{"wait_ms negative", "GET", "/v1/jobs/j/checkpoints/1?wait_ms=-1", "", "", 400, "invalid_request"},
		{"wait_ms too long", "GET", "/v1/jobs/j/checkpoints/1?wait_ms=60001", "", "", 400, "invalid_request"},
		{"limit 0", "GET", "/v1/jobs?limit=0", "", "", 400, "invalid_request"},
		{"limit too large", "GET", "/v1/jobs/j/checkpoints?limit=1001", "", "", 400, "invalid_request"},
		{"limit not a number", "GET", "/v1/checkpoints?limit=x", "", "", 400, "invalid_request"},
		{"unknown status", "GET", "/v1/checkpoints?status=preparing,done", "", "", 400, "invalid_request"},
		{"cursor garbage", "GET", "/v1/jobs?cursor=not-a-cursor", "", "", 400, "invalid_request"},
		{"cursor of another listing", "GET", "/v1/checkpoints?cursor=" + encodeCursor(cursorCheckpoints, "5"), "", "", 400, "invalid_request"},
		{"cursor of no position", "GET", "/v1/jobs/j/checkpoints?cursor=" + encodeCursor(cursorCheckpoints, "x"), "", "", 400, "invalid_request"},
	}
	for _, tt := range tests {
		a := b.call(t, tt.method, tt.path, tt.contentType, tt.body)
		t.Run(tt.name, func(t *testing.T) {
			a.problem(t, tt.status, tt.code)
		})
	}
	for name, header := range map[string][]string{
		"prepare with an empty key": {"Idempotency-Key", ""},
		"prepare with a long key":   {"Idempotency-Key", strings.Repeat("k", 256)},
		"prepare with two keys":     {"Idempotency-Key", "a", "Idempotency-Key", "b"},
	} {
		a := b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "", header...)
		t.Run(name, func(t *testing.T) {
			a.problem(t, 400, "invalid_request")
		})
	}
	if after := b.rawCheckpoint(t, "j", 1); after != checkpointBefore {
		t.Errorf("checkpoint changed by bad input:\n%s\n%s", checkpointBefore, after)
	}
	jobAfter := b.call(t, "GET", "/v1/jobs/j", "", "")
	if !bytes.Equal(jobAfter.body, jobBefore.body) {
		t.Errorf("job changed by bad input:\n%s\n%s", jobBefore.body, jobAfter.body)
	}
	var list CheckpointList
	b.call(t, "GET", "/v1/jobs/j/checkpoints", "", "").ok(t, 200, &list)
	if len(list.Items) != 1 {
		t.Errorf("%d checkpoints, want the one opened before", len(list.Items))
	}
	var jobs JobList
	b.call(t, "GET", "/v1/jobs", "", "").ok(t, 200, &jobs)
	if len(jobs.Items) != 1 {
		t.Errorf("%d jobs, want 1", len(jobs.Items))
	}
}

// TestCommittablesByteForByte checks that committables come back exactly as stored: the
// same bytes, HTML-sensitive characters, escapes, key order and number spelling included.
func testCommittablesByteForByte(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a"],"auto_commit":true}`, "a")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	sent := `[ {"z":1, "a":[true,null,"<&>"], "z2":"\u00e9\n"}, 1.50, 1e3, -0, "\u2028", {} ]`
	want := `[{"z":1,"a":[true,null,"<&>"],"z2":"\u00e9\n"},1.50,1e3,-0,"\u2028",{}]`
	a := b.json(t, "PUT", votePathOf("j", 1, "a"), `{"epoch":1,"vote":"prepared","committables":`+sent+`}`)
	a.ok(t, 200, nil)
	if !strings.Contains(string(a.body), `"committables":`+want+`,`) {
		t.Errorf("vote answer %s does not hold %s", a.body, want)
	}
	if raw := b.rawCheckpoint(t, "j", 1); !strings.Contains(raw, `"committables":`+want+`,`) {
		t.Errorf("checkpoint %s does not hold %s", raw, want)
	}
	pending := b.call(t, "GET", "/v1/jobs/j/participants/a/pending", "", "")
	if !strings.Contains(string(pending.body), `"committables":`+want) {
		t.Errorf("pending %s does not hold %s", pending.body, want)
	}
}

func testPagination(t *testing.T) {
	b := setup(t)
	names := []string{"a1", "a2", "b1", "b2", "c1"}
	for _, n := range names {
		b.job(t, n, `{"participants":["p"],"max_concurrent_checkpoints":10}`)
	}

	t.Run("jobs by name", func(t *testing.T) {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > len(names) {
				t.Fatal("too many pages")
			}
			var list JobList
			b.call(t, "GET", "/v1/jobs?limit=2&cursor="+cursor, "", "").ok(t, 200, &list)
			for _, j := range list.Items {
				got = append(got, j.Name)
			}
			if list.NextCursor == nil {
				break
			}
			if len(list.Items) != 2 {
				t.Errorf("a page before the last has %d items", len(list.Items))
			}
			cursor = *list.NextCursor
		}
		if strings.Join(got, ",") != strings.Join(names, ",") {
			t.Errorf("jobs = %v, want %v", got, names)
		}
	})

	// Checkpoints 1 to 5 of a1 and 1 to 2 of b1, interleaved; registering a1's participant
	// aborts a1's five; then a1 opens 6 (committed by its one vote), 7 and 8.
	open := func(job string) {
		b.call(t, "POST", "/v1/jobs/"+job+"/checkpoints", "", "").ok(t, 201, nil)
	}
	open("a1")
	open("a1")
	open("b1")
	open("a1")
	open("a1")
	open("b1")
	open("a1")
	b.call(t, "POST", "/v1/jobs/a1/participants/p/register", "", "").ok(t, 200, nil) // aborts a1's open ones
	for range 3 {
		open("a1") // 6, 7, 8
	}
	b.json(t, "PUT", votePathOf("a1", 6, "p"), `{"epoch":1,"vote":"prepared"}`).ok(t, 200, nil) // 6 committing

	t.Run("a job's checkpoints, newest first", func(t *testing.T) {
		var got []int64
		cursor := ""
		for pages := 0; pages < 10; pages++ {
			var list CheckpointList
			b.call(t, "GET", "/v1/jobs/a1/checkpoints?limit=3&cursor="+cursor, "", "").ok(t, 200, &list)
			for _, cp := range list.Items {
				got = append(got, cp.Id)
			}
			if list.NextCursor == nil {
				break
			}
			cursor = *list.NextCursor
		}
		if fmt.Sprint(got) != "[8 7 6 5 4 3 2 1]" {
			t.Errorf("ids = %v, want 8 down to 1", got)
		}
	})
	t.Run("filtered by status", func(t *testing.T) {
		var list CheckpointList
		b.call(t, "GET", "/v1/jobs/a1/checkpoints?status=aborted", "", "").ok(t, 200, &list)
		if len(list.Items) != 5 {
			t.Errorf("%d aborted, want 5", len(list.Items))
		}
		b.call(t, "GET", "/v1/jobs/a1/checkpoints?status=committing,preparing", "", "").ok(t, 200, &list)
		if len(list.Items) != 3 || list.Items[0].Id != 8 {
			t.Errorf("open = %d items, want 3 from 8 down", len(list.Items))
		}
	})
	t.Run("every job's open checkpoints, oldest first", func(t *testing.T) {
		var got []string
		cursor := ""
		for pages := 0; pages < 10; pages++ {
			var list CheckpointList
			b.call(t, "GET", "/v1/checkpoints?limit=2&cursor="+cursor, "", "").ok(t, 200, &list)
			for _, cp := range list.Items {
				got = append(got, fmt.Sprintf("%s/%d", cp.Job, cp.Id))
			}
			if list.NextCursor == nil {
				break
			}
			cursor = *list.NextCursor
		}
		if want := "[b1/1 b1/2 a1/6 a1/7 a1/8]"; fmt.Sprint(got) != want {
			t.Errorf("open checkpoints = %v, want %s", got, want)
		}
		var list CheckpointList
		b.call(t, "GET", "/v1/checkpoints?status=aborted", "", "").ok(t, 200, &list)
		if len(list.Items) != 5 || list.Items[0].Id != 1 {
			t.Errorf("aborted = %d items, want a1's five", len(list.Items))
		}
	})
}

func testDeadlineAndLongPoll(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a","b"],"max_concurrent_checkpoints":5}`, "a", "b")

	t.Run("a vote after the deadline", func(t *testing.T) {
		var cp Checkpoint
		b.json(t, "POST", "/v1/jobs/j/checkpoints", `{"timeout_ms":100}`).ok(t, 201, &cp)
		if d := cp.Deadline.Sub(cp.CreatedAt); d != 100*time.Millisecond {
			t.Errorf("deadline - created_at = %v", d)
		}
		time.Sleep(300 * time.Millisecond)
		p := b.json(t, "PUT", votePathOf("j", cp.Id, "a"), `{"epoch":1,"vote":"prepared"}`).problem(t, 409, "already_decided")
		if p.Checkpoint == nil || p.Checkpoint.Status != Aborted || p.Checkpoint.AbortReason == nil ||
			!strings.Contains(*p.Checkpoint.AbortReason, "a, b") {
			t.Errorf("checkpoint = %+v", p.Checkpoint)
		}
	})

	t.Run("a long poll sees the decision", func(t *testing.T) {
		var cp Checkpoint
		b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, &cp)
		done := make(chan answer, 1)
		go func() {
			done <- b.call(t, "GET", fmt.Sprintf("/v1/jobs/j/checkpoints/%d?wait_ms=30000", cp.Id), "", "")
		}()
		b.json(t, "PUT", votePathOf("j", cp.Id, "a"), `{"epoch":1,"vote":"prepared"}`).ok(t, 200, nil)
		b.json(t, "PUT", votePathOf("j", cp.Id, "b"), `{"epoch":1,"vote":"abort","reason":"disk full"}`).ok(t, 200, nil)
		var polled Checkpoint
		(<-done).ok(t, 200, &polled)
		if polled.Status != Aborted || polled.Participants[1].Reason == nil || *polled.Participants[1].Reason != "disk full" {
			t.Errorf("long poll answered %+v", polled)
		}
		// Acks on an aborted checkpoint: b voted abort, a voted prepared and owes a rollback.
		var pending Pending
		b.call(t, "GET", "/v1/jobs/j/participants/a/pending", "", "").ok(t, 200, &pending)
		if len(pending.Items) != 1 || pending.Items[0].Action != PendingActionAbort {
			t.Errorf("pending = %+v, want one rollback", pending)
		}
	})

	t.Run("a short poll on an open checkpoint", func(t *testing.T) {
		var cp Checkpoint
		b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, &cp)
		b.call(t, "GET", fmt.Sprintf("/v1/jobs/j/checkpoints/%d?wait_ms=50", cp.Id), "", "").ok(t, 200, &cp)
		if cp.Status != Preparing {
			t.Errorf("status = %s, want preparing", cp.Status)
		}
	})
}

func testIdempotentWrites(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a"],"auto_commit":false}`, "a")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	vote := `{"epoch":1,"vote":"prepared","committables":["x"]}`
	b.json(t, "PUT", votePathOf("j", 1, "a"), vote).ok(t, 200, nil)
	first := b.rawCheckpoint(t, "j", 1)
	b.json(t, "PUT", votePathOf("j", 1, "a"), vote).ok(t, 200, nil)
	if again := b.rawCheckpoint(t, "j", 1); again != first {
		t.Errorf("the same vote again changed the checkpoint:\n%s\n%s", first, again)
	}
	var c1, c2 Checkpoint
	b.call(t, "POST", "/v1/jobs/j/checkpoints/1/commit", "", "").ok(t, 200, &c1)
	b.call(t, "POST", "/v1/jobs/j/checkpoints/1/commit", "", "").ok(t, 200, &c2)
	if c1.Status != Committing || c2.Status != Committing || !c1.DecidedAt.Equal(*c2.DecidedAt) {
		t.Errorf("commit twice: %+v then %+v", c1, c2)
	}
	b.call(t, "POST", "/v1/jobs/j/checkpoints/1/abort", "", "").problem(t, 409, "already_decided")
	b.json(t, "PUT", ackPathOf("j", 1, "a"), `{"epoch":1}`).ok(t, 200, &c1)
	b.json(t, "PUT", ackPathOf("j", 1, "a"), `{"epoch":1}`).ok(t, 200, &c2)
	if c1.Status != Committed || !c1.Participants[0].AckedAt.Equal(*c2.Participants[0].AckedAt) {
		t.Errorf("ack twice: %+v then %+v", c1, c2)
	}
	b.call(t, "POST", "/v1/jobs/j/checkpoints/1/commit", "", "").ok(t, 200, &c1)
	if c1.Status != Committed {
		t.Errorf("commit on committed = %s", c1.Status)
	}
}

func testRequestIDEchoed(t *testing.T) {
	b := setup(t)
	a := b.call(t, "GET", "/v1/jobs", "", "", "X-Request-Id", "my-trace-123")
	if got := a.header.Get("X-Request-Id"); got != "my-trace-123" {
		t.Errorf("X-Request-Id = %q", got)
	}
	a = b.call(t, "GET", "/v1/jobs/missing", "", "", "X-Request-Id", "trace-404")
	if p := a.problem(t, 404, "not_found"); p.RequestId == nil || *p.RequestId != "trace-404" || a.header.Get("X-Request-Id") != "trace-404" {
		t.Errorf("problem request_id = %v, header %q", p.RequestId, a.header.Get("X-Request-Id"))
	}
}

// TestUnavailable checks that a database that is gone answers 503 with Retry-After.
func testUnavailable(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a"]}`)
	b.store.Close()
	a := b.call(t, "GET", "/readyz", "", "")
	a.problem(t, 503, "unavailable")
	if a.header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q", a.header.Get("Retry-After"))
	}
	b.call(t, "GET", "/healthz", "", "").ok(t, 200, nil)
}
