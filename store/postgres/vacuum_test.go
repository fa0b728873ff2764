package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// The coordinator tells its operator when PostgreSQL will not vacuum its tables: the
// server's autovacuum off, or a table's.
func TestVacuumWarnings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var server string
	if err := conn.QueryRow(ctx, "SHOW autovacuum").Scan(&server); err != nil {
		t.Fatal(err)
	}
	warned := func(what string) bool {
		t.Helper()
		ws, err := st.VacuumWarnings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if strings.Contains(w, what) {
				return true
			}
		}
		return false
	}
	if got, want := warned("autovacuum is off on this PostgreSQL server"), server != "on"; got != want {
		t.Fatalf("server autovacuum %q: warned %v", server, got)
	}
	if warned("checkpoints") {
		t.Fatal("a table warned about while its autovacuum is on")
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE checkpoint_participants SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	if !warned("for the table(s) checkpoint_participants ") {
		t.Fatal("no warning for a table with autovacuum_enabled = false")
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE checkpoint_participants RESET (autovacuum_enabled)"); err != nil {
		t.Fatal(err)
	}
	if warned("for the table(s)") {
		t.Fatal("a warning for a table after its autovacuum_enabled was reset")
	}
}
