package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twophase/coordinator/api"
	"github.com/twophase/coordinator/internal/cli"
	"github.com/twophase/coordinator/store/postgres"
	"github.com/twophase/coordinator/store/sqlite"
)

// GET /v1/info reads a PostgreSQL schema version again when the last reading is older
// than schemaRereadAfter, and waits for that reading at most schemaReadWait (past it, it
// answers the last one).
const (
	schemaRereadAfter = 10 * time.Second
	schemaReadWait    = time.Second
)

// buildInfo is what GET /v1/info answers about this build and the store cfg names, once
// openStore has opened it: its schema was then the one this build needs (openStore refuses
// any other). The embedded store's cannot change while this process holds the data
// directory; a PostgreSQL database can be migrated by another coordinator (a newer build,
// in a rolling upgrade), so its version is read again from time to time.
func buildInfo(cfg config, logger *slog.Logger) *api.BuildInfo {
	b := &api.BuildInfo{Version: buildVersion(), GoVersion: goVersion()}
	if cfg.databaseURL == "" {
		b.Store, b.SchemaExpected = api.InfoStoreEmbedded, sqlite.SchemaVersion
		return b
	}
	b.Store, b.SchemaExpected = api.InfoStorePostgres, postgres.SchemaVersion
	databaseURL := cfg.databaseURL
	w := &schemaWatch{
		read: func() (uint, error) {
			version, _, err := postgres.MigrationVersion(databaseURL)
			return version, err
		},
		rereadAfter: schemaRereadAfter,
		wait:        schemaReadWait,
		logger:      logger,
		secret:      cli.URLPassword(databaseURL),
		version:     postgres.SchemaVersion,
		readAt:      time.Now(),
	}
	b.SchemaVersion = w.current
	return b
}

// schemaWatch keeps a store's schema version for GET /v1/info. It reads it again when it
// is asked for and the last reading ended more than rereadAfter ago, one reading at a
// time: however often the operation is asked (it is open to every caller), the database
// is read at most once per rereadAfter, and a request waits for a reading at most wait.
type schemaWatch struct {
	read        func() (uint, error)
	rereadAfter time.Duration
	wait        time.Duration
	logger      *slog.Logger
	secret      string // the database password, kept out of the log

	mu      sync.Mutex
	version uint          // as last read
	readAt  time.Time     // when the last reading ended, successful or not
	reading chan struct{} // closed when the reading under way ends; nil when none is
}

// current returns the schema version as last read, after reading it again if the last
// reading is too old.
func (w *schemaWatch) current(ctx context.Context) uint {
	w.mu.Lock()
	if w.reading == nil && time.Since(w.readAt) >= w.rereadAfter {
		w.reading = make(chan struct{})
		go w.reread(w.reading)
	}
	reading := w.reading
	w.mu.Unlock()
	if reading != nil {
		timer := time.NewTimer(w.wait)
		select {
		case <-reading:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.version
}

// reread reads the version and closes done. A failed reading keeps the last version, and
// is tried again only rereadAfter later: a database that does not answer is not asked on
// every request.
func (w *schemaWatch) reread(done chan struct{}) {
	version, err := w.read()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.logger.Warn("GET /v1/info: could not read the schema version; it answers the last one read",
			"version", w.version, "error", cli.Scrub(err.Error(), w.secret))
	} else {
		w.version = version
	}
	w.readAt = time.Now()
	w.reading = nil
	close(done)
}
