package e2e_test

import (
	"context"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/e2e/harness"
)

// TestADecisionWaitsForTheNotificationLock holds PostgreSQL's notification lock, which the
// COMMIT of every transaction that notifies takes in turn, from a commit of another
// database of the cluster that waits for a synchronous standby that never answers (the
// cluster names one; the coordinator's database commits locally). A vote that decides its
// checkpoint commits with a NOTIFY, so its COMMIT waits for that lock: it must wait, for
// many times the store's 50 ms lock_timeout, and succeed once the lock is released,
// without a single statement cancelled by lock_timeout meanwhile (a cancelled COMMIT runs
// its whole batch again behind the same lock).
func TestADecisionWaitsForTheNotificationLock(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	dbURL := cluster.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	for _, sql := range []string{
		"ALTER DATABASE " + pgx.Identifier{dbName}.Sanitize() + " SET synchronous_commit = local",
		"ALTER SYSTEM SET synchronous_standby_names = 'nobody'",
		"SELECT pg_reload_conf()",
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	coord := harness.StartCoordinator(t, dbURL)
	a, long := newAPI(coord), longAPI(coord)
	epochs := a.setupJob(t, "held", `{"participants":["sink-a"]}`, "sink-a")
	cp := a.prepare(t, "held", "")

	// The holder: a notifying commit stuck waiting for the standby, holding the lock.
	holder, err := pgx.Connect(ctx, cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	// A transaction waits for the standby only if it wrote something; the admin's own
	// writes do not wait for it.
	if _, err := admin.Exec(ctx, "SET synchronous_commit = local; CREATE TABLE held (x int)"); err != nil {
		t.Fatal(err)
	}
	var holderPID int
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	holderDone := make(chan error, 1)
	go func() {
		_, err := holder.Exec(ctx, "BEGIN; INSERT INTO held VALUES (1); SELECT pg_notify('elsewhere', 'held'); COMMIT")
		holderDone <- err
	}()
	pollUntil(t, "the holder's commit to wait for the standby", func() bool {
		var n int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'", holderPID).Scan(&n)
		return err == nil && n == 1
	})

	type answer struct {
		rep      reply
		err      error
		released bool
	}
	var released atomic.Bool
	answers := make(chan answer, 1)
	go func() {
		rep, err := long.send(context.Background(), request{method: "PUT", path: votePath("held", cp.Id, "sink-a"),
			body: voteBody(epochs["sink-a"], `[{"txn":"a"}]`)})
		answers <- answer{rep, err, released.Load()}
	}()
	pollUntil(t, "the vote's COMMIT to wait for the notification lock", func() bool {
		var n int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' AND query = 'COMMIT'", dbName).Scan(&n)
		return err == nil && n == 1
	})
	// Ten times lock_timeout: a COMMIT bound by it would have been cancelled by now.
	time.Sleep(500 * time.Millisecond)
	select {
	case got := <-answers:
		t.Fatalf("the vote was answered while the lock was held: %v %v", got.rep, got.err)
	default:
	}

	// Cancelling the holder's wait for the standby ends its commit (committed locally).
	released.Store(true)
	if _, err := admin.Exec(ctx, "SELECT pg_cancel_backend($1)", holderPID); err != nil {
		t.Fatal(err)
	}
	if err := <-holderDone; err != nil {
		t.Fatalf("the holder's commit: %v", err)
	}
	var got answer
	select {
	case got = <-answers:
	case <-time.After(time.Minute):
		t.Fatal("no answer to the vote a minute after the lock was released")
	}
	if got.err != nil || got.rep.status != 200 {
		t.Fatalf("the vote: %v %v, want 200", got.rep, got.err)
	}
	if !got.released {
		t.Fatal("the vote was answered before the lock was released")
	}
	if cp := a.get(t, "held", cp.Id); cp.Status != "committing" {
		t.Fatalf("the checkpoint after the vote: %s, want committing", cp.Status)
	}
	if log := cluster.Log(); strings.Contains(log, "lock timeout") {
		t.Fatalf("statements were cancelled by lock_timeout while the lock was held:\n%s", log)
	}
}

// pollUntil polls cond every 20 ms until it holds, failing the test after 30 s (a cap that
// only keeps a failing test from hanging).
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
