package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// The history TestRetentionSurvivesSIGKILL writes by SQL, ids in this order.
const (
	retOld       = 50000                            // committed an hour ago, acked: expired, deleted
	retOwed      = 20                               // aborted an hour ago, a prepared vote not acked: owed, kept
	retRecent    = 100                              // committed just now: not expired, kept
	retLast      = retOld + retOwed + retRecent + 1 // committed an hour ago, the last committed: kept
	retSurvivors = retOwed + retRecent + 1
	// retKeyEvery: checkpoints whose id is a multiple of it have an Idempotency-Key, and so
	// has the last one.
	retKeyEvery = 5
	// retRetention is the job's retention_ms. Not 1000: the retRecent checkpoints completed
	// "just now" must outlive the whole test (~10 s), so that they tell a deletion of what
	// has not expired; an hour-old completion is expired under either.
	retRetention = 10 * time.Minute
)

// TestRetentionSurvivesSIGKILL kills a coordinator (SIGKILL) in the middle of its start-up
// retention pass over 50,000 expired checkpoints, and checks that what retention must keep
// (the owed aborted checkpoints, the last committed one, those not expired) is all there
// with its votes, and that nothing is left half deleted: no vote or Idempotency-Key of a
// deleted checkpoint (each batch deletes them in the same statement). Then a restarted
// coordinator finishes the job, deleted ids answer 410 gone, and ids are never reused.
func TestRetentionSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The job and its participant, through a coordinator, which then goes away: the
	// history below is written while no coordinator runs (none can delete any of it early).
	first := harness.StartCoordinator(t, dbURL)
	a := newAPI(first)
	a.mustDo(t, "PUT", jobPath("hist"), fmt.Sprintf(`{"participants":["a"],"retention_ms":%d}`, retRetention.Milliseconds()), http.StatusCreated, nil)
	epoch := a.register(t, "hist", "a").Epoch
	first.Kill()

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	started := time.Now()
	retentionInsertHistory(t, ctx, conn, epoch)
	t.Logf("wrote %d checkpoints by SQL in %s", retLast, time.Since(started).Round(time.Millisecond))
	total := retentionCount(t, ctx, conn)
	if total != retLast {
		t.Fatalf("%d checkpoints after the inserts, want %d", total, retLast)
	}
	retentionCheck(t, ctx, conn, "before any deletion")

	// A coordinator starts: its retention pass runs at once (before it even listens).
	// Kill it once it deleted 1,000 or more, before it is done.
	c := harness.LaunchCoordinator(t, "127.0.0.1:"+strconv.Itoa(harness.FreePort(t)), dbURL)
	launched := time.Now()
	var before int64
	polls := 0
	for {
		polls++
		n := retentionCount(t, ctx, conn)
		if n <= total-1000 {
			if n <= retSurvivors {
				c.Kill()
				t.Fatalf("the pass deleted everything (%d left) before the test saw it mid-way after %d polls: it cannot test a kill mid-pass", n, polls)
			}
			c.Kill()
			before = n
			break
		}
		if time.Since(launched) > 30*time.Second {
			t.Fatalf("retention deleted %d of %d expired checkpoints in 30 s", total-n, retOld)
		}
		select {
		case <-c.Exited():
			t.Fatalf("the coordinator exited by itself:\n%s", c.Logs())
		default:
		}
		time.Sleep(3 * time.Millisecond)
	}
	killedAfter := time.Since(launched)
	after := retentionCount(t, ctx, conn)
	t.Logf("SIGKILL %s after the launch (%d polls): %d checkpoints seen before the kill, %d right after (deleted %d of %d expired; %d %% 500 = %d)",
		killedAfter.Round(time.Millisecond), polls, before, after, total-after, retOld, total-after, (total-after)%500)
	if after <= retSurvivors {
		t.Fatalf("%d checkpoints left after the kill: the pass had ended", after)
	}
	retentionCheck(t, ctx, conn, "right after SIGKILL")
	// A statement in flight when the process died may still end (the server runs it to its
	// end): once it has, the same again.
	time.Sleep(300 * time.Millisecond)
	settled := retentionCount(t, ctx, conn)
	var lowest int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(min(id), 0) FROM checkpoints WHERE job = 'hist' AND id <= $1", retOld).Scan(&lowest); err != nil {
		t.Fatal(err)
	}
	t.Logf("300 ms after the kill: %d checkpoints (deleted %d, %d %% 500 = %d); lowest old id left %d",
		settled, total-settled, total-settled, (total-settled)%500, lowest)
	retentionCheck(t, ctx, conn, "300 ms after SIGKILL")

	// A new process finishes the job.
	c.Restart()
	restarted := time.Now()
	for {
		n := retentionCount(t, ctx, conn)
		if n == retSurvivors {
			break
		}
		if n < retSurvivors {
			t.Fatalf("%d checkpoints left, fewer than the %d that must stay", n, retSurvivors)
		}
		// Deletion pauses four times as long as each batch took, so on a machine busy with
		// other tests it goes at a fraction of its idle rate (about 1,200 a second seen,
		// 40 s for what is left): the bound is for a deletion that stopped, not a slow one.
		if time.Since(restarted) > 90*time.Second {
			t.Fatalf("90 s after the restart, %d checkpoints left, want %d", n, retSurvivors)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the restarted coordinator deleted the rest within %s", time.Since(restarted).Round(time.Millisecond))
	retentionCheck(t, ctx, conn, "after the restart")
	var oldLeft, keysLeft, votesLeft int
	if err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM checkpoints WHERE job = 'hist' AND id <= $1),
		(SELECT count(*) FROM idempotency_keys WHERE job = 'hist' AND checkpoint_id <= $1),
		(SELECT count(*) FROM checkpoint_participants WHERE job = 'hist' AND checkpoint_id <= $1)`, retOld).Scan(&oldLeft, &keysLeft, &votesLeft); err != nil {
		t.Fatal(err)
	}
	if oldLeft != 0 || keysLeft != 0 || votesLeft != 0 {
		t.Errorf("of the expired history, %d checkpoints, %d keys and %d votes left, want none", oldLeft, keysLeft, votesLeft)
	}

	// Over HTTP: deleted ids are gone, kept ones read, the job's restore point is the last
	// committed one, and the next checkpoint gets the next id, not a freed one.
	b := newAPI(c)
	for _, id := range []int64{1, retKeyEvery, retOld / 2, retOld} {
		p := b.mustProblem(t, request{method: "GET", path: cpPath("hist", id)}, http.StatusGone, "gone")
		if id == 1 {
			t.Logf("GET checkpoint 1: 410 %s: %s", p.Code, p.Detail)
		}
	}
	b.mustProblem(t, request{method: "PUT", path: ackPath("hist", 1, "a"), body: ackBody(epoch)}, http.StatusGone, "gone")
	if cp := b.get(t, "hist", retOld+1); cp.Status != "aborted" || participant(cp, "a") == nil || participant(cp, "a").AckedAt != nil {
		t.Errorf("owed checkpoint %d: %+v", retOld+1, cp)
	}
	if cp := b.get(t, "hist", retLast); cp.Status != "committed" {
		t.Errorf("last committed checkpoint %d: status %s", retLast, cp.Status)
	}
	if j := b.getJob(t, "hist"); j.LastCommitted == nil || *j.LastCommitted != retLast || j.LastCheckpoint == nil || *j.LastCheckpoint != retLast {
		t.Errorf("job: last_committed %v, last_checkpoint %v, want %d", j.LastCommitted, j.LastCheckpoint, retLast)
	}
	if cp := b.prepare(t, "hist", `{}`); cp.Id != retLast+1 {
		t.Errorf("next checkpoint got id %d, want %d (seq+1)", cp.Id, retLast+1)
	}
}

// retentionInsertHistory writes job hist's history, as TestRetentionByTwoCoordinators
// does, and makes the job's seq its highest id.
func retentionInsertHistory(t *testing.T, ctx context.Context, conn *pgx.Conn, epoch int64) {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Old: committed an hour ago (the lowest id completed first), acked.
	exec(`WITH c AS (INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at, decision_cause)
			SELECT 'hist', g, 'committed', true, t - interval '1 second', t + interval '1 minute', t, t, 'all_prepared'
			FROM (SELECT g, now() - interval '1 hour' - ($1 - g) * interval '1 millisecond' AS t FROM generate_series(1, $1::bigint) g) s
			RETURNING id, completed_at)
		INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant, epoch, vote, committables, voted_at, acked_at, acked_by)
			SELECT 'hist', id, 1, 'a', $2, 'prepared', '[{"txn":' || id || '}]', completed_at, completed_at, 'a' FROM c`, retOld, epoch)
	// Owed: aborted an hour ago, a's prepared vote not acked (its rollback is owed).
	exec(`WITH c AS (INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at, abort_reason, decision_cause)
			SELECT 'hist', g, 'aborted', true, now() - interval '1 hour', now() - interval '59 minutes', now() - interval '1 hour', now() - interval '1 hour',
				'deadline passed', 'deadline'
			FROM generate_series($1::bigint + 1, $1::bigint + $2) g RETURNING id)
		INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant, epoch, vote, committables, voted_at)
			SELECT 'hist', id, 1, 'a', $3, 'prepared', '[{"txn":' || id || '}]', now() - interval '1 hour' FROM c`, retOld, retOwed, epoch)
	// Recent: committed just now, acked.
	exec(`WITH c AS (INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at, decision_cause)
			SELECT 'hist', g, 'committed', true, now(), now() + interval '1 minute', now(), now(), 'all_prepared'
			FROM generate_series($1::bigint + 1, $1::bigint + $2) g RETURNING id)
		INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant, epoch, vote, committables, voted_at, acked_at, acked_by)
			SELECT 'hist', id, 1, 'a', $3, 'prepared', '[]', now(), now(), 'a' FROM c`, retOld+retOwed, retRecent, epoch)
	// Last: committed an hour ago (expired), but the job's last committed checkpoint.
	exec(`INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at, decision_cause)
			VALUES ('hist', $1, 'committed', true, now() - interval '1 hour', now(), now() - interval '1 hour', now() - interval '1 hour', 'all_prepared')`, retLast)
	exec(`INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant, epoch, vote, committables, voted_at, acked_at, acked_by)
			VALUES ('hist', $1, 1, 'a', $2, 'prepared', '[{"txn":"last"}]', now() - interval '1 hour', now() - interval '1 hour', 'a')`, retLast, epoch)
	// Idempotency-Keys of some of every kind.
	exec(`INSERT INTO idempotency_keys (job, key, fingerprint, checkpoint_id)
			SELECT 'hist', 'key-' || g, 'fp-' || g, g FROM generate_series(1, $1::bigint) g WHERE g % $2 = 0 OR g = $1`, retLast, retKeyEvery)
	exec("UPDATE jobs SET seq = $1, version = version + 1 WHERE name = 'hist'", retLast)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE checkpoints, checkpoint_participants, idempotency_keys"); err != nil {
		t.Fatal(err)
	}
}

func retentionCount(t *testing.T, ctx context.Context, conn *pgx.Conn) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM checkpoints WHERE job = 'hist'").Scan(&n); err != nil {
		t.Fatalf("count checkpoints: %v", err)
	}
	return n
}

// retentionCheck checks, in one snapshot, what must hold whenever retention ran or was
// killed: every checkpoint that must stay is there with its vote and its key, and no vote
// or key of a deleted checkpoint is left. Of the expired history, each checkpoint left
// has its vote and, when it had one, its key.
func retentionCheck(t *testing.T, ctx context.Context, conn *pgx.Conn, when string) {
	t.Helper()
	var (
		owed, owedVotes, owedKeys       int
		recent, recentVotes, recentKeys int
		last, lastVotes, lastKeys       int
		orphanVotes, orphanKeys         int
		old, oldVotes, oldKeys, oldKeyd int
	)
	err := conn.QueryRow(ctx, `
		WITH o AS (SELECT c.id FROM checkpoints c WHERE c.job = 'hist' AND c.id BETWEEN $1 + 1 AND $1 + $2 AND c.status = 'aborted'),
		r AS (SELECT c.id FROM checkpoints c WHERE c.job = 'hist' AND c.id BETWEEN $1 + $2 + 1 AND $1 + $2 + $3 AND c.status = 'committed'),
		l AS (SELECT c.id FROM checkpoints c WHERE c.job = 'hist' AND c.id = $4 AND c.status = 'committed'),
		d AS (SELECT c.id FROM checkpoints c WHERE c.job = 'hist' AND c.id <= $1)
		SELECT
			(SELECT count(*) FROM o),
			(SELECT count(*) FROM o JOIN checkpoint_participants p ON p.job = 'hist' AND p.checkpoint_id = o.id
				WHERE p.participant = 'a' AND p.vote = 'prepared' AND p.acked_at IS NULL),
			(SELECT count(*) FROM o JOIN idempotency_keys k ON k.job = 'hist' AND k.checkpoint_id = o.id),
			(SELECT count(*) FROM r),
			(SELECT count(*) FROM r JOIN checkpoint_participants p ON p.job = 'hist' AND p.checkpoint_id = r.id
				WHERE p.participant = 'a' AND p.vote = 'prepared' AND p.acked_at IS NOT NULL),
			(SELECT count(*) FROM r JOIN idempotency_keys k ON k.job = 'hist' AND k.checkpoint_id = r.id),
			(SELECT count(*) FROM l),
			(SELECT count(*) FROM l JOIN checkpoint_participants p ON p.job = 'hist' AND p.checkpoint_id = l.id
				WHERE p.participant = 'a' AND p.vote = 'prepared' AND p.committables = '[{"txn":"last"}]'),
			(SELECT count(*) FROM l JOIN idempotency_keys k ON k.job = 'hist' AND k.checkpoint_id = l.id),
			(SELECT count(*) FROM checkpoint_participants p WHERE NOT EXISTS (
				SELECT 1 FROM checkpoints c WHERE c.job = p.job AND c.id = p.checkpoint_id)),
			(SELECT count(*) FROM idempotency_keys k WHERE NOT EXISTS (
				SELECT 1 FROM checkpoints c WHERE c.job = k.job AND c.id = k.checkpoint_id)),
			(SELECT count(*) FROM d),
			(SELECT count(*) FROM d JOIN checkpoint_participants p ON p.job = 'hist' AND p.checkpoint_id = d.id),
			(SELECT count(*) FROM d JOIN idempotency_keys k ON k.job = 'hist' AND k.checkpoint_id = d.id),
			(SELECT count(*) FROM d WHERE d.id % $5 = 0)`,
		retOld, retOwed, retRecent, retLast, retKeyEvery).Scan(
		&owed, &owedVotes, &owedKeys, &recent, &recentVotes, &recentKeys, &last, &lastVotes, &lastKeys,
		&orphanVotes, &orphanKeys, &old, &oldVotes, &oldKeys, &oldKeyd)
	if err != nil {
		t.Fatalf("%s: check: %v", when, err)
	}
	keysOf := func(lo, hi int) int { return hi/retKeyEvery - (lo-1)/retKeyEvery } // multiples in [lo, hi]
	check := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %s: %d, want %d", when, what, got, want)
		}
	}
	check("owed aborted checkpoints", owed, retOwed)
	check("their unacked prepared votes", owedVotes, retOwed)
	check("their keys", owedKeys, keysOf(retOld+1, retOld+retOwed))
	check("recent committed checkpoints", recent, retRecent)
	check("their acked votes", recentVotes, retRecent)
	check("their keys", recentKeys, keysOf(retOld+retOwed+1, retOld+retOwed+retRecent))
	check("last committed checkpoint", last, 1)
	check("its vote", lastVotes, 1)
	check("its key", lastKeys, 1)
	check("votes of deleted checkpoints", orphanVotes, 0)
	check("keys of deleted checkpoints", orphanKeys, 0)
	check("votes of the expired checkpoints left", oldVotes, old)
	check("keys of the expired checkpoints left", oldKeys, oldKeyd)
}

// TestLastCheckpointOutlivesRetention: when retention deletes a job's highest checkpoint
// (an aborted one that owed nothing), the job still shows it as its last checkpoint, in
// its view and in the list of jobs, and the next checkpoint gets the next id. Through the
// binary: a second coordinator's start-up pass deletes it.
func TestLastCheckpointOutlivesRetention(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	first := harness.StartCoordinator(t, dbURL)
	a := newAPI(first)
	a.mustDo(t, "PUT", jobPath("short"), `{"participants":["a"],"retention_ms":1000}`, http.StatusCreated, nil)
	epoch := a.register(t, "short", "a").Epoch
	a.prepare(t, "short", `{}`) // 1: committed, the last committed: kept
	a.vote(t, "short", 1, "a", epoch, `["t1"]`)
	a.ack(t, "short", 1, "a", epoch)
	a.prepare(t, "short", `{}`) // 2: aborted with no prepared vote: deleted once expired
	a.mustDo(t, "PUT", votePath("short", 2, "a"), abortVoteBody(epoch, "no"), http.StatusOK, nil)
	time.Sleep(1100 * time.Millisecond) // 2 expires

	second := harness.StartCoordinator(t, dbURL) // its first retention pass runs at start-up
	b := newAPI(second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := b.do(context.Background(), "GET", cpPath("short", 2), "")
		if err != nil {
			t.Fatal(err)
		}
		if r.status == http.StatusGone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint 2 not deleted by retention within 30 s: %d", r.status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []*api{a, b} {
		if j := c.getJob(t, "short"); j.LastCheckpoint == nil || *j.LastCheckpoint != 2 || j.LastCommitted == nil || *j.LastCommitted != 1 {
			t.Errorf("the job after retention deleted checkpoint 2: last_checkpoint %v, last_committed %v; want 2, 1", j.LastCheckpoint, j.LastCommitted)
		}
		var list struct{ Items []job }
		c.mustDo(t, "GET", "/v1/jobs", "", http.StatusOK, &list)
		if len(list.Items) != 1 || list.Items[0].LastCheckpoint == nil || *list.Items[0].LastCheckpoint != 2 {
			t.Errorf("the list of jobs after retention: %+v; want short with last_checkpoint 2", list.Items)
		}
	}
	if cp := b.prepare(t, "short", `{}`); cp.Id != 3 {
		t.Errorf("the checkpoint opened after retention deleted 2: id %d, want 3", cp.Id)
	}
}
