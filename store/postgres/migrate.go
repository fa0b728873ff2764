package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twophase/coordinator/migrations"
)

// SchemaVersion is the migration version this build expects: the highest one embedded.
var SchemaVersion = latestVersion()

func latestVersion() uint {
	entries, err := fs.ReadDir(migrations.Postgres, "postgres")
	if err != nil {
		panic(err)
	}
	var latest uint
	for _, e := range entries {
		n, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(n, 10, 32); err == nil && uint(v) > latest {
			latest = uint(v)
		}
	}
	return latest
}

func newMigrate(databaseURL string) (*migrate.Migrate, error) {
	src, err := iofs.New(migrations.Postgres, "postgres")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	u, err := newMigrateURL(databaseURL)
	if err != nil {
		return nil, err
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, u)
	if err != nil {
		if missing := missingSchema(databaseURL); missing != nil {
			return nil, missing
		}
		return nil, fmt.Errorf("connect for migrations: %w", err)
	}
	return m, nil
}

// missingSchema explains the failure of a database whose search_path names no schema that
// exists (golang-migrate only says that CURRENT_SCHEMA() is NULL): which schema to create.
// nil when that is not the cause, or the database cannot be asked.
func missingSchema(databaseURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil
	}
	defer conn.Close(context.Background())
	var schema *string
	var searchPath, database string
	if err := conn.QueryRow(ctx, "SELECT current_schema(), current_setting('search_path'), current_database()").
		Scan(&schema, &searchPath, &database); err != nil || schema != nil {
		return nil
	}
	first := strings.Trim(strings.TrimSpace(strings.Split(searchPath, ",")[0]), `"`)
	return fmt.Errorf("no schema of the search_path %q exists in database %s: create it first (CREATE SCHEMA %s;), "+
		"or give a search_path that names a schema that exists", searchPath, database, pgx.Identifier{first}.Sanitize())
}

// newMigrateURL is golang-migrate's URL for a postgres:// one.
func newMigrateURL(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("database URL must be a postgres:// URL")
	}
	u.Scheme = "pgx5"
	return u.String(), nil
}

func closeMigrate(m *migrate.Migrate, err error) error {
	srcErr, dbErr := m.Close()
	return errors.Join(err, srcErr, dbErr)
}

// MigrateUp applies every pending migration. Several processes may call it at once:
// golang-migrate serialises them with an advisory lock.
func MigrateUp(databaseURL string) error {
	m, err := newMigrate(databaseURL)
	if err != nil {
		return err
	}
	err = m.Up()
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	return closeMigrate(m, err)
}

// MigrateDown reverts every migration: it drops all the coordinator's tables and data,
// golang-migrate's own record of the version (schema_migrations) last, in the schema the
// URL's search_path names (nothing else of a shared database).
func MigrateDown(databaseURL string) error {
	m, err := newMigrate(databaseURL)
	if err != nil {
		return err
	}
	err = m.Down()
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if err = closeMigrate(m, err); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("drop schema_migrations: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS schema_migrations"); err != nil {
		return fmt.Errorf("drop schema_migrations: %w", err)
	}
	return nil
}

// MigrationVersion reports the schema's current version (0 when none is applied) and
// whether a migration failed half-way (dirty). It only reads: on a database never migrated,
// it creates nothing.
func MigrationVersion(databaseURL string) (version uint, dirty bool, err error) {
	if _, err := newMigrateURL(databaseURL); err != nil {
		return 0, false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, false, translate(fmt.Errorf("connect: %w", err))
	}
	defer conn.Close(context.Background())
	var v int64
	err = conn.QueryRow(ctx, schemaVersionSQL).Scan(&v, &dirty)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == "42P01": // no version, no table
		return 0, false, nil
	case err != nil:
		return 0, false, translate(err)
	case v < 0:
		return 0, dirty, nil
	}
	return uint(v), dirty, nil
}
