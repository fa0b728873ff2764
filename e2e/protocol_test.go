package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/e2e/harness"
)

// maxBodyBytes is the body limit the protocol tests start the coordinator with.
const maxBodyBytes = 4096

// TestProtocol exercises every endpoint of openapi.yaml and rule of docs/protocol.md
// against the built binary and a fresh cluster, as a client that knows nothing but the
// contract. Subtests share one coordinator and database and keep to their own jobs.
func TestProtocol(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	dbURL := cluster.NewDatabase(t)
	coord := harness.StartCoordinator(t, dbURL,
		"--max-body-bytes", fmt.Sprint(maxBodyBytes), "--sweep-interval", "100ms")
	a := newAPI(coord)
	c := coord.Client

	t.Run("curl round", func(t *testing.T) {
		t.Parallel()
		var j job
		a.mustDo(t, "PUT", "/v1/jobs/orders", `{"participants":["sink-a","sink-b"]}`, 201, &j)
		if j.Name != "orders" || j.CheckpointTimeoutMs != 60000 || j.MaxConcurrentCheckpoints != 1 || !j.AutoCommit ||
			j.LastCheckpoint != nil || j.LastCommitted != nil || j.Epochs["sink-a"] != 0 || j.Epochs["sink-b"] != 0 {
			t.Errorf("new job = %+v, want the defaults, epochs 0, no checkpoint", j)
		}
		if reg := a.register(t, "orders", "sink-a"); reg.Epoch != 1 || reg.Job != "orders" || reg.Participant != "sink-a" || reg.Pending == nil || len(reg.Pending) != 0 {
			t.Errorf("register = %+v, want epoch 1, nothing pending", reg)
		}
		a.register(t, "orders", "sink-b")
		var cp checkpoint
		a.mustDo(t, "POST", "/v1/jobs/orders/checkpoints", "", 201, &cp)
		if cp.Id != 1 || cp.Status != coordinatorclient.Preparing || cp.Job != "orders" || len(cp.Participants) != 2 {
			t.Fatalf("prepare = %+v", cp)
		}
		checkShape(t, a, cpPath("orders", 1))
		a.mustDo(t, "PUT", "/v1/jobs/orders/checkpoints/1/votes/sink-a", `{"epoch":1,"vote":"prepared","committables":[{"txn":"a-1"}]}`, 200, &cp)
		if cp.Status != coordinatorclient.Preparing {
			t.Errorf("after one vote: %s", cp.Status)
		}
		a.mustDo(t, "PUT", "/v1/jobs/orders/checkpoints/1/votes/sink-b", `{"epoch":1,"vote":"prepared","committables":[{"file":"/out/.part-7"}]}`, 200, &cp)
		if cp.Status != coordinatorclient.Committing || cp.DecidedAt == nil || cp.CompletedAt != nil {
			t.Errorf("the last voter sees %+v, want committing", cp)
		}
		a.mustDo(t, "PUT", "/v1/jobs/orders/checkpoints/1/acks/sink-a", `{"epoch":1}`, 200, &cp)
		if cp.Status != coordinatorclient.Committing {
			t.Errorf("after one ack: %s", cp.Status)
		}
		a.mustDo(t, "PUT", "/v1/jobs/orders/checkpoints/1/acks/sink-b", `{"epoch":1}`, 200, &cp)
		if cp.Status != coordinatorclient.Committed || cp.CompletedAt == nil || cp.AbortReason != nil {
			t.Errorf("after the last ack: %+v, want committed", cp)
		}
		if got := string(participant(cp, "sink-a").Committables) + string(participant(cp, "sink-b").Committables); got != `[{"txn":"a-1"}][{"file":"/out/.part-7"}]` {
			t.Errorf("committables = %s", got)
		}
		checkShape(t, a, cpPath("orders", 1))
		j = a.getJob(t, "orders")
		if j.LastCheckpoint == nil || *j.LastCheckpoint != 1 || j.LastCommitted == nil || *j.LastCommitted != 1 || j.Epochs["sink-a"] != 1 {
			t.Errorf("job after the round = %+v", j)
		}
	})

	t.Run("generated client round", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		auto := false
		put, err := c.PutJobWithResponse(ctx, "client-round", coordinatorclient.JobConfig{Participants: []string{"kafka-sink-0", "source"}, AutoCommit: &auto})
		if err != nil || put.StatusCode() != 201 || put.JSON201 == nil || put.JSON201.AutoCommit {
			t.Fatalf("put job: %v %s", err, put.Body)
		}
		epochs := map[string]int64{}
		for _, p := range []string{"kafka-sink-0", "source"} {
			reg, err := c.RegisterParticipantWithResponse(ctx, "client-round", p)
			if err != nil || reg.JSON200 == nil {
				t.Fatalf("register: %v %s", err, reg.Body)
			}
			epochs[p] = reg.JSON200.Epoch
		}
		key := "k-1"
		prep, err := c.PrepareCheckpointWithResponse(ctx, "client-round", &coordinatorclient.PrepareCheckpointParams{IdempotencyKey: &key}, coordinatorclient.PrepareRequest{TimeoutMs: ptr(int64(30000))})
		if err != nil || prep.JSON201 == nil {
			t.Fatalf("prepare: %v %s", err, prep.Body)
		}
		id := prep.JSON201.Id
		if d := prep.JSON201.Deadline.Sub(prep.JSON201.CreatedAt); d != 30*time.Second {
			t.Errorf("deadline - created_at = %s, want timeout_ms 30000", d)
		}
		offsets := json.RawMessage(`[{"topic":"orders","partition":0,"offset":42}]`)
		for p, e := range epochs {
			v, err := c.PutVoteWithResponse(ctx, "client-round", id, p, nil, coordinatorclient.VoteRequest{Epoch: e, Vote: coordinatorclient.VoteKindPrepared, Committables: &offsets})
			if err != nil || v.JSON200 == nil {
				t.Fatalf("vote: %v %s", err, v.Body)
			}
		}
		get, err := c.GetCheckpointWithResponse(ctx, "client-round", id, &coordinatorclient.GetCheckpointParams{WaitMs: ptr(int64(0))})
		if err != nil || get.JSON200 == nil || get.JSON200.Status != coordinatorclient.Preparing {
			t.Fatalf("auto_commit off: all votes in must stay preparing: %v %s", err, get.Body)
		}
		com, err := c.CommitCheckpointWithResponse(ctx, "client-round", id, coordinatorclient.CommitRequest{})
		if err != nil || com.JSON200 == nil || com.JSON200.Status != coordinatorclient.Committing {
			t.Fatalf("commit: %v %s", err, com.Body)
		}
		pend, err := c.GetPendingWithResponse(ctx, "client-round", "source", nil)
		if err != nil || pend.JSON200 == nil || len(pend.JSON200.Items) != 1 || pend.JSON200.Items[0].Action != coordinatorclient.PendingActionCommit ||
			string(pend.JSON200.Items[0].Committables) != string(offsets) {
			t.Fatalf("pending: %v %s", err, pend.Body)
		}
		for p, e := range epochs {
			ack, err := c.PutAckWithResponse(ctx, "client-round", id, p, nil, coordinatorclient.AckRequest{Epoch: e})
			if err != nil || ack.JSON200 == nil {
				t.Fatalf("ack: %v %s", err, ack.Body)
			}
		}
		list, err := c.ListCheckpointsWithResponse(ctx, "client-round", &coordinatorclient.ListCheckpointsParams{Status: &coordinatorclient.StatusFilter{coordinatorclient.Committed}})
		if err != nil || list.JSON200 == nil || len(list.JSON200.Items) != 1 || list.JSON200.Items[0].Id != id {
			t.Fatalf("list committed: %v %s", err, list.Body)
		}
		jobs, err := c.ListJobsWithResponse(ctx, &coordinatorclient.ListJobsParams{Limit: ptr(1000)})
		if err != nil || jobs.JSON200 == nil || !slices.ContainsFunc(jobs.JSON200.Items, func(j job) bool { return j.Name == "client-round" }) {
			t.Fatalf("list jobs: %v %s", err, jobs.Body)
		}
		open, err := c.ListOpenCheckpointsWithResponse(ctx, nil)
		if err != nil || open.JSON200 == nil {
			t.Fatalf("list open: %v %s", err, open.Body)
		}
		del, err := c.DeleteJobWithResponse(ctx, "client-round")
		if err != nil || del.StatusCode() != 204 {
			t.Fatalf("delete: %v %d %s", err, del.StatusCode(), del.Body)
		}
		gone, err := c.GetJobWithResponse(ctx, "client-round")
		if err != nil || gone.StatusCode() != 404 || gone.ApplicationproblemJSON404 == nil || gone.ApplicationproblemJSON404.Code != "not_found" {
			t.Fatalf("deleted job: %v %s", err, gone.Body)
		}
		for _, f := range []func(context.Context, ...coordinatorclient.RequestEditorFn) (int, error){
			func(ctx context.Context, e ...coordinatorclient.RequestEditorFn) (int, error) {
				r, err := c.GetHealthzWithResponse(ctx, e...)
				return r.StatusCode(), err
			},
			func(ctx context.Context, e ...coordinatorclient.RequestEditorFn) (int, error) {
				r, err := c.GetReadyzWithResponse(ctx, e...)
				return r.StatusCode(), err
			},
		} {
			if status, err := f(ctx); err != nil || status != 200 {
				t.Errorf("health: %d %v", status, err)
			}
		}
	})

	t.Run("jobs", func(t *testing.T) {
		t.Parallel()
		var j job
		a.mustDo(t, "PUT", jobPath("jobs-x"), `{"participants":["a","b"],"checkpoint_timeout_ms":1000,"max_concurrent_checkpoints":2,"auto_commit":false}`, 201, &j)
		if j.CheckpointTimeoutMs != 1000 || j.MaxConcurrentCheckpoints != 2 || j.AutoCommit || !slices.Equal(j.Participants, []string{"a", "b"}) {
			t.Errorf("created %+v", j)
		}
		if !strings.HasSuffix(mustField(t, a, jobPath("jobs-x"), "created_at"), `Z"`) {
			t.Errorf("created_at is not RFC 3339 UTC")
		}
		// PUT replaces the whole configuration: what is left out takes its default.
		a.mustDo(t, "PUT", jobPath("jobs-x"), `{"participants":["a","b","c"]}`, 200, &j)
		if j.CheckpointTimeoutMs != 60000 || j.MaxConcurrentCheckpoints != 1 || !j.AutoCommit || len(j.Participants) != 3 || j.Epochs["c"] != 0 {
			t.Errorf("replaced %+v", j)
		}
		a.mustProblem(t, request{method: "GET", path: jobPath("no-such-job")}, 404, "not_found")
		a.mustProblem(t, request{method: "DELETE", path: jobPath("no-such-job")}, 404, "not_found")

		// Listing, by pages of two, finds each of five jobs exactly once, in name order.
		for i := range 5 {
			a.mustDo(t, "PUT", jobPath(fmt.Sprintf("list-%d", i)), `{"participants":["a"]}`, 201, nil)
		}
		var names []string
		path := "/v1/jobs?limit=2"
		for pages := 0; ; pages++ {
			var page coordinatorclient.JobList
			a.mustDo(t, "GET", path, "", 200, &page)
			if len(page.Items) > 2 || pages > 1000 {
				t.Fatalf("page of %d jobs with limit 2", len(page.Items))
			}
			for _, j := range page.Items {
				names = append(names, j.Name)
			}
			if page.NextCursor == nil {
				break
			}
			path = "/v1/jobs?limit=2&cursor=" + url.QueryEscape(*page.NextCursor)
		}
		if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
			t.Errorf("job names across pages: %v", names)
		}
		for i := range 5 {
			if !slices.Contains(names, fmt.Sprintf("list-%d", i)) {
				t.Errorf("list-%d missing from %v", i, names)
			}
		}

		// Delete: 409 job_busy while something is owed, 204 once nothing is; the name can
		// be used again and its checkpoint ids go on where they were.
		epochs := a.setupJob(t, "del", `{"participants":["a"]}`, "a")
		a.prepare(t, "del", "")
		a.mustProblem(t, request{method: "DELETE", path: jobPath("del")}, 409, "job_busy")
		a.vote(t, "del", 1, "a", epochs["a"], `["x"]`) // committing: still owed
		a.mustProblem(t, request{method: "DELETE", path: jobPath("del")}, 409, "job_busy")
		a.ack(t, "del", 1, "a", epochs["a"])
		a.prepare(t, "del", "")
		a.vote(t, "del", 2, "a", epochs["a"], `["y"]`)
		a.ack(t, "del", 2, "a", epochs["a"])
		// A prepared vote on an aborted checkpoint not yet rolled back is owed too.
		a.mustDo(t, "PUT", jobPath("del"), `{"participants":["a","b"]}`, 200, nil)
		a.prepare(t, "del", "")
		a.vote(t, "del", 3, "a", epochs["a"], `["z"]`)
		a.mustDo(t, "POST", cpPath("del", 3)+"/abort", "", 200, nil)
		a.mustProblem(t, request{method: "DELETE", path: jobPath("del")}, 409, "job_busy")
		a.ack(t, "del", 3, "a", epochs["a"])
		a.mustDo(t, "DELETE", jobPath("del"), "", 204, nil)
		a.mustProblem(t, request{method: "GET", path: jobPath("del")}, 404, "not_found")
		a.mustProblem(t, request{method: "GET", path: cpPath("del", 1)}, 404, "not_found")
		a.mustDo(t, "PUT", jobPath("del"), `{"participants":["a"]}`, 201, nil)
		if reg := a.register(t, "del", "a"); reg.Epoch <= epochs["a"] {
			t.Errorf("epoch after re-creating the job = %d, want more than %d", reg.Epoch, epochs["a"])
		}
		if cp := a.prepare(t, "del", ""); cp.Id != 4 {
			t.Errorf("first checkpoint after re-creating the job = %d, want 4 (ids are never reused)", cp.Id)
		}

		// A checkpoint keeps the configuration it opened with.
		a.setupJob(t, "snapshot", `{"participants":["a","b"],"auto_commit":false}`)
		a.prepare(t, "snapshot", "")
		a.mustDo(t, "PUT", jobPath("snapshot"), `{"participants":["a"],"auto_commit":true}`, 200, nil)
		if cp := a.get(t, "snapshot", 1); len(cp.Participants) != 2 || cp.AutoCommit {
			t.Errorf("checkpoint 1 after the job changed: %+v", cp)
		}
	})

	t.Run("register and pending", func(t *testing.T) {
		t.Parallel()
		a.setupJob(t, "reg", `{"participants":["a","b"],"max_concurrent_checkpoints":5}`)
		a.mustProblem(t, request{method: "POST", path: registerPath("reg", "stranger")}, 404, "not_found")
		a.mustProblem(t, request{method: "GET", path: pendingPath("reg", "stranger")}, 404, "not_found")
		a.mustProblem(t, request{method: "POST", path: registerPath("no-such-job", "a")}, 404, "not_found")
		if pe := a.pending(t, "reg", "a"); pe.Epoch != 0 || pe.Items == nil || len(pe.Items) != 0 {
			t.Errorf("pending before registering: %+v", pe)
		}
		a.prepare(t, "reg", "")
		// A participant that never registered cannot vote or ack: 409 not_registered.
		p := a.mustProblem(t, request{method: "PUT", path: votePath("reg", 1, "a"), body: voteBody(1, "")}, 409, "not_registered")
		if p.Checkpoint == nil || p.Checkpoint.Id != 1 {
			t.Errorf("not_registered without the checkpoint: %+v", p)
		}
		for want := int64(1); want <= 3; want++ {
			if reg := a.register(t, "reg", "b"); reg.Epoch != want {
				t.Fatalf("registration %d gave epoch %d", want, reg.Epoch)
			}
		}
		// Registering b aborted checkpoint 1 (b had not voted); open three more.
		if cp := a.get(t, "reg", 1); cp.Status != coordinatorclient.Aborted || cp.AbortReason == nil || !strings.Contains(*cp.AbortReason, "b") {
			t.Errorf("checkpoint 1 after b registered again: %+v", cp)
		}
		a.mustProblem(t, request{method: "PUT", path: ackPath("reg", 1, "a"), body: ackBody(1)}, 409, "not_registered")
		ea := a.register(t, "reg", "a").Epoch
		eb := a.getJob(t, "reg").Epochs["b"]
		for range 3 {
			a.prepare(t, "reg", "")
		}
		a.vote(t, "reg", 2, "a", ea, `[1]`)
		a.vote(t, "reg", 2, "b", eb, `[2]`) // 2 committing
		a.vote(t, "reg", 3, "a", ea, `[3]`)
		pe := a.pending(t, "reg", "a")
		if pe.Epoch != ea || len(pe.Items) != 2 ||
			pe.Items[0].Checkpoint != 2 || pe.Items[0].Action != coordinatorclient.PendingActionCommit || string(pe.Items[0].Committables) != "[1]" ||
			pe.Items[1].Checkpoint != 4 || pe.Items[1].Action != coordinatorclient.PendingActionVote || pe.Items[1].Status != coordinatorclient.Preparing {
			t.Errorf("pending of a = %+v, want commit 2, vote 4 (oldest first)", pe)
		}
		a.vote(t, "reg", 3, "b", eb, "") // 3 committing
		a.mustDo(t, "PUT", votePath("reg", 4, "b"), abortVoteBody(eb, "disk full"), 200, nil)
		pe = a.pending(t, "reg", "b")
		if len(pe.Items) != 2 || pe.Items[0].Checkpoint != 2 || pe.Items[1].Checkpoint != 3 || string(pe.Items[1].Committables) != "[]" {
			t.Errorf("pending of b = %+v, want commit 2 and 3", pe)
		}
	})

	t.Run("votes", func(t *testing.T) {
		t.Parallel()
		e := a.setupJob(t, "votes", `{"participants":["a","b","c"],"max_concurrent_checkpoints":3}`, "a", "b", "c")
		a.prepare(t, "votes", "")
		// Committables come back exactly as sent: same values, same order, same spelling.
		tricky := `[{"z":1,"a":[1.50,-0,1e400,12345678901234567890123],"s":"<&>\u00e9\u2028\"\\ é🙂","n":null},"",[],{},true]`
		cp := a.vote(t, "votes", 1, "a", e["a"], tricky)
		if got := string(participant(cp, "a").Committables); got != tricky {
			t.Errorf("committables came back as\n%s\nsent\n%s", got, tricky)
		}
		spaced := "[ {\"k\" : \"v\"} ,\n 2 ]"
		cp = a.vote(t, "votes", 1, "b", e["b"], spaced)
		if got := string(participant(cp, "b").Committables); got != compact(t, spaced) {
			t.Errorf("committables %q came back as %q", spaced, got)
		}
		votedAt := participant(cp, "a").VotedAt
		// The same vote again: 200 and nothing changes.
		cp = a.vote(t, "votes", 1, "a", e["a"], tricky)
		if !participant(cp, "a").VotedAt.Equal(*votedAt) || string(participant(cp, "a").Committables) != tricky {
			t.Errorf("a repeated vote changed the vote: %+v", participant(cp, "a"))
		}
		// Another vote from the same participant: 409 vote_conflict, nothing changes.
		before := rawGet(t, a, cpPath("votes", 1))
		for _, body := range []string{voteBody(e["a"], `["other"]`), voteBody(e["a"], ""), abortVoteBody(e["a"], "no")} {
			p := a.mustProblem(t, request{method: "PUT", path: votePath("votes", 1, "a"), body: body}, 409, "vote_conflict")
			if p.Checkpoint == nil || p.Checkpoint.Id != 1 || string(participant(*p.Checkpoint, "a").Committables) != tricky {
				t.Errorf("vote_conflict must carry the checkpoint as it stands: %+v", p.Checkpoint)
			}
		}
		if after := rawGet(t, a, cpPath("votes", 1)); after != before {
			t.Errorf("a refused vote changed the checkpoint:\n%s\n%s", before, after)
		}
		// A prepared vote without committables means [].
		cp = a.vote(t, "votes", 1, "c", e["c"], "")
		if got := string(participant(cp, "c").Committables); got != "[]" || cp.Status != coordinatorclient.Committing {
			t.Errorf("last vote without committables: %s, %s", got, cp.Status)
		}
		if ep := participant(cp, "c").Epoch; ep == nil || *ep != e["c"] {
			t.Errorf("vote epoch = %v, want %d", ep, e["c"])
		}
		// Unknown participant and unknown checkpoint: 404.
		a.mustProblem(t, request{method: "PUT", path: votePath("votes", 1, "zed"), body: voteBody(1, "")}, 404, "not_found")
		a.mustProblem(t, request{method: "PUT", path: votePath("votes", 99, "a"), body: voteBody(e["a"], "")}, 404, "not_found")
		a.mustProblem(t, request{method: "PUT", path: votePath("no-job", 1, "a"), body: voteBody(1, "")}, 404, "not_found")

		// An abort vote aborts, and names who and why.
		a.prepare(t, "votes", "")
		a.vote(t, "votes", 2, "a", e["a"], `["a2"]`)
		var ab checkpoint
		a.mustDo(t, "PUT", votePath("votes", 2, "b"), abortVoteBody(e["b"], "disk full"), 200, &ab)
		if ab.Status != coordinatorclient.Aborted || ab.AbortReason == nil || !strings.Contains(*ab.AbortReason, "disk full") || !strings.Contains(*ab.AbortReason, "b") ||
			ab.DecidedAt == nil || ab.CompletedAt == nil || !ab.DecidedAt.Equal(*ab.CompletedAt) {
			t.Errorf("after an abort vote: %+v", ab)
		}
		if r := participant(ab, "b").Reason; r == nil || *r != "disk full" {
			t.Errorf("abort vote reason = %v", r)
		}
		// A vote on a decided checkpoint: 409 already_decided with the checkpoint.
		p := a.mustProblem(t, request{method: "PUT", path: votePath("votes", 2, "c"), body: voteBody(e["c"], "")}, 409, "already_decided")
		if p.Checkpoint == nil || p.Checkpoint.Status != coordinatorclient.Aborted || participant(*p.Checkpoint, "c").Vote != nil {
			t.Errorf("already_decided carries %+v", p.Checkpoint)
		}
		// Repeating an accepted vote is still 200 after the decision.
		a.vote(t, "votes", 2, "a", e["a"], `["a2"]`)

		// Fencing comes before idempotency: after a registers again, even its earlier vote
		// repeated word for word is refused.
		a.prepare(t, "votes", "")
		a.vote(t, "votes", 3, "a", e["a"], `["a3"]`)
		before = rawGet(t, a, cpPath("votes", 3))
		ea2 := a.register(t, "votes", "a").Epoch
		if ea2 != e["a"]+1 {
			t.Errorf("new epoch %d after %d", ea2, e["a"])
		}
		p = a.mustProblem(t, request{method: "PUT", path: votePath("votes", 3, "a"), body: voteBody(e["a"], `["a3"]`)}, 409, "fenced")
		if p.Checkpoint == nil || p.Checkpoint.Id != 3 {
			t.Errorf("fenced without the checkpoint: %+v", p)
		}
		a.mustProblem(t, request{method: "PUT", path: votePath("votes", 3, "b"), body: voteBody(e["b"]+1, "")}, 409, "fenced") // a future epoch
		a.mustProblem(t, request{method: "PUT", path: ackPath("votes", 1, "a"), body: ackBody(e["a"])}, 409, "fenced")
		if after := rawGet(t, a, cpPath("votes", 3)); after != before {
			t.Errorf("fenced requests changed the checkpoint:\n%s\n%s", before, after)
		}
	})

	t.Run("commit abort ack", func(t *testing.T) {
		t.Parallel()
		e := a.setupJob(t, "decide", `{"participants":["a","b"],"auto_commit":false,"max_concurrent_checkpoints":5}`, "a", "b")
		a.prepare(t, "decide", "")
		a.mustProblem(t, request{method: "PUT", path: ackPath("decide", 1, "a"), body: ackBody(e["a"])}, 409, "not_decided")
		a.vote(t, "decide", 1, "a", e["a"], `["a"]`)
		p := a.mustProblem(t, request{method: "POST", path: cpPath("decide", 1) + "/commit"}, 409, "votes_missing")
		if !slices.Equal(p.Missing, []string{"b"}) || p.Checkpoint == nil {
			t.Errorf("votes_missing: missing %v, checkpoint %v", p.Missing, p.Checkpoint)
		}
		if cp := a.vote(t, "decide", 1, "b", e["b"], `["b"]`); cp.Status != coordinatorclient.Preparing {
			t.Errorf("auto_commit off: unanimous votes decided %s", cp.Status)
		}
		var cp checkpoint
		a.mustDo(t, "POST", cpPath("decide", 1)+"/commit", "", 200, &cp)
		if cp.Status != coordinatorclient.Committing || cp.DecidedAt == nil {
			t.Fatalf("commit: %+v", cp)
		}
		decided := *cp.DecidedAt
		a.mustDo(t, "POST", cpPath("decide", 1)+"/commit", "", 200, &cp) // idempotent
		if !cp.DecidedAt.Equal(decided) {
			t.Errorf("commit again moved decided_at")
		}
		p = a.mustProblem(t, request{method: "POST", path: cpPath("decide", 1) + "/abort", body: `{"reason":"changed my mind"}`}, 409, "already_decided")
		if p.Checkpoint == nil || p.Checkpoint.Status != coordinatorclient.Committing {
			t.Errorf("abort after commit carries %+v", p.Checkpoint)
		}
		if j := a.getJob(t, "decide"); j.LastCommitted == nil || *j.LastCommitted != 1 {
			t.Errorf("last_committed = %v", j.LastCommitted)
		}
		cp = a.ack(t, "decide", 1, "a", e["a"])
		acked := *participant(cp, "a").AckedAt
		if cp = a.ack(t, "decide", 1, "a", e["a"]); !participant(cp, "a").AckedAt.Equal(acked) || cp.Status != coordinatorclient.Committing {
			t.Errorf("a repeated ack changed the checkpoint: %+v", cp)
		}
		if cp = a.ack(t, "decide", 1, "b", e["b"]); cp.Status != coordinatorclient.Committed || cp.CompletedAt == nil {
			t.Errorf("after every ack: %+v", cp)
		}
		a.mustDo(t, "POST", cpPath("decide", 1)+"/commit", "", 200, nil) // still idempotent when committed

		// Abort: 200 with the reason, again 200; commit after it 409; acks are accepted
		// ("rolled back") and change no status.
		a.prepare(t, "decide", "")
		a.vote(t, "decide", 2, "a", e["a"], `["a2"]`)
		a.mustDo(t, "POST", cpPath("decide", 2)+"/abort", `{"reason":"operator"}`, 200, &cp)
		if cp.Status != coordinatorclient.Aborted || cp.AbortReason == nil || *cp.AbortReason != "operator" || cp.CompletedAt == nil || !cp.CompletedAt.Equal(*cp.DecidedAt) {
			t.Errorf("abort: %+v", cp)
		}
		a.mustDo(t, "POST", cpPath("decide", 2)+"/abort", "", 200, nil)
		a.mustDo(t, "POST", cpPath("decide", 2)+"/abort", `{"reason":"another"}`, 200, &cp)
		if *cp.AbortReason != "operator" {
			t.Errorf("a second abort changed the reason to %q", *cp.AbortReason)
		}
		a.mustProblem(t, request{method: "POST", path: cpPath("decide", 2) + "/commit"}, 409, "already_decided")
		if pe := a.pending(t, "decide", "a"); len(pe.Items) != 1 || pe.Items[0].Action != coordinatorclient.PendingActionAbort || string(pe.Items[0].Committables) != `["a2"]` {
			t.Errorf("pending after abort: %+v", pe)
		}
		if cp = a.ack(t, "decide", 2, "a", e["a"]); cp.Status != coordinatorclient.Aborted || participant(cp, "a").AckedAt == nil {
			t.Errorf("ack on aborted: %+v", cp)
		}
		a.ack(t, "decide", 2, "b", e["b"]) // b did not vote: its ack is accepted too
		if pe := a.pending(t, "decide", "a"); len(pe.Items) != 0 {
			t.Errorf("pending after acks: %+v", pe)
		}
		a.mustProblem(t, request{method: "POST", path: cpPath("decide", 9) + "/commit"}, 404, "not_found")
		a.mustProblem(t, request{method: "POST", path: cpPath("decide", 9) + "/abort"}, 404, "not_found")
		a.mustProblem(t, request{method: "PUT", path: ackPath("decide", 9, "a"), body: ackBody(e["a"])}, 404, "not_found")
		a.mustProblem(t, request{method: "PUT", path: ackPath("decide", 1, "zed"), body: ackBody(1)}, 404, "not_found")
	})

	t.Run("checkpoint order", func(t *testing.T) {
		t.Parallel()
		e := a.setupJob(t, "order", `{"participants":["a","b"],"max_concurrent_checkpoints":3}`, "a", "b")
		for range 3 {
			a.prepare(t, "order", "")
		}
		p := a.mustProblem(t, request{method: "POST", path: jobPath("order") + "/checkpoints"}, 409, "too_many_checkpoints")
		_ = p
		a.vote(t, "order", 2, "a", e["a"], `["a2"]`)
		if cp := a.vote(t, "order", 2, "b", e["b"], `["b2"]`); cp.Status != coordinatorclient.Preparing {
			t.Errorf("checkpoint 2 decided %s while 1 is preparing", cp.Status)
		}
		p = a.mustProblem(t, request{method: "POST", path: cpPath("order", 2) + "/commit"}, 409, "lower_checkpoint_open")
		if p.Checkpoint == nil || p.Checkpoint.Id != 2 {
			t.Errorf("lower_checkpoint_open carries %+v", p.Checkpoint)
		}
		a.vote(t, "order", 1, "a", e["a"], `["a1"]`)
		if cp := a.vote(t, "order", 1, "b", e["b"], `["b1"]`); cp.Status != coordinatorclient.Committing {
			t.Errorf("checkpoint 1 after its last vote: %s", cp.Status)
		}
		cp1, cp2 := a.get(t, "order", 1), a.get(t, "order", 2)
		if cp2.Status != coordinatorclient.Committing || cp2.DecidedAt.Before(*cp1.DecidedAt) {
			t.Errorf("checkpoint 2 once 1 committed: %s (decided %v, 1 at %v)", cp2.Status, cp2.DecidedAt, cp1.DecidedAt)
		}
		// Checkpoints 3, 4, 5: aborting 4 aborts 5 but not 3.
		a.prepare(t, "order", "")
		a.prepare(t, "order", "")
		a.vote(t, "order", 5, "a", e["a"], `["a5"]`)
		a.mustDo(t, "POST", cpPath("order", 4)+"/abort", "", 200, nil)
		if cp := a.get(t, "order", 5); cp.Status != coordinatorclient.Aborted || cp.AbortReason == nil || !strings.Contains(*cp.AbortReason, "4") {
			t.Errorf("checkpoint 5 after 4 aborted: %+v", cp)
		}
		if cp := a.get(t, "order", 3); cp.Status != coordinatorclient.Preparing {
			t.Errorf("checkpoint 3 after 4 aborted: %s", cp.Status)
		}
		// An abort vote on 3 cascades as well.
		a.prepare(t, "order", "")
		a.mustDo(t, "PUT", votePath("order", 3, "a"), abortVoteBody(e["a"], ""), 200, nil)
		if cp := a.get(t, "order", 6); cp.Status != coordinatorclient.Aborted {
			t.Errorf("checkpoint 6 after 3 aborted: %s", cp.Status)
		}
		if j := a.getJob(t, "order"); *j.LastCheckpoint != 6 || *j.LastCommitted != 2 {
			t.Errorf("job: last %v, committed %v", *j.LastCheckpoint, *j.LastCommitted)
		}
		// Waiting for a lower checkpoint does not extend a deadline: 8 has every vote but
		// 7 is preparing; 8 is aborted at its deadline, 7 stays.
		a.prepare(t, "order", "")
		a.prepare(t, "order", `{"timeout_ms":300}`)
		a.vote(t, "order", 8, "a", e["a"], "")
		if cp := a.vote(t, "order", 8, "b", e["b"], ""); cp.Status != coordinatorclient.Preparing {
			t.Fatalf("checkpoint 8 with 7 open: %s", cp.Status)
		}
		var cp8 checkpoint
		a.mustDo(t, "GET", cpPath("order", 8)+"?wait_ms=5000", "", 200, &cp8)
		if cp8.Status != coordinatorclient.Aborted || cp8.DecidedAt.Before(cp8.Deadline) {
			t.Errorf("checkpoint 8 waiting for 7 past its deadline: %s at %v (deadline %v)", cp8.Status, cp8.DecidedAt, cp8.Deadline)
		}
		if cp := a.get(t, "order", 7); cp.Status != coordinatorclient.Preparing {
			t.Errorf("checkpoint 7: %s", cp.Status)
		}
	})

	t.Run("idempotency key", func(t *testing.T) {
		t.Parallel()
		e := a.setupJob(t, "idem", `{"participants":["a"]}`, "a")
		key := map[string]string{"Idempotency-Key": "prepare-7"}
		var first, again checkpoint
		a.must(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", body: `{"timeout_ms":20000}`, header: key}, 201, &first)
		a.must(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", body: `{"timeout_ms":20000}`, header: key}, 201, &again)
		if first.Id != 1 || again.Id != 1 || !again.CreatedAt.Equal(first.CreatedAt) {
			t.Errorf("replay: %d then %d", first.Id, again.Id)
		}
		// Another key while one is preparing (max 1): too_many; the same key: still 201.
		a.mustProblem(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", header: map[string]string{"Idempotency-Key": "prepare-8"}}, 409, "too_many_checkpoints")
		a.mustProblem(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", body: `{"timeout_ms":20001}`, header: key}, 409, "idempotency_conflict")
		a.mustProblem(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", header: key}, 409, "idempotency_conflict")
		a.vote(t, "idem", 1, "a", e["a"], "")
		// A replay after the decision answers the checkpoint as it stands.
		a.must(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", body: `{"timeout_ms":20000}`, header: key}, 201, &again)
		if again.Id != 1 || again.Status != coordinatorclient.Committing {
			t.Errorf("replay after the decision: %d %s", again.Id, again.Status)
		}
		// No body, {} and the same fields spaced otherwise are one request.
		k2 := map[string]string{"Idempotency-Key": "empty"}
		var e1, e2, e3 checkpoint
		a.must(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", header: k2}, 201, &e1)
		a.must(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", body: `{}`, header: k2}, 201, &e2)
		a.must(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", body: ` { } `, header: k2}, 201, &e3)
		if e1.Id != 2 || e2.Id != 2 || e3.Id != 2 {
			t.Errorf("empty bodies under one key opened %d, %d, %d", e1.Id, e2.Id, e3.Id)
		}
		// Keys are per job.
		a.setupJob(t, "idem-other", `{"participants":["a"]}`)
		var o checkpoint
		a.must(t, request{method: "POST", path: jobPath("idem-other") + "/checkpoints", body: `{"timeout_ms":20000}`, header: key}, 201, &o)
		if o.Job != "idem-other" || o.Id != 1 {
			t.Errorf("the key of another job: %+v", o)
		}
		for _, bad := range []string{strings.Repeat("k", 256), "caf\u00e9", "tab\there"} {
			a.mustProblem(t, request{method: "POST", path: jobPath("idem") + "/checkpoints", header: map[string]string{"Idempotency-Key": bad}}, 400, "invalid_request")
		}
		if j := a.getJob(t, "idem"); *j.LastCheckpoint != 2 {
			t.Errorf("last_checkpoint = %d, want 2", *j.LastCheckpoint)
		}
	})

	t.Run("deadlines", func(t *testing.T) {
		t.Parallel()
		e := a.setupJob(t, "deadline", `{"participants":["sink-alpha","sink-bravo","sink-charlie"],"checkpoint_timeout_ms":400}`,
			"sink-alpha", "sink-bravo", "sink-charlie")
		cp := a.prepare(t, "deadline", "")
		if d := cp.Deadline.Sub(cp.CreatedAt); d != 400*time.Millisecond {
			t.Errorf("deadline is created_at + %s, want 400ms", d)
		}
		a.vote(t, "deadline", 1, "sink-alpha", e["sink-alpha"], `["a"]`)
		// A long poll is woken by the expiry.
		start := time.Now()
		var polled checkpoint
		a.mustDo(t, "GET", cpPath("deadline", 1)+"?wait_ms=10000", "", 200, &polled)
		if polled.Status != coordinatorclient.Aborted || time.Since(start) > 5*time.Second {
			t.Fatalf("long poll across the deadline: %s after %s", polled.Status, time.Since(start))
		}
		// Aborted within one second of its deadline, never before it; the reason names
		// who did not vote in time, and only them.
		if polled.DecidedAt.Before(polled.Deadline) || polled.DecidedAt.Sub(polled.Deadline) > time.Second {
			t.Errorf("deadline %v, aborted at %v", polled.Deadline, polled.DecidedAt)
		}
		if r := polled.AbortReason; r == nil || !strings.Contains(*r, "sink-bravo") || !strings.Contains(*r, "sink-charlie") || strings.Contains(*r, "sink-alpha") {
			t.Errorf("abort reason %v, want it to name sink-bravo and sink-charlie only", r)
		}
		p := a.mustProblem(t, request{method: "PUT", path: votePath("deadline", 1, "sink-bravo"), body: voteBody(e["sink-bravo"], "")}, 409, "already_decided")
		if p.Checkpoint == nil || participant(*p.Checkpoint, "sink-bravo").Vote != nil {
			t.Errorf("a late vote was recorded: %+v", p.Checkpoint)
		}
		// A vote that arrives after the deadline, swept or not yet, is not counted.
		cp = a.prepare(t, "deadline", `{"timeout_ms":100}`)
		time.Sleep(110 * time.Millisecond)
		p = a.mustProblem(t, request{method: "PUT", path: votePath("deadline", cp.Id, "sink-alpha"), body: voteBody(e["sink-alpha"], "")}, 409, "already_decided")
		if p.Checkpoint == nil || p.Checkpoint.Status != coordinatorclient.Aborted || participant(*p.Checkpoint, "sink-alpha").Vote != nil ||
			p.Checkpoint.AbortReason == nil || !strings.Contains(*p.Checkpoint.AbortReason, "sink-alpha") {
			t.Errorf("late vote: %+v", p.Checkpoint)
		}
		// Pending no longer offers an expired checkpoint to vote on; what sink-alpha had
		// prepared in checkpoint 1 it must roll back.
		if pe := a.pending(t, "deadline", "sink-alpha"); len(pe.Items) != 1 || pe.Items[0].Checkpoint != 1 || pe.Items[0].Action != coordinatorclient.PendingActionAbort {
			t.Errorf("pending after expiry: %+v, want only the rollback of checkpoint 1", pe)
		}
		// Every vote in, auto_commit off, no commit: aborted at the deadline too.
		a.mustDo(t, "PUT", jobPath("deadline"), `{"participants":["sink-alpha"],"auto_commit":false,"checkpoint_timeout_ms":300}`, 200, nil)
		cp = a.prepare(t, "deadline", "")
		a.vote(t, "deadline", cp.Id, "sink-alpha", e["sink-alpha"], "")
		eventually(t, 3*time.Second, func() error {
			if got := a.get(t, "deadline", cp.Id); got.Status != coordinatorclient.Aborted {
				return fmt.Errorf("checkpoint %d is %s past its deadline", cp.Id, got.Status)
			}
			return nil
		})
		a.mustProblem(t, request{method: "POST", path: cpPath("deadline", cp.Id) + "/commit"}, 409, "already_decided")
	})

	t.Run("long poll", func(t *testing.T) {
		t.Parallel()
		e := a.setupJob(t, "poll", `{"participants":["a","b"]}`, "a", "b")
		a.prepare(t, "poll", "")
		a.vote(t, "poll", 1, "a", e["a"], "")
		start := time.Now()
		if cp := a.get(t, "poll", 1); cp.Status != coordinatorclient.Preparing || time.Since(start) > 2*time.Second {
			t.Errorf("GET without wait_ms waited or decided")
		}
		a.mustDo(t, "GET", cpPath("poll", 1)+"?wait_ms=0", "", 200, nil)
		go func() {
			time.Sleep(300 * time.Millisecond)
			_, _ = a.do(context.Background(), "PUT", votePath("poll", 1, "b"), voteBody(e["b"], ""))
		}()
		start = time.Now()
		var cp checkpoint
		a.mustDo(t, "GET", cpPath("poll", 1)+"?wait_ms=20000", "", 200, &cp)
		if cp.Status != coordinatorclient.Committing || time.Since(start) > 5*time.Second {
			t.Errorf("long poll: %s after %s, want committing at once after the last vote", cp.Status, time.Since(start))
		}
		// A decided checkpoint answers at once.
		start = time.Now()
		a.mustDo(t, "GET", cpPath("poll", 1)+"?wait_ms=60000", "", 200, nil)
		if time.Since(start) > 2*time.Second {
			t.Errorf("long poll on a decided checkpoint waited %s", time.Since(start))
		}
		// Nothing happens: it answers after wait_ms, preparing.
		a.prepare(t, "poll", "")
		start = time.Now()
		a.mustDo(t, "GET", cpPath("poll", 2)+"?wait_ms=300", "", 200, &cp)
		if el := time.Since(start); cp.Status != coordinatorclient.Preparing || el < 300*time.Millisecond || el > 5*time.Second {
			t.Errorf("idle long poll: %s after %s", cp.Status, el)
		}
		for _, bad := range []string{"-1", "60001", "abc", "1.5", "99999999999999999999"} {
			a.mustProblem(t, request{method: "GET", path: cpPath("poll", 2) + "?wait_ms=" + bad}, 400, "invalid_request")
		}
	})

	t.Run("listings", func(t *testing.T) {
		t.Parallel()
		e := a.setupJob(t, "lists", `{"participants":["a"],"max_concurrent_checkpoints":10}`, "a")
		for range 5 {
			a.prepare(t, "lists", "")
		}
		a.vote(t, "lists", 1, "a", e["a"], "")                         // committing
		a.mustDo(t, "POST", cpPath("lists", 5)+"/abort", "", 200, nil) // aborted
		var ids []int64                                                // newest first, two per page
		path := jobPath("lists") + "/checkpoints?limit=2"
		for {
			var page coordinatorclient.CheckpointList
			a.mustDo(t, "GET", path, "", 200, &page)
			for _, cp := range page.Items {
				ids = append(ids, cp.Id)
			}
			if page.NextCursor == nil {
				break
			}
			path = jobPath("lists") + "/checkpoints?limit=2&cursor=" + url.QueryEscape(*page.NextCursor)
		}
		if !slices.Equal(ids, []int64{5, 4, 3, 2, 1}) {
			t.Errorf("checkpoints newest first: %v", ids)
		}
		var page coordinatorclient.CheckpointList
		a.mustDo(t, "GET", jobPath("lists")+"/checkpoints?status=preparing,aborted", "", 200, &page)
		if len(page.Items) != 4 || page.Items[0].Id != 5 || page.Items[3].Id != 2 {
			t.Errorf("status filter: %d items", len(page.Items))
		}
		// Operators: open checkpoints of every job, oldest first, by default preparing and
		// committing.
		var open []checkpoint
		path = "/v1/checkpoints?limit=3"
		for {
			var page coordinatorclient.CheckpointList
			a.mustDo(t, "GET", path, "", 200, &page)
			open = append(open, page.Items...)
			if page.NextCursor == nil {
				break
			}
			path = "/v1/checkpoints?limit=3&cursor=" + url.QueryEscape(*page.NextCursor)
		}
		var mine []int64
		for _, cp := range open {
			if cp.Status != coordinatorclient.Preparing && cp.Status != coordinatorclient.Committing {
				t.Errorf("open listing shows %s", cp.Status)
			}
			if cp.Job == "lists" {
				mine = append(mine, cp.Id)
			}
		}
		for i := 1; i < len(open); i++ {
			if open[i].CreatedAt.Before(open[i-1].CreatedAt) {
				t.Errorf("open listing not oldest first at %d", i)
			}
		}
		if !slices.Equal(mine, []int64{1, 2, 3, 4}) {
			t.Errorf("open checkpoints of lists: %v", mine)
		}
		a.mustDo(t, "GET", "/v1/checkpoints?status=aborted&limit=1000", "", 200, &page)
		if !slices.ContainsFunc(page.Items, func(cp checkpoint) bool { return cp.Job == "lists" && cp.Id == 5 }) {
			t.Errorf("aborted listing misses lists/5")
		}
		for _, q := range []string{"status=bogus", "status=preparing,", "limit=0", "limit=1001", "limit=x", "cursor=%21%21", "cursor=" + base64Text("jobs:x")} {
			a.mustProblem(t, request{method: "GET", path: jobPath("lists") + "/checkpoints?" + q}, 400, "invalid_request")
			a.mustProblem(t, request{method: "GET", path: "/v1/checkpoints?" + q}, 400, "invalid_request")
		}
		a.mustProblem(t, request{method: "GET", path: "/v1/jobs?limit=0"}, 400, "invalid_request")
		a.mustProblem(t, request{method: "GET", path: "/v1/jobs?cursor=" + base64Text("checkpoints:3")}, 400, "invalid_request")
		a.mustProblem(t, request{method: "GET", path: jobPath("nope") + "/checkpoints"}, 404, "not_found")
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		t.Parallel()
		e := a.setupJob(t, "bad", `{"participants":["a","b"],"max_concurrent_checkpoints":2}`, "a", "b")
		a.prepare(t, "bad", "")
		a.vote(t, "bad", 1, "a", e["a"], `["keep"]`)
		snapshot := func() string {
			return rawGet(t, a, jobPath("bad")) + rawGet(t, a, jobPath("bad")+"/checkpoints") +
				rawGet(t, a, pendingPath("bad", "a")) + rawGet(t, a, pendingPath("bad", "b"))
		}
		before := snapshot()
		vote := votePath("bad", 1, "b")
		long := strings.Repeat("x", 129)
		cases := []struct {
			r      request
			status int
			code   string
		}{
			// Not declared as JSON: 415.
			{request{method: "PUT", path: vote, body: voteBody(e["b"], ""), contentType: "text/plain"}, 415, "unsupported_media_type"},
			{request{method: "PUT", path: vote, body: voteBody(e["b"], ""), contentType: "-"}, 415, "unsupported_media_type"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":["z"]}`, contentType: "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
			{request{method: "PUT", path: vote, body: voteBody(e["b"], ""), contentType: "application/json; charset=latin1"}, 415, "unsupported_media_type"},
			{request{method: "POST", path: jobPath("bad") + "/checkpoints", body: `{}`, contentType: "text/json"}, 415, "unsupported_media_type"},
			// Too large: 413.
			{request{method: "PUT", path: vote, body: voteBody(e["b"], `["`+strings.Repeat("x", maxBodyBytes)+`"]`)}, 413, "payload_too_large"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":["` + strings.Repeat("y", maxBodyBytes) + `"]}`}, 413, "payload_too_large"},
			// Malformed JSON, unknown fields, wrong types, null, duplicates.
			{request{method: "PUT", path: vote, body: `{"epoch":1,`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: voteBody(e["b"], "") + ` {}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `[1]`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1,"vote":"prepared","extra":1}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"Epoch":1,"vote":"prepared"}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":"1","vote":"prepared"}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1.5,"vote":"prepared"}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1,"vote":"maybe"}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1,"vote":null}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1,"vote":"prepared","epoch":1}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1,"vote":"prepared","committables":{"a":1}}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1,"vote":"prepared","committables":null}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1,"vote":"prepared","reason":"why"}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1,"vote":"abort","committables":[]}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"epoch":1,"vote":"abort","reason":"nul\u0000"}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: abortVoteBody(e["b"], strings.Repeat("r", 1025))}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: "{\"epoch\":1,\"vote\":\"prepared\",\"committables\":[\"\xff\"]}"}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: `{"vote":"prepared"}`}, 400, "invalid_request"},
			{request{method: "PUT", path: vote, body: voteBody(0, "")}, 409, "not_registered"},
			{request{method: "PUT", path: vote, body: voteBody(-1, "")}, 400, "invalid_request"},
			{request{method: "PUT", path: vote}, 400, "invalid_request"},
			{request{method: "PUT", path: ackPath("bad", 1, "a"), body: `{"epoch":0}`}, 409, "not_registered"},
			{request{method: "PUT", path: ackPath("bad", 1, "a"), body: `{"epoch":1,"foo":2}`}, 400, "invalid_request"},
			{request{method: "PUT", path: ackPath("bad", 1, "a"), body: `{}`}, 400, "invalid_request"},
			{request{method: "POST", path: cpPath("bad", 1) + "/commit", body: `{"force":true}`}, 400, "invalid_request"},
			{request{method: "POST", path: cpPath("bad", 1) + "/abort", body: `{"reason":5}`}, 400, "invalid_request"},
			{request{method: "POST", path: cpPath("bad", 1) + "/abort", body: `{"reason":"` + strings.Repeat("r", 1025) + `"}`}, 400, "invalid_request"},
			{request{method: "POST", path: registerPath("bad", "a"), body: `{"epoch":7}`}, 400, "invalid_request"},
			{request{method: "POST", path: jobPath("bad") + "/checkpoints", body: `{"timeout_ms":99}`}, 400, "invalid_request"},
			{request{method: "POST", path: jobPath("bad") + "/checkpoints", body: `{"timeout_ms":86400001}`}, 400, "invalid_request"},
			{request{method: "POST", path: jobPath("bad") + "/checkpoints", body: `{"timeout_ms":"100"}`}, 400, "invalid_request"},
			{request{method: "POST", path: jobPath("bad") + "/checkpoints", body: `{"timeout_ms":1000,"x":1}`}, 400, "invalid_request"},
			{request{method: "PUT", path: jobPath("bad"), body: `{}`}, 400, "invalid_request"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":[]}`}, 400, "invalid_request"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":["a","a"]}`}, 400, "invalid_request"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":["-a"]}`}, 400, "invalid_request"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":["` + long + `"]}`}, 400, "invalid_request"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":["a"],"checkpoint_timeout_ms":99}`}, 400, "invalid_request"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":["a"],"checkpoint_timeout_ms":86400001}`}, 400, "invalid_request"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":["a"],"max_concurrent_checkpoints":0}`}, 400, "invalid_request"},
			{request{method: "PUT", path: jobPath("bad"), body: `{"participants":["a"],"auto_commit":"yes"}`}, 400, "invalid_request"},
			// Names outside ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ and ids below 1.
			{request{method: "PUT", path: "/v1/jobs/-bad", body: `{"participants":["a"]}`}, 400, "invalid_request"},
			{request{method: "PUT", path: "/v1/jobs/.bad", body: `{"participants":["a"]}`}, 400, "invalid_request"},
			{request{method: "PUT", path: "/v1/jobs/b%20ad", body: `{"participants":["a"]}`}, 400, "invalid_request"},
			{request{method: "PUT", path: "/v1/jobs/b%C3%A4d", body: `{"participants":["a"]}`}, 400, "invalid_request"},
			{request{method: "PUT", path: "/v1/jobs/" + long, body: `{"participants":["a"]}`}, 400, "invalid_request"},
			{request{method: "GET", path: "/v1/jobs/" + long}, 400, "invalid_request"},
			{request{method: "POST", path: registerPath("bad", "_a")}, 400, "invalid_request"},
			{request{method: "GET", path: pendingPath("bad", "a%00")}, 400, "invalid_request"},
			{request{method: "PUT", path: votePath("bad", 1, "b%2Fc"), body: voteBody(e["b"], "")}, 400, "invalid_request"},
			{request{method: "GET", path: "/v1/jobs/bad/checkpoints/0"}, 400, "invalid_request"},
			{request{method: "GET", path: "/v1/jobs/bad/checkpoints/-1"}, 400, "invalid_request"},
			{request{method: "GET", path: "/v1/jobs/bad/checkpoints/one"}, 400, "invalid_request"},
			{request{method: "GET", path: "/v1/jobs/bad/checkpoints/99999999999999999999"}, 400, "invalid_request"},
			{request{method: "PUT", path: votePath("bad", 0, "b"), body: voteBody(e["b"], "")}, 400, "invalid_request"},
			{request{method: "POST", path: cpPath("bad", 0) + "/abort"}, 400, "invalid_request"},
			{request{method: "POST", path: cpPath("bad", 0) + "/commit"}, 400, "invalid_request"},
			{request{method: "PUT", path: ackPath("bad", 0, "a"), body: ackBody(e["a"])}, 400, "invalid_request"},
			{request{method: "GET", path: cpPath("bad", 1) + "?wait_ms=-5"}, 400, "invalid_request"},
			{request{method: "GET", path: cpPath("bad", 1) + "?wait_ms=60001"}, 400, "invalid_request"},
			// Routes and methods.
			{request{method: "GET", path: "/v1/nothing-here"}, 404, "not_found"},
			{request{method: "GET", path: "/"}, 404, "not_found"},
			{request{method: "DELETE", path: cpPath("bad", 1)}, 405, "method_not_allowed"},
			{request{method: "POST", path: jobPath("bad")}, 405, "method_not_allowed"},
			{request{method: "PATCH", path: "/v1/jobs"}, 405, "method_not_allowed"},
		}
		for _, tc := range cases {
			p := a.mustProblem(t, tc.r, tc.status, tc.code)
			if tc.code == "invalid_request" && len(p.Errors) == 0 && !strings.Contains(p.Detail, "JSON") {
				t.Logf("%s %s: invalid_request without field errors: %s", tc.r.method, tc.r.path, p.Detail)
			}
		}
		rep, err := a.send(context.Background(), request{method: "DELETE", path: cpPath("bad", 1)})
		if err != nil || rep.header.Get("Allow") == "" {
			t.Errorf("405 without Allow: %v %v", rep, err)
		}
		if after := snapshot(); after != before {
			t.Errorf("bad input changed the state:\nbefore %s\nafter  %s", before, after)
		}
	})

	t.Run("request ids and health", func(t *testing.T) {
		t.Parallel()
		rep := a.must(t, request{method: "GET", path: "/healthz", header: map[string]string{"X-Request-Id": "e2e-trace-42"}}, 200, nil)
		if rep.header.Get("X-Request-Id") != "e2e-trace-42" {
			t.Errorf("X-Request-Id not echoed: %q", rep.header.Get("X-Request-Id"))
		}
		rep, _ = a.send(context.Background(), request{method: "GET", path: jobPath("nope"), header: map[string]string{"X-Request-Id": "e2e-trace-43"}})
		if p := checkProblem(t, rep, 404, "not_found"); p.RequestID != "e2e-trace-43" {
			t.Errorf("problem request_id %q", p.RequestID)
		}
		a.mustDo(t, "GET", "/readyz", "", 200, nil)
	})

	t.Run("problem pages", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		// A problem's type resolves, against the URL of the request, to the page about its
		// code on the coordinator that answered: HTML, no script, HEAD alike.
		for _, r := range []request{
			{method: "GET", path: jobPath("no-such-job")},
			{method: "DELETE", path: "/healthz"},
			{method: "GET", path: "/v1/jobs?limt=5"},
			{method: "PUT", path: jobPath("pages"), body: `{"participants":["a"]}`, contentType: "text/plain"},
			{method: "GET", path: "/problems/no_such_code"},
		} {
			rep, err := a.send(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			p := checkProblem(t, rep, rep.status, "")
			reqURL, err := url.Parse(a.base + r.path)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := url.Parse(p.Type)
			if err != nil {
				t.Fatalf("%v: type %q: %v", rep, p.Type, err)
			}
			page := reqURL.ResolveReference(ref)
			if page.Host != reqURL.Host || page.Path != "/problems/"+p.Code {
				t.Fatalf("%v: type %q resolves to %s", rep, p.Type, page)
			}
			for _, method := range []string{"GET", "HEAD"} {
				got, err := a.send(ctx, request{method: method, path: page.Path})
				switch {
				case err != nil:
					t.Fatalf("%s %s: %v", method, page.Path, err)
				case got.status != 200 || got.header.Get("Content-Type") != "text/html; charset=utf-8" || got.header.Get("X-Request-Id") == "":
					t.Errorf("%v (the type of %v): want 200 text/html with an X-Request-Id", got, rep)
				case method == "HEAD" && len(got.body) != 0:
					t.Errorf("%v: a body", got)
				case method == "GET" && (!strings.Contains(string(got.body), "<code>"+p.Code+"</code>") || strings.Contains(string(got.body), "<script")):
					t.Errorf("%v: not the page about %s, or with a script:\n%s", got, p.Code, got.body)
				}
			}
		}
		list, err := c.ListProblemTypesWithResponse(ctx)
		if err != nil || list.StatusCode() != 200 {
			t.Fatalf("GET /problems: %v %s", err, list.Body)
		}
		for _, code := range []string{"invalid_request", "fenced", "already_decided", "unavailable", "internal"} {
			if !strings.Contains(string(list.Body), `href="problems/`+code+`"`) {
				t.Errorf("GET /problems does not link %s:\n%s", code, list.Body)
			}
		}
	})

	t.Run("16 voters at once", func(t *testing.T) {
		t.Parallel()
		var names []string
		for i := range 16 {
			names = append(names, fmt.Sprintf("p%02d", i))
		}
		cfg, _ := json.Marshal(map[string]any{"participants": names, "max_concurrent_checkpoints": 1})
		e := a.setupJob(t, "sixteen", string(cfg), names...)
		for round := int64(1); round <= 6; round++ {
			a.prepare(t, "sixteen", "")
			abortBy := ""
			if round%3 == 0 {
				abortBy = names[round%16]
			}
			type answer struct {
				name string
				rep  reply
				err  error
			}
			answers := make([]answer, len(names))
			var start, done sync.WaitGroup
			start.Add(1)
			for i, n := range names {
				done.Go(func() {
					start.Wait()
					body := voteBody(e[n], fmt.Sprintf(`[{"from":%q,"round":%d}]`, n, round))
					if n == abortBy {
						body = abortVoteBody(e[n], "declined")
					}
					rep, err := a.do(context.Background(), "PUT", votePath("sixteen", round, n), body)
					answers[i] = answer{n, rep, err}
				})
			}
			start.Done()
			done.Wait()
			final := a.get(t, "sixteen", round)
			var decidedAt []time.Time
			for _, an := range answers {
				if an.err != nil {
					t.Fatalf("vote of %s: %v", an.name, an.err)
				}
				p := participant(final, an.name)
				switch {
				case an.rep.status == 200:
					var cp checkpoint
					_ = json.Unmarshal(an.rep.body, &cp)
					if cp.DecidedAt != nil {
						decidedAt = append(decidedAt, *cp.DecidedAt)
					}
					if an.name != abortBy && (p.Vote == nil || string(p.Committables) != fmt.Sprintf(`[{"from":%q,"round":%d}]`, an.name, round)) {
						t.Errorf("round %d: %s was answered 200 but its vote is %+v", round, an.name, p)
					}
				case an.rep.status == 409 && abortBy != "":
					checkProblem(t, an.rep, 409, "already_decided")
					if p.Vote != nil {
						t.Errorf("round %d: %s was refused but its vote was recorded", round, an.name)
					}
				default:
					t.Errorf("round %d: vote of %s: %v", round, an.name, an.rep)
				}
			}
			want := coordinatorclient.Committing
			if abortBy != "" {
				want = coordinatorclient.Aborted
			}
			if final.Status != want || final.DecidedAt == nil {
				t.Fatalf("round %d: %s, want %s", round, final.Status, want)
			}
			if len(decidedAt) == 0 {
				t.Errorf("round %d: no voter was told the decision", round)
			}
			for _, d := range decidedAt {
				if !d.Equal(*final.DecidedAt) {
					t.Errorf("round %d: decided at %v and at %v: two decisions", round, d, *final.DecidedAt)
				}
			}
			if abortBy != "" {
				continue
			}
			// Sixteen acks at once: all 200, committed once.
			var acks sync.WaitGroup
			statuses := make([]int, len(names))
			for i, n := range names {
				acks.Go(func() {
					rep, err := a.do(context.Background(), "PUT", ackPath("sixteen", round, n), ackBody(e[n]))
					if err == nil {
						statuses[i] = rep.status
					}
				})
			}
			acks.Wait()
			final = a.get(t, "sixteen", round)
			if final.Status != coordinatorclient.Committed || slices.ContainsFunc(statuses, func(s int) bool { return s != 200 }) {
				t.Errorf("round %d after 16 acks: %s, statuses %v", round, final.Status, statuses)
			}
		}
	})

	t.Run("8 prepares at once", func(t *testing.T) {
		t.Parallel()
		a.setupJob(t, "eight", `{"participants":["a"]}`)
		for round := 1; round <= 10; round++ {
			statuses := make([]int, 8)
			var created []int64
			var mu sync.Mutex
			var wg, start sync.WaitGroup
			start.Add(1)
			for i := range 8 {
				wg.Go(func() {
					start.Wait()
					rep, err := a.do(context.Background(), "POST", jobPath("eight")+"/checkpoints", "")
					if err != nil {
						return
					}
					statuses[i] = rep.status
					if rep.status == 201 {
						var cp checkpoint
						_ = json.Unmarshal(rep.body, &cp)
						mu.Lock()
						created = append(created, cp.Id)
						mu.Unlock()
					} else if err := problemError(rep, 409, "too_many_checkpoints"); err != nil {
						t.Error(err)
					}
				})
			}
			start.Done()
			wg.Wait()
			if len(created) != 1 || created[0] != int64(round) {
				t.Fatalf("round %d: created %v (statuses %v), want exactly checkpoint %d", round, created, statuses, round)
			}
			a.mustDo(t, "POST", cpPath("eight", created[0])+"/abort", "", 200, nil)
		}
		if j := a.getJob(t, "eight"); *j.LastCheckpoint != 10 {
			t.Errorf("last_checkpoint %d after 10 rounds", *j.LastCheckpoint)
		}
	})

	t.Run("last vote against abort", func(t *testing.T) {
		t.Parallel()
		e := a.setupJob(t, "race", `{"participants":["a","b"]}`, "a", "b")
		outcomes := map[string]int{}
		for round := int64(1); round <= 30; round++ {
			a.prepare(t, "race", "")
			a.vote(t, "race", round, "a", e["a"], `["a"]`)
			var vote, abort reply
			var verr, aerr error
			var wg, start sync.WaitGroup
			start.Add(1)
			wg.Go(func() {
				start.Wait()
				vote, verr = a.do(context.Background(), "PUT", votePath("race", round, "b"), voteBody(e["b"], `["b"]`))
			})
			wg.Go(func() {
				start.Wait()
				abort, aerr = a.do(context.Background(), "POST", cpPath("race", round)+"/abort", `{"reason":"race"}`)
			})
			start.Done()
			wg.Wait()
			if verr != nil || aerr != nil {
				t.Fatalf("round %d: %v %v", round, verr, aerr)
			}
			final := a.get(t, "race", round)
			switch {
			case vote.status == 200 && abort.status == 409:
				outcomes["vote won"]++
				p := checkProblem(t, abort, 409, "already_decided")
				var cp checkpoint
				_ = json.Unmarshal(vote.body, &cp)
				if cp.Status != coordinatorclient.Committing || final.Status != coordinatorclient.Committing || p.Checkpoint == nil || p.Checkpoint.Status != coordinatorclient.Committing {
					t.Errorf("round %d: vote told %s, abort told %v, final %s", round, cp.Status, p.Checkpoint, final.Status)
				}
			case abort.status == 200 && vote.status == 409:
				outcomes["abort won"]++
				checkProblem(t, vote, 409, "already_decided")
				if final.Status != coordinatorclient.Aborted || participant(final, "b").Vote != nil {
					t.Errorf("round %d: abort won but final is %s with b's vote %v", round, final.Status, participant(final, "b").Vote)
				}
			default:
				t.Errorf("round %d: vote %v, abort %v: want exactly one to win", round, vote, abort)
			}
			if final.Status == coordinatorclient.Committing {
				a.ack(t, "race", round, "a", e["a"])
				a.ack(t, "race", round, "b", e["b"])
			}
		}
		t.Logf("outcomes: %v", outcomes)
	})

	t.Run("two coordinators", func(t *testing.T) {
		t.Parallel()
		other := harness.StartCoordinator(t, dbURL, "--sweep-interval", "100ms")
		b := newAPI(other)
		e := a.setupJob(t, "two", `{"participants":["a","b"]}`, "a", "b")
		b.prepare(t, "two", "")
		a.vote(t, "two", 1, "a", e["a"], "")
		// A waiter on one process is woken by a decision taken on the other.
		go func() {
			time.Sleep(300 * time.Millisecond)
			_, _ = a.do(context.Background(), "PUT", votePath("two", 1, "b"), voteBody(e["b"], ""))
		}()
		start := time.Now()
		var cp checkpoint
		b.mustDo(t, "GET", cpPath("two", 1)+"?wait_ms=20000", "", 200, &cp)
		if cp.Status != coordinatorclient.Committing || time.Since(start) > 5*time.Second {
			t.Errorf("waiter on the other coordinator: %s after %s", cp.Status, time.Since(start))
		}
		a.ack(t, "two", 1, "a", e["a"])
		b.ack(t, "two", 1, "b", e["b"])
		// Prepares split across both: one checkpoint per round, no duplicate ids.
		for round := int64(2); round <= 6; round++ {
			var wg sync.WaitGroup
			var mu sync.Mutex
			created := 0
			for i := range 8 {
				wg.Go(func() {
					via := a
					if i%2 == 1 {
						via = b
					}
					rep, err := via.do(context.Background(), "POST", jobPath("two")+"/checkpoints", "")
					if err == nil && rep.status == 201 {
						mu.Lock()
						created++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if created != 1 {
				t.Fatalf("round %d: %d checkpoints opened through two coordinators", round, created)
			}
			a.vote(t, "two", round, "a", e["a"], "")
			b.vote(t, "two", round, "b", e["b"], "")
			a.ack(t, "two", round, "a", e["a"])
			if cp := b.ack(t, "two", round, "b", e["b"]); cp.Status != coordinatorclient.Committed {
				t.Errorf("round %d: %s", round, cp.Status)
			}
		}
		// The participant limit, with the default body limit.
		b.mustProblem(t, request{method: "PUT", path: jobPath("wide"), body: `{"participants":` + names(1001) + `}`}, 400, "invalid_request")
		b.mustDo(t, "PUT", jobPath("wide"), `{"participants":`+names(1000)+`}`, 201, nil)
		other.Stop()
	})
}

// rawGet returns the body of a GET, to compare states byte for byte.
func rawGet(t testing.TB, a *api, path string) string {
	t.Helper()
	return string(a.mustDo(t, "GET", path, "", 200, nil).body)
}

// mustField returns the raw JSON of one member of the object at path.
func mustField(t testing.TB, a *api, path, field string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(rawGet(t, a, path)), &m); err != nil {
		t.Fatal(err)
	}
	return string(m[field])
}

// checkShape checks that a checkpoint has every member openapi.yaml requires, null or not,
// and that its times are RFC 3339 UTC.
func checkShape(t testing.TB, a *api, path string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(rawGet(t, a, path)), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"job", "id", "status", "created_at", "deadline", "decided_at", "completed_at", "abort_reason", "participants"} {
		if _, ok := m[k]; !ok {
			t.Errorf("checkpoint without %q: %v", k, m)
		}
	}
	for _, k := range []string{"created_at", "deadline", "decided_at", "completed_at"} {
		if v := string(m[k]); v != "null" && !strings.HasSuffix(v, `Z"`) {
			t.Errorf("%s = %s, want RFC 3339 UTC", k, v)
		}
	}
	var ps []map[string]json.RawMessage
	if err := json.Unmarshal(m["participants"], &ps); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		for _, k := range []string{"name", "epoch", "vote", "voted_at", "committables", "acked_at"} {
			if _, ok := p[k]; !ok {
				t.Errorf("participant without %q: %v", k, p)
			}
		}
	}
}

// names returns n distinct participant names as a JSON array.
func names(n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("p%d", i)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// base64Text is a cursor-like text: base64url without padding.
func base64Text(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
