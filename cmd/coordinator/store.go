package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/internal/cli"
	"github.com/twophase/coordinator/store/postgres"
	"github.com/twophase/coordinator/store/sqlite"
)

// openStore opens the store cfg names: PostgreSQL with a database URL, else the embedded
// store in the data directory. With cfg.migrate it applies pending migrations first. It
// returns the store and log attributes that describe it, with no secret in them. This is
// the one place that chooses a store.
// observeCommit, if not nil, is told the duration of every store commit (metrics).
func openStore(ctx context.Context, cfg config, logger *slog.Logger, observeCommit func(time.Duration)) (coordinator.Store, []any, error) {
	if cfg.databaseURL == "" {
		return openEmbedded(ctx, cfg, logger, observeCommit)
	}
	return openPostgres(ctx, cfg, logger, observeCommit)
}

func openEmbedded(ctx context.Context, cfg config, logger *slog.Logger, observeCommit func(time.Duration)) (coordinator.Store, []any, error) {
	before, _, _ := sqlite.MigrationVersion(cfg.dataDir) // only to say below whether migrations ran
	store, err := sqlite.Open(ctx, cfg.dataDir, sqlite.Options{Logger: logger, Migrate: cfg.migrate, ObserveCommit: observeCommit})
	if errors.Is(err, sqlite.ErrSchemaVersion) {
		return nil, nil, fmt.Errorf("open the embedded store in %s: %w: run 'coordinator migrate up' or start with --migrate=true", cfg.dataDir, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open the embedded store in %s: %w", cfg.dataDir, err)
	}
	if cfg.migrate {
		logMigrated(logger, before, sqlite.SchemaVersion)
	}
	logger.Info("embedded store: one coordinator process per data directory; for several, or for PostgreSQL, pass --database-url postgres://...",
		"data_dir", store.Dir())
	return store, []any{"store", "embedded", "data_dir", store.Dir()}, nil
}

// logMigrated says that migrations ran at start-up, when some did (the schema was at
// version before); a schema already current is worth a debug line only.
func logMigrated(logger *slog.Logger, before, now uint) {
	if before == now {
		logger.Debug("schema current", "version", now)
		return
	}
	logger.Info("schema migrated", "from", before, "to", now)
}

func openPostgres(ctx context.Context, cfg config, logger *slog.Logger, observeCommit func(time.Duration)) (coordinator.Store, []any, error) {
	describe := []any{"store", "postgres", "database", cli.RedactURL(cfg.databaseURL)}
	// --database-wait: the database may start next to the coordinator (docker compose).
	if err := postgresWaiter().wait(ctx, cfg.databaseURL, cfg.databaseWait, logger); err != nil {
		return nil, nil, err
	}
	if cfg.migrate {
		before, _, _ := postgres.MigrationVersion(cfg.databaseURL) // only to say below whether migrations ran
		if err := postgres.MigrateUp(cfg.databaseURL); err != nil {
			return nil, nil, fmt.Errorf("apply migrations: %w", err)
		}
		logMigrated(logger, before, postgres.SchemaVersion)
	} else {
		version, dirty, err := postgres.MigrationVersion(cfg.databaseURL)
		if err != nil {
			return nil, nil, fmt.Errorf("read schema version: %w", err)
		}
		if dirty || version != postgres.SchemaVersion {
			return nil, nil, fmt.Errorf("schema is at version %d%s, this build needs %d: run 'coordinator migrate up' or start with --migrate=true",
				version, dirtyNote(dirty), postgres.SchemaVersion)
		}
	}
	store, err := postgres.Open(ctx, cfg.databaseURL, postgres.Options{
		MaxConns:      int32(cfg.dbMaxConns), // validated to fit
		Writers:       cfg.dbWriters,
		Logger:        logger,
		ObserveCommit: observeCommit,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("open database: %w", err)
	}
	if warnings, err := store.VacuumWarnings(ctx); err != nil {
		logger.Debug("could not tell whether autovacuum runs", "error", err)
	} else {
		for _, w := range warnings {
			logger.Warn(w)
		}
	}
	return store, describe, nil
}

func dirtyNote(dirty bool) string {
	if dirty {
		return " (dirty: a migration failed half-way)"
	}
	return ""
}

// migrator is what "coordinator migrate" needs of a store.
type migrator struct {
	up, down func() error
	version  func() (uint, bool, error)
	needs    uint // the schema version this build needs
}

func migratorFor(cfg config) migrator {
	if cfg.databaseURL == "" {
		dir := cfg.dataDir
		return migrator{
			up:      func() error { return sqlite.MigrateUp(dir) },
			down:    func() error { return sqlite.MigrateDown(dir) },
			version: func() (uint, bool, error) { return sqlite.MigrationVersion(dir) },
			needs:   sqlite.SchemaVersion,
		}
	}
	url := cfg.databaseURL
	return migrator{
		up:      func() error { return postgres.MigrateUp(url) },
		down:    func() error { return postgres.MigrateDown(url) },
		version: func() (uint, bool, error) { return postgres.MigrationVersion(url) },
		needs:   postgres.SchemaVersion,
	}
}

// migrateCommand runs "coordinator migrate up|down|version" on the store cfg names and
// prints the schema version it leaves to w.
func migrateCommand(action string, cfg config, w io.Writer) error {
	m := migratorFor(cfg)
	switch action {
	case "up":
		if err := m.up(); err != nil {
			return fmt.Errorf("migrate up: %w", err)
		}
	case "down":
		if !cfg.yes {
			return usageError(errors.New("migrate down drops every table of the coordinator and all its data: " +
				"run it again with --yes to do so"))
		}
		if err := m.down(); err != nil {
			return fmt.Errorf("migrate down: %w", err)
		}
	}
	version, dirty, err := m.version()
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	fmt.Fprintf(w, "schema version %d%s (this build needs %d)\n", version, dirtyNote(dirty), m.needs)
	return nil
}
