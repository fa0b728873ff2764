package e2e_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/e2e/harness"
)

// Caps of the --database-wait tests: generous, since they only bound a test that hangs.
const (
	waitLineCap = 30 * time.Second // for a log line of the coordinator
	exitCap     = 60 * time.Second // for the coordinator to exit on its own
)

// twoFreePorts returns two different free ports of 127.0.0.1: one for the database, one
// for the coordinator's --listen.
func twoFreePorts(t *testing.T) (int, int) {
	t.Helper()
	a := harness.FreePort(t)
	for range 100 {
		if b := harness.FreePort(t); b != a {
			return a, b
		}
	}
	t.Fatalf("no second free port")
	return 0, 0
}

// waitForLog waits until the coordinator has logged a line containing s.
func waitForLog(t *testing.T, c *harness.Coordinator, s string) {
	t.Helper()
	deadline := time.Now().Add(waitLineCap)
	for !strings.Contains(c.Logs(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within %s", s, waitLineCap)
		}
		select {
		case <-c.Exited():
			t.Fatalf("the coordinator exited before logging %q", s)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logIndex is where the first line containing s is in logs, or -1.
func logIndex(logs, s string) int { return strings.Index(logs, s) }

// TestDatabaseWaitForCluster: a coordinator started with --database-wait before its
// database waits, without serving, and serves once the database comes up on the port it
// was given, as under docker compose.
func TestDatabaseWaitForCluster(t *testing.T) {
	t.Parallel()
	pgPort, httpPort := twoFreePorts(t)
	listen := fmt.Sprintf("127.0.0.1:%d", httpPort)
	dbURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pgPort)

	coord := harness.LaunchCoordinator(t, listen, dbURL, "--database-wait", "30s")
	waitForLog(t, coord, `"msg":"waiting for the database to answer"`)

	// Waiting: running, not listening, so not ready.
	if !coord.Running() {
		t.Fatal("the coordinator exited while it should wait")
	}
	if conn, err := net.DialTimeout("tcp", listen, 5*time.Second); err == nil {
		conn.Close()
		t.Fatalf("the coordinator accepts connections on %s before its database answers", listen)
	}
	if strings.Contains(coord.Logs(), `"msg":"listening"`) {
		t.Fatal(`a "listening" line before the database answered`)
	}

	cluster := harness.StartClusterOnPort(t, pgPort)
	if cluster.Port() != pgPort {
		t.Fatalf("cluster on port %d, want %d", cluster.Port(), pgPort)
	}
	coord.WaitListening(60 * time.Second)

	a := newAPI(coord)
	a.mustDo(t, "GET", "/readyz", "", 200, nil)
	var j job
	a.mustDo(t, "PUT", "/v1/jobs/after-wait", `{"participants":["sink-a"]}`, 201, &j)
	a.mustDo(t, "GET", "/v1/jobs/after-wait", "", 200, &j)

	logs := coord.Logs()
	waiting, answered, listening := logIndex(logs, `"msg":"waiting for the database to answer"`),
		logIndex(logs, `"msg":"database answered"`), logIndex(logs, `"msg":"listening"`)
	if !(waiting >= 0 && waiting < answered && answered < listening) {
		t.Errorf("log lines out of order (waiting at %d, answered at %d, listening at %d)", waiting, answered, listening)
	}
	coord.Stop()
}

// TestDatabaseWaitGivesUp: with no database, the coordinator exits 1 once --database-wait
// is over, saying so, and never listens.
func TestDatabaseWaitGivesUp(t *testing.T) {
	t.Parallel()
	pgPort, httpPort := twoFreePorts(t)
	listen := fmt.Sprintf("127.0.0.1:%d", httpPort)
	dbURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pgPort)

	coord := harness.LaunchCoordinator(t, listen, dbURL, "--database-wait", "1s")
	select {
	case <-coord.Exited():
	case <-time.After(exitCap):
		t.Fatalf("the coordinator still runs %s after a --database-wait of 1s", exitCap)
	}
	if code, _ := coord.ExitCode(); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	logs := coord.Logs()
	waiting, failed := logIndex(logs, `"msg":"waiting for the database to answer"`),
		logIndex(logs, "the database did not answer within --database-wait 1s")
	if waiting < 0 || failed < waiting {
		t.Errorf("want a line that it waits, then one that the wait is over (at %d and %d)", waiting, failed)
	}
	if strings.Contains(logs, `"msg":"listening"`) {
		t.Error("listened without a database")
	}
}

// TestDatabaseWaitStopped: SIGTERM while waiting for the database is a clean stop (exit 0,
// checked by Stop), long before the wait is over.
func TestDatabaseWaitStopped(t *testing.T) {
	t.Parallel()
	pgPort, httpPort := twoFreePorts(t)
	listen := fmt.Sprintf("127.0.0.1:%d", httpPort)
	dbURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pgPort)

	coord := harness.LaunchCoordinator(t, listen, dbURL, "--database-wait", "10m")
	waitForLog(t, coord, `"msg":"waiting for the database to answer"`)
	coord.Stop()
}
