package postgres

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"

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
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("database URL must be a postgres:// URL")
	}
	u.Scheme = "pgx5"
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		return nil, fmt.Errorf("connect for migrations: %w", err)
	}
	return m, nil
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

// MigrateDown reverts every migration: it drops all the coordinator's tables and data.
func MigrateDown(databaseURL string) error {
	m, err := newMigrate(databaseURL)
	if err != nil {
		return err
	}
	err = m.Down()
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	return closeMigrate(m, err)
}

// MigrationVersion reports the schema's current version (0 when none is applied) and
// whether a migration failed half-way (dirty).
func MigrationVersion(databaseURL string) (version uint, dirty bool, err error) {
	m, err := newMigrate(databaseURL)
	if err != nil {
		return 0, false, err
	}
	version, dirty, err = m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		version, dirty, err = 0, false, nil
	}
	return version, dirty, closeMigrate(m, err)
}
