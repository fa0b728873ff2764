package harness_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twophase/coordinator/e2e/harness"
)

// TestPGProxy checks that the proxy passes connections through (queries, LISTEN/NOTIFY),
// that an armed proxy loses the answer to exactly the COMMIT it was armed for, pipelined
// with its writes (extended protocol) or sent as one simple query, after the server
// committed it, and that every other connection goes on unharmed.
func TestPGProxy(t *testing.T) {
	t.Parallel()
	cluster := harness.StartCluster(t)
	direct := cluster.NewDatabase(t)
	proxy := harness.StartPGProxy(t, fmt.Sprintf("127.0.0.1:%d", cluster.Port()))
	viaProxy := proxy.URL(direct)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(url string) *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	db := connect(direct)
	if _, err := db.Exec(ctx, "CREATE TABLE t (v int); CREATE TABLE u (v int)"); err != nil {
		t.Fatal(err)
	}
	count := func(table string, v int) int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE v = $1", v).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	listener := connect(viaProxy)
	if _, err := listener.Exec(ctx, "LISTEN e2e"); err != nil {
		t.Fatal(err)
	}
	notified := func(payload string) {
		t.Helper()
		if _, err := db.Exec(ctx, "SELECT pg_notify('e2e', $1)", payload); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		n, err := listener.WaitForNotification(wctx)
		if err != nil || n.Payload != payload {
			t.Fatalf("LISTEN through the proxy: %v %v, want payload %q", n, err, payload)
		}
	}
	notified("before")

	insertT := regexp.MustCompile(`(?i)INSERT\s+INTO\s+t\b`)
	pipelined := func(conn *pgx.Conn, table string, v int) error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue("INSERT INTO "+table+" (v) VALUES ($1)", v)
		b.Queue("COMMIT")
		return conn.SendBatch(ctx, b).Close()
	}

	// Armed for t, a transaction on u passes; then one on t is cut.
	writer := connect(viaProxy)
	proxy.ArmCommitLoss(insertT, 1)
	if err := pipelined(writer, "u", 1); err != nil {
		t.Fatalf("a transaction the proxy was not armed for: %v", err)
	}
	err := pipelined(writer, "t", 1)
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) {
		t.Fatalf("the armed COMMIT: %v, want a broken connection", err)
	}
	cuts := proxy.Cuts()
	if len(cuts) != 1 || !cuts[0].ServerAnswered || cuts[0].Matches != 1 {
		t.Fatalf("cuts %+v, want one, answered by the server", cuts)
	}
	if n := count("t", 1); n != 1 {
		t.Errorf("the cut transaction: %d rows, want 1 (the server committed it)", n)
	}
	if proxy.Disarm() {
		t.Error("still armed after firing")
	}
	// Not armed: nothing is cut.
	if err := pipelined(connect(viaProxy), "t", 2); err != nil || count("t", 2) != 1 {
		t.Errorf("after the cut: %v", err)
	}

	// A simple query holding the whole transaction.
	simple := connect(viaProxy)
	proxy.ArmCommitLoss(insertT, 1)
	if _, err := simple.Exec(ctx, "BEGIN; INSERT INTO t (v) VALUES (3); COMMIT"); err == nil || errors.As(err, &pgErr) {
		t.Fatalf("the armed simple query: %v, want a broken connection", err)
	}
	if n := count("t", 3); n != 1 || len(proxy.Cuts()) != 2 {
		t.Errorf("the cut simple query: %d rows, cuts %+v", n, proxy.Cuts())
	}

	// At least two matching statements: a transaction with one passes.
	proxy.ArmCommitLoss(insertT, 2)
	if err := pipelined(connect(viaProxy), "t", 4); err != nil {
		t.Errorf("one insert, armed for two: %v", err)
	}
	two := connect(viaProxy)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("INSERT INTO t (v) VALUES ($1)", 5)
	b.Queue("INSERT INTO t (v) VALUES ($1)", 5)
	b.Queue("COMMIT")
	if err := two.SendBatch(ctx, b).Close(); err == nil || count("t", 5) != 2 {
		t.Errorf("two inserts, armed for two: %v, %d rows", err, count("t", 5))
	}

	notified("after") // the LISTEN connection was not touched
	if accepted, _ := proxy.Connections(); accepted < 6 {
		t.Errorf("%d connections through the proxy", accepted)
	}
}
