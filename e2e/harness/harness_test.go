package harness_test

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// TestCluster checks that a committed row survives a crash of the cluster.
func TestCluster(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	url := cluster.NewDatabase(t)
	ctx := context.Background()
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE TABLE t (v int); INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	cluster.Crash()
	if cluster.Running() {
		t.Fatal("running after Crash")
	}
	if err := exec("SELECT 1"); err == nil {
		t.Fatal("a crashed cluster answered")
	}
	cluster.Start()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t WHERE v = 2").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after crash recovery: %d rows, %v", n, err)
	}
	var mpt string
	if err := conn.QueryRow(ctx, "SHOW max_prepared_transactions").Scan(&mpt); err != nil || mpt != "64" {
		t.Fatalf("max_prepared_transactions = %q, %v", mpt, err)
	}
	for _, sql := range []string{"BEGIN", "INSERT INTO t VALUES (3)", "PREPARE TRANSACTION 'e2e-1'", "COMMIT PREPARED 'e2e-1'"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	cluster.Stop()
	cluster.Start()
}

// TestCoordinatorProcess checks start, SIGKILL, restart on the same address and a graceful
// stop with status 0.
func TestCoordinatorProcess(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	coord := harness.StartCoordinator(t, cluster.NewDatabase(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	healthy := func() {
		t.Helper()
		resp, err := coord.Client.GetReadyzWithResponse(ctx)
		if err != nil || resp.StatusCode() != http.StatusOK {
			t.Fatalf("readyz: %v %v", resp, err)
		}
	}
	healthy()
	addr := coord.BaseURL
	coord.Kill()
	if coord.Running() {
		t.Fatal("running after Kill")
	}
	if _, err := coord.Client.GetHealthzWithResponse(ctx); err == nil {
		t.Fatal("a killed coordinator answered")
	}
	coord.Restart()
	if coord.BaseURL != addr || coord.Starts() != 2 {
		t.Fatalf("restarted on %s (start %d), want %s", coord.BaseURL, coord.Starts(), addr)
	}
	healthy()
	coord.Restart() // kills the running process first
	healthy()
	coord.Stop()
	if coord.ListeningAt().IsZero() {
		t.Error("no listening time")
	}
}
