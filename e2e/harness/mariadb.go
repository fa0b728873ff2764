package harness

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver the MariaDB participant uses
)

// MariaDBServer is the MariaDB server the tests use: 127.0.0.1:3306 as root without a
// password (Debian's mariadb-server, which scripts/test-env installs and starts where it
// is missing), or the DSN in COORDINATOR_TEST_MARIADB (user:password@tcp(host:port)/).
func MariaDBServer() string {
	if dsn := os.Getenv("COORDINATOR_TEST_MARIADB"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// MariaDB creates a database of its own on the MariaDB server for the test, dropped when it
// ends (with whatever XA transactions of it are still prepared rolled back), and returns
// its DSN.
func MariaDB(t testing.TB) string {
	t.Helper()
	skipShort(t, "uses a MariaDB server")
	server := MariaDBServer()
	admin, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		t.Fatalf("harness: MariaDB at %s does not answer (scripts/test-env starts Debian's mariadb-server): %v", server, err)
	}
	name := "tp_" + strings.ToLower(rand.Text()[:12])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("harness: create MariaDB database: %v", err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Prepared XA transactions of the database's sinks hold locks on its tables.
		if rows, err := admin.QueryContext(ctx, "XA RECOVER"); err == nil {
			var xids []string
			for rows.Next() {
				var f, g, b int
				var data []byte
				if rows.Scan(&f, &g, &b, &data) == nil && g <= len(data) && strings.HasPrefix(string(data[:g]), name+".") {
					xids = append(xids, string(data[:g]))
				}
			}
			rows.Close()
			for _, x := range xids {
				_, _ = admin.ExecContext(ctx, "XA ROLLBACK '"+strings.ReplaceAll(x, "'", "''")+"'")
			}
		}
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("harness: drop MariaDB database %s: %v", name, err)
		}
	})
	return fmt.Sprintf("%s%s", server, name)
}
