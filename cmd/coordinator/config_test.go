package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/store/sqlite"
)

func parseServe(t *testing.T, args, environ []string) (config, error) {
	t.Helper()
	var cfg config
	s := define("serve", &cfg)
	rest, err := s.Parse(args, environ)
	if err == nil && len(rest) > 0 {
		t.Fatalf("unexpected arguments left: %q", rest)
	}
	if err == nil {
		err = cfg.loadAdminToken(environ)
	}
	if err == nil {
		err = cfg.validate("serve")
	}
	return cfg, err
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := parseServe(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		listen:             "127.0.0.1:8080",
		dataDir:            "./coordinator-data",
		migrate:            true,
		maxBodyBytes:       1 << 20,
		maxCheckpointBytes: 16 << 20,
		metricsJobLabel:    true,
		requestTimeout:     30 * time.Second,
		shutdownTimeout:    15 * time.Second,
		eventsRetention:    24 * time.Hour,
		ui:                 true,
		sweepInterval:      200 * time.Millisecond,
		logFormat:          "text",
		logLevel:           slog.LevelInfo,

		readHeaderTimeout: 10 * time.Second,
		maxHeaderBytes:    64 << 10,
		maxWaiters:        10000,
		maxAnswerBytes:    128 << 20,
		parkAfter:         3 * time.Second,
		http2:             true,
	}
	if cfg != want {
		t.Errorf("defaults\n got %+v\nwant %+v", cfg, want)
	}
}

func TestFlagWinsOverEnvironment(t *testing.T) {
	t.Parallel()
	environ := []string{
		"COORDINATOR_LISTEN=127.0.0.1:7000",
		"COORDINATOR_MAX_BODY_BYTES=4096",
		"COORDINATOR_MIGRATE=false",
		"COORDINATOR_LOG_LEVEL=debug",
		"COORDINATOR_DB_WRITERS=1",
		"COORDINATOR_DATABASE_WAIT=30s",
		"COORDINATOR_DATABASE_URL=postgres://env@db:5432/env",
		"PATH=/usr/bin", // not ours
	}
	cfg, err := parseServe(t, []string{"--listen", "127.0.0.1:0", "--migrate=true", "-database-url=postgres://flag@db:5432/flag"}, environ)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.listen != "127.0.0.1:0" {
		t.Errorf("listen = %q, want the flag's 127.0.0.1:0", cfg.listen)
	}
	if !cfg.migrate {
		t.Errorf("migrate = false, want the flag's true over COORDINATOR_MIGRATE=false")
	}
	if cfg.databaseURL != "postgres://flag@db:5432/flag" {
		t.Errorf("database URL = %q, want the flag's", cfg.databaseURL)
	}
	if cfg.maxBodyBytes != 4096 {
		t.Errorf("max body bytes = %d, want 4096 from the environment", cfg.maxBodyBytes)
	}
	if cfg.logLevel != slog.LevelDebug {
		t.Errorf("log level = %v, want debug from the environment", cfg.logLevel)
	}
	if cfg.dbWriters != 1 {
		t.Errorf("db writers = %d, want 1 from the environment", cfg.dbWriters)
	}
	if cfg.databaseWait != 30*time.Second {
		t.Errorf("database wait = %s, want 30s from the environment", cfg.databaseWait)
	}
}

