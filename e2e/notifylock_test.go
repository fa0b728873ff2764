package e2e_test

import (
	"context"
	"fmt"
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
	eventually(t, 30*time.Second, func() error {
		return countIs(ctx, admin, 1, "the holder's commit waiting for the standby",
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'", holderPID)
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
	eventually(t, 30*time.Second, func() error {
		return countIs(ctx, admin, 1, "the vote's COMMIT waiting for the notification lock",
			"SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' AND query = 'COMMIT'", dbName)
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

// countIs returns nil if query's count is want, else an error naming what.
func countIs(ctx context.Context, conn *pgx.Conn, want int, what, query string, args ...any) error {
	var n int
	if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n != want {
		return fmt.Errorf("%s: %d, want %d", what, n, want)
	}
	return nil
}
