// Package pgtest gives each test its own PostgreSQL database, cloned in milliseconds from a
// template migrated once per test binary (the pattern of pgtestdb). Each test's database is
// dropped when the test ends, and the template when the binary's tests end: a package that
// uses pgtest runs its tests through Main (or calls DropTemplate after them), so that the
// tests leave nothing behind on the server. A template left by a binary that was killed is
// dropped by the next run once it is an hour old.
//
// The server is COORDINATOR_TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable; the user must be allowed to
// create databases. Under go test -short, a test that asks for a database is skipped and
// the server is never contacted; without -short, a server that cannot be reached fails the
// test.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twophase/coordinator/migrations"
	"github.com/twophase/coordinator/store/postgres"
)

// DefaultURL is the server tests use when COORDINATOR_TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL is the admin URL of the test server.
func ServerURL() string {
	if u := os.Getenv("COORDINATOR_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// URL returns the URL of a new database with the current schema, dropped when the test ends.
// Under -short it skips the test (t.Skip) instead.
func URL(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate() })
	if templateErr != nil {
		t.Fatalf("pgtest: prepare template database: %v", templateErr)
	}
	name := "coordtest_" + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := createFromTemplate(ctx, name, templateName); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := admin(ctx, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			return err
		}); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return DatabaseURL(name)
}

// SkipShort skips the test under go test -short, saying that it needs the PostgreSQL test
// server. URL calls it; a test that reaches the server another way calls it first.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		host := "(COORDINATOR_TEST_DATABASE_URL is not a URL)"
		if u, err := neturl.Parse(ServerURL()); err == nil {
			host = u.Host
		}
		t.Skipf("pgtest: needs PostgreSQL (COORDINATOR_TEST_DATABASE_URL, here %s): skipped under -short", host)
	}
}

// DatabaseURL returns the test server's URL with the database replaced by name.
func DatabaseURL(name string) string {
	u, err := neturl.Parse(ServerURL())
	if err != nil {
		panic(fmt.Sprintf("pgtest: COORDINATOR_TEST_DATABASE_URL: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func admin(ctx context.Context, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return fn(conn)
}

// schemaHash names the template after the migrations' contents, so a changed schema gets a
// new template and concurrent test binaries share an unchanged one.
func schemaHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.Postgres, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.Postgres, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

// ensureTemplate creates and migrates this test binary's template, and drops the templates
// that binaries killed before their end left behind (those more than an hour old).
func ensureTemplate() (string, error) {
	hash, err := schemaHash()
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s%s_%d_%d", templatePrefix, hash, time.Now().Unix(), os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = admin(ctx, func(conn *pgx.Conn) error {
		dropStaleTemplates(ctx, conn)
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return err
		}
		if err := postgres.MigrateUp(DatabaseURL(name)); err != nil {
			return fmt.Errorf("migrate template: %w", err)
		}
		_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH is_template true ALLOW_CONNECTIONS false")
		return err
	})
	return name, err
}

// templatePrefix starts the name of every template: prefix, schema hash, creation time
// (Unix seconds), process id.
const templatePrefix = "coordtemplate_"

// staleTemplate is the age past which a template is taken for one a killed run left.
const staleTemplate = time.Hour

// dropStaleTemplates drops templates more than staleTemplate old, by the time in their name.
func dropStaleTemplates(ctx context.Context, conn *pgx.Conn) {
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", templatePrefix+"%")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		var hash string
		var created, pid int64
		if _, err := fmt.Sscanf(strings.ReplaceAll(strings.TrimPrefix(name, templatePrefix), "_", " "), "%s %d %d", &hash, &created, &pid); err == nil &&
			time.Since(time.Unix(created, 0)) < staleTemplate {
			continue
		}
		_ = dropDatabase(ctx, conn, name)
	}
}

func dropDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+id+" WITH is_template false"); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)")
	return err
}

// DropTemplate drops this test binary's template, if it made one. Main calls it after the
// tests; a TestMain of its own calls it after m.Run.
func DropTemplate() {
	templateOnce.Do(func() { templateErr = errors.New("pgtest: the template was dropped") })
	if templateName == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin(ctx, func(conn *pgx.Conn) error { return dropDatabase(ctx, conn, templateName) }); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: drop template %s: %v\n", templateName, err)
	}
}

// Main runs the tests of m and drops the template they used: a package whose tests use
// pgtest has func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	DropTemplate()
	return code
}

func createFromTemplate(ctx context.Context, name, template string) error {
	for attempt := 0; ; attempt++ {
		err := admin(ctx, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
			return err
		})
		var pgErr *pgconn.PgError
		// 55006: the template is being copied by another session at this instant.
		if errors.As(err, &pgErr) && pgErr.Code == "55006" && attempt < 50 {
			time.Sleep(time.Duration(20+attempt*10) * time.Millisecond)
			continue
		}
		return err
	}
}

// SetReadOnlyByDefault makes the transactions of the test database at url read-only by
// default (on), as a standby's are, or writable again, for sessions opened from then on.
func SetReadOnlyByDefault(t testing.TB, url string, on bool) {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin(ctx, func(conn *pgx.Conn) error {
		setting := " SET default_transaction_read_only = on"
		if !on {
			setting = " RESET default_transaction_read_only"
		}
		_, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()+setting)
		return err
	}); err != nil {
		t.Fatalf("pgtest: set the database read-only by default (%v): %v", on, err)
	}
}