func TestMigrateTakesFlagsAfterItsAction(t *testing.T) {
	t.Parallel()
	var cfg config
	s := define("migrate", &cfg)
	rest, err := s.Parse([]string{"up", "--database-url", "postgres://u@h:5432/d"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 1 || rest[0] != "up" || cfg.databaseURL != "postgres://u@h:5432/d" {
		t.Errorf("rest %q, database URL %q", rest, cfg.databaseURL)
	}
	if s.FS.Lookup("listen") != nil {
		t.Errorf("migrate has a --listen flag, which it does not use")
	}
}

func TestInvalidSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		environ []string
		want    string // in the error
	}{
		{"env not a number", nil, []string{"COORDINATOR_MAX_BODY_BYTES=lots"}, "COORDINATOR_MAX_BODY_BYTES"},
		{"env not a duration", nil, []string{"COORDINATOR_SHUTDOWN_TIMEOUT=15"}, "COORDINATOR_SHUTDOWN_TIMEOUT"},
		{"env not a bool", nil, []string{"COORDINATOR_MIGRATE=maybe"}, "COORDINATOR_MIGRATE"},
		{"env not a level", nil, []string{"COORDINATOR_LOG_LEVEL=loud"}, "COORDINATOR_LOG_LEVEL"},
		{"flag not a number", []string{"--db-max-conns", "x"}, nil, "db-max-conns"},
		{"unknown flag", []string{"--listn", ":1"}, nil, "listn"},
		{"sweep too slow for rule 6", []string{"--sweep-interval", "2s"}, nil, "--sweep-interval"},
		{"sweep zero", nil, []string{"COORDINATOR_SWEEP_INTERVAL=0s"}, "--sweep-interval"},
		{"body limit zero", []string{"--max-body-bytes=0"}, nil, "--max-body-bytes"},
		{"negative pool", []string{"--db-max-conns=-1"}, nil, "--db-max-conns"},
		{"pool beyond int32", []string{"--db-max-conns=4294967296"}, nil, "--db-max-conns"},
		{"negative writers", []string{"--db-writers=-1"}, nil, "--db-writers"},
		{"too many writers", nil, []string{"COORDINATOR_DB_WRITERS=257"}, "--db-writers"},
		{"listen without port", []string{"--listen", "localhost"}, nil, "--listen"},
		{"log format", []string{"--log-format", "xml"}, nil, "--log-format"},
		{"not a postgres URL", []string{"--database-url", "mysql://root@db/x"}, nil, "postgres://"},
		{"negative request timeout", []string{"--request-timeout=-1s"}, nil, "--request-timeout"},
		{"negative park after", []string{"--park-after=-1s"}, nil, "--park-after"},
		{"negative database wait", []string{"--database-wait=-1s"}, nil, "--database-wait"},
		{"database wait not a duration", nil, []string{"COORDINATOR_DATABASE_WAIT=30"}, "COORDINATOR_DATABASE_WAIT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseServe(t, tt.args, tt.environ)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestUnknownEnvironmentVariables(t *testing.T) {
	t.Parallel()
	got := unknownEnv([]string{
		"COORDINATOR_LISTEN=:1",
		"COORDINATOR_LISTENN=:1",
		"COORDINATOR_TEST_DATABASE_URL=postgres://x",
		"HOME=/root",
		"COORDINATOR_DB_MAX_CONNS=4",
	})
	if len(got) != 1 || got[0] != "COORDINATOR_LISTENN" {
		t.Errorf("unknown = %q, want only COORDINATOR_LISTENN", got)
	}
}

func TestHelpListsEveryFlagWithItsTwin(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, nil, &stdout, &stderr); code != exitOK {
		t.Fatalf("--help exited %d: %s", code, stderr.String())
	}
	help := stdout.String()
	var cfg config
	s := define("serve", &cfg)
	for name, env := range s.Envs {
		if !strings.Contains(help, "--"+name) || !strings.Contains(help, env) {
			t.Errorf("help misses --%s or %s", name, env)
		}
	}
	for _, want := range []string{"default 127.0.0.1:8080", "default 1048576", "default 30s", "default 200ms", "rule 8", "migrate up|down|version"} {
		if !strings.Contains(help, want) {
			t.Errorf("help misses %q", want)
		}
	}
}

// TestToolCommandsAnswer checks that bench and seed (internal/loadtest) are wired to
// their names, with their own help on stdout.
func TestToolCommandsAnswer(t *testing.T) {
	t.Parallel()
	for command, want := range map[string]string{
		"bench": "env COORDINATOR_DATABASE_URL (default none)", // --pgbench-url
		"seed":  "--checkpoints number",
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{command, "--help"}, nil, &stdout, &stderr); code != exitOK {
			t.Fatalf("%s --help exited %d: %s", command, code, stderr.String())
		}
		if help := stdout.String(); !strings.HasPrefix(help, "coordinator "+command+": ") || !strings.Contains(help, want) {
			t.Errorf("%s --help misses %q:\n%s", command, want, help)
		}
	}
}

func TestExitStatuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		environ []string
		code    int
		stderr  string
	}{
		{"invalid flag", []string{"--max-body-bytes", "big"}, nil, exitUsage, "max-body-bytes"},
		{"invalid environment", nil, []string{"COORDINATOR_SWEEP_INTERVAL=soon"}, exitUsage, "COORDINATOR_SWEEP_INTERVAL"},
		{"stray argument", []string{"srve"}, nil, exitUsage, "srve"},
		{"stray argument lists every command", []string{"srve"}, nil, exitUsage,
			"(commands: serve, migrate, token, ctl, healthcheck, bench, fleet, seed, version, help)"},
		{"a duration without its unit", []string{"--request-timeout", "5"}, nil, exitUsage,
			`invalid value "5" for flag -request-timeout: a duration needs a unit: 5s, 5ms, 5m`},
		{"a duration without its unit, from the environment", nil, []string{"COORDINATOR_SHUTDOWN_TIMEOUT=15"}, exitUsage,
			"COORDINATOR_SHUTDOWN_TIMEOUT (twin of --shutdown-timeout): a duration needs a unit: 15s"},
		{"not a duration at all", []string{"--park-after", "soon"}, nil, exitUsage, "not a duration: want a number with a unit, such as 5s"},
		{"ctl's duration without its unit", []string{"ctl", "--timeout", "10", "jobs"}, nil, exitUsage, "a duration needs a unit: 10s"},
		{"migrate without action", []string{"migrate"}, nil, exitUsage, "up, down or version"},
		{"migrate unknown action", []string{"migrate", "sideways"}, nil, exitUsage, "sideways"},
		{"empty data directory", []string{"--data-dir", ""}, nil, exitUsage, "--data-dir"},
		{"bench stray argument", []string{"bench", "srve"}, nil, exitUsage, "coordinator bench: unexpected argument \"srve\""},
		{"seed without database", []string{"seed", "--checkpoints", "1"}, nil, exitUsage, "coordinator seed: --database-url"},
		{"seed invalid environment", []string{"seed"}, []string{"COORDINATOR_DATABASE_URL=mysql://x"}, exitUsage, "--database-url must be a postgres:// URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, tt.environ, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), tt.code, tt.stderr)
			}
		})
	}
}

// migrate down drops everything: without --yes it refuses, and the schema stays; with it,
// it reverts every migration.
func TestMigrateDownAsksForYes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	migrateCmd := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"migrate"}, append(args, "--data-dir", dir)...), nil, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, _, stderr := migrateCmd("up"); code != exitOK {
		t.Fatalf("migrate up: exit %d, %s", code, stderr)
	}
	code, _, stderr := migrateCmd("down")
	if code != exitUsage || !strings.Contains(stderr, "--yes") {
		t.Fatalf("migrate down without --yes: exit %d, stderr %q; want exit %d naming --yes", code, stderr, exitUsage)
	}
	if code, stdout, _ := migrateCmd("version"); code != exitOK || !strings.Contains(stdout, fmt.Sprintf("schema version %d ", sqlite.SchemaVersion)) {
		t.Fatalf("after a refused down: exit %d, %q; want schema version %d", code, stdout, sqlite.SchemaVersion)
	}
	if code, stdout, stderr := migrateCmd("down", "--yes"); code != exitOK || !strings.Contains(stdout, "schema version 0") {
		t.Fatalf("migrate down --yes: exit %d, %q, %s; want schema version 0", code, stdout, stderr)
	}
}

// Every command the binary runs is one that the refusal of a stray argument lists, and
// each answers --help.
func TestEveryCommandListed(t *testing.T) {
	t.Parallel()
	for _, command := range commandNames {
		args := []string{command, "--help"}
		if command == "version" || command == "help" {
			args = args[:1]
		}
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, nil, &stdout, &stderr); code != exitOK {
			t.Errorf("%s --help exited %d: %s", command, code, stderr.String())
		}
	}
}
