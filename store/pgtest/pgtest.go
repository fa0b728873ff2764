// Package pgtest gives each test its own PostgreSQL database, cloned in milliseconds from a
// template that is migrated once per schema version (the pattern of pgtestdb).
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
	"net/url"
	"os"
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
		if u, err := url.Parse(ServerURL()); err == nil {
			host = u.Host
		}
		t.Skipf("pgtest: needs PostgreSQL (COORDINATOR_TEST_DATABASE_URL, here %s): skipped under -short", host)
	}
}

// DatabaseURL returns the test server's URL with the database replaced by name.
func DatabaseURL(name string) string {
	u, err := url.Parse(ServerURL())
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

// ensureTemplate creates and migrates the template once, under an advisory lock so that
// test binaries running side by side do not race.
func ensureTemplate() (string, error) {
	hash, err := schemaHash()
	if err != nil {
		return "", err
	}
	name := "coordtemplate_" + hash
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = admin(ctx, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7243051)"); err != nil {
			return err
		}
		defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(7243051)") //nolint:errcheck
		var ready bool
		err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", name).Scan(&ready)
		if err != nil || ready {
			return err
		}
		// A half-made template from an interrupted run is dropped and made again.
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return err
		}
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
