package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/postgres"
)

// errNoEmbeddedStore is what a command without --database-url gets until the embedded
// store exists.
var errNoEmbeddedStore = usageError(errors.New(
	"no database: pass --database-url postgres://user:password@host:5432/db?sslmode=disable " +
		"(or set COORDINATOR_DATABASE_URL); the embedded store (--data-dir) is not in this build yet"))

// openStore opens the store cfg names, applying pending migrations first when cfg.migrate
// is set. It returns the store and log attributes that describe it, with no secret in
// them. This is the one place that chooses a store.
func openStore(ctx context.Context, cfg config, logger *slog.Logger) (coordinator.Store, []any, error) {
	if cfg.databaseURL == "" {
		// The embedded store plugs in here: open it in cfg.dataDir.
		return nil, nil, errNoEmbeddedStore
	}
	describe := []any{"store", "postgres", "database", redactURL(cfg.databaseURL)}
	if cfg.migrate {
		if err := postgres.MigrateUp(cfg.databaseURL); err != nil {
			return nil, nil, fmt.Errorf("apply migrations: %w", err)
		}
		logger.Info("schema migrated", "version", postgres.SchemaVersion)
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
		MaxConns: int32(cfg.dbMaxConns), // validated to fit
		Logger:   logger,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("open database: %w", err)
	}
	return store, describe, nil
}

func dirtyNote(dirty bool) string {
	if dirty {
		return " (dirty: a migration failed half-way)"
	}
	return ""
}

// migrateCommand runs "coordinator migrate up|down|version" and prints the outcome to w.
func migrateCommand(action string, cfg config, w io.Writer) error {
	if cfg.databaseURL == "" {
		// The embedded store's migrations plug in here.
		return errNoEmbeddedStore
	}
	url := cfg.databaseURL
	switch action {
	case "up":
		if err := postgres.MigrateUp(url); err != nil {
			return fmt.Errorf("migrate up: %w", err)
		}
	case "down":
		if err := postgres.MigrateDown(url); err != nil {
			return fmt.Errorf("migrate down: %w", err)
		}
	}
	version, dirty, err := postgres.MigrationVersion(url)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	fmt.Fprintf(w, "schema version %d%s (this build needs %d)\n", version, dirtyNote(dirty), postgres.SchemaVersion)
	return nil
}
