package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite" // modernc.org/sqlite, no cgo
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/twophase/coordinator/migrations"
)

// SchemaVersion is the migration version this build expects: the highest one embedded.
var SchemaVersion = latestVersion()

func latestVersion() uint {
	entries, err := fs.ReadDir(migrations.SQLite, "sqlite")
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

// newMigrate returns a golang-migrate instance on the database at path, with the embedded
// migrations. The caller holds the data directory's lock.
func newMigrate(path string) (*migrate.Migrate, error) {
	src, err := iofs.New(migrations.SQLite, "sqlite")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	db, err := openDB(path, false)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	drv, err := migratesqlite.WithInstance(db, &migratesqlite.Config{})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s for migrations: %w", path, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "sqlite", drv)
	if err != nil {
		drv.Close()
		return nil, fmt.Errorf("open %s for migrations: %w", path, err)
	}
	return m, nil
}

func closeMigrate(m *migrate.Migrate, err error) error {
	srcErr, dbErr := m.Close()
	return errors.Join(err, srcErr, dbErr)
}

func migrateUp(path string) error {
	m, err := newMigrate(path)
	if err != nil {
		return err
	}
	err = m.Up()
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	return closeMigrate(m, err)
}

// MigrateUp applies every pending migration to the database in dataDir, creating the
// directory and the database if needed. It takes the directory's lock for the time it
// runs, so it fails with an *InUseError while a coordinator owns the directory.
func MigrateUp(dataDir string) error {
	dir, lock, err := ownDir(dataDir)
	if err != nil {
		return err
	}
	err = migrateUp(filepath.Join(dir, DatabaseFileName))
	if err == nil {
		err = syncDir(dir)
	}
	return errors.Join(err, lock.release())
}

// MigrateDown reverts every migration: it drops all the coordinator's tables and data,
// golang-migrate's own record of the version (schema_migrations) last. Like MigrateUp it
// takes the directory's lock.
func MigrateDown(dataDir string) error {
	dir, lock, err := ownDir(dataDir)
	if err != nil {
		return err
	}
	err = func() error {
		path := filepath.Join(dir, DatabaseFileName)
		m, err := newMigrate(path)
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
		db, err := openDB(path, false)
		if err != nil {
			return err
		}
		_, err = db.Exec("DROP TABLE IF EXISTS " + migratesqlite.DefaultMigrationsTable)
		return errors.Join(err, db.Close())
	}()
	return errors.Join(err, lock.release())
}

// MigrationVersion reports the schema's current version in dataDir (0 when none is
// applied, or there is no database yet) and whether a migration failed half-way (dirty).
// It only reads: it creates nothing and needs no lock, so it also works while a
// coordinator owns the directory.
func MigrationVersion(dataDir string) (version uint, dirty bool, err error) {
	path, err := filepath.Abs(filepath.Join(dataDir, DatabaseFileName))
	if err != nil {
		return 0, false, err
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	db, err := openDB(path, true)
	if err != nil {
		return 0, false, err
	}
	defer db.Close()
	version, dirty, err = schemaVersion(context.Background(), db)
	if err != nil {
		return 0, false, translate(fmt.Errorf("read schema version of %s: %w", path, err))
	}
	return version, dirty, nil
}

// schemaVersion reads golang-migrate's record of the schema version, 0 if there is none.
func schemaVersion(ctx context.Context, db *sql.DB) (version uint, dirty bool, err error) {
	var tables int
	if err := db.QueryRowContext(ctx, migrationsTableSQL, migratesqlite.DefaultMigrationsTable).Scan(&tables); err != nil {
		return 0, false, err
	}
	if tables == 0 {
		return 0, false, nil
	}
	var v int64
	err = db.QueryRowContext(ctx, schemaVersionSQL(migratesqlite.DefaultMigrationsTable)).Scan(&v, &dirty)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && v < 0) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return uint(v), dirty, nil
}
