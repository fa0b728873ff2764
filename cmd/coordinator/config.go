package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/twophase/coordinator/api"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/internal/cli"
)

// config is every setting of the coordinator. Only this package knows it: the other
// packages get what they need through their own Options.
type config struct {
	listen             string
	databaseURL        string
	databaseWait       time.Duration
	dataDir            string
	migrate            bool
	dbMaxConns         int
	dbWriters          int
	maxBodyBytes       int64
	maxCheckpointBytes int64
	metricsJobLabel    bool
	memoryLimit        int64 // bytes; 0: GOMEMLIMIT, else the container's
	requestTimeout     time.Duration
	shutdownTimeout    time.Duration
	eventsRetention    time.Duration
	sweepInterval      time.Duration
	debugListen        string
	tlsCertFile        string // with tlsKeyFile: serve HTTPS only
	tlsKeyFile         string
	tlsClientCAFile    string // with it, every client must present a certificate signed by one of its CAs
	logFormat          string
	logLevel           slog.Level
	yes                bool // migrate down: the operator confirmed that every table goes

	token tokenFlags // the token command's own flags (token.go)

	// Access control (auth.go).
	adminTokenFile string
	adminToken     string // read from adminTokenFile or COORDINATOR_ADMIN_TOKEN; never logged
	insecureNoAuth bool

	// The transport (transport.go).
	readHeaderTimeout time.Duration
	maxHeaderBytes    int
	maxWaiters        int
	maxAnswerBytes    int64 // bytes large answers in flight may hold; 0: no bound
	parkAfter         time.Duration
	http2             bool
	ui                bool
	allowedOrigins    string // comma-separated
	allowedHosts      string // comma-separated
}

// envPrefix starts every environment twin. Variables with it that no setting knows are
// reported at start-up, since they are most likely typos.
const envPrefix = "COORDINATOR_"

// maxSweepInterval keeps rule 6 of docs/protocol.md: while a coordinator runs, a
// checkpoint whose deadline passed is aborted within one second.
const maxSweepInterval = time.Second

// maxDBWriters bounds --db-writers: each writer holds a pooled connection while it commits.
const maxDBWriters = 256

// define registers the flags of command ("serve" or "migrate") on s, bound to cfg, with
// their defaults. The migrate command takes only what it needs.
func define(command string, cfg *config) *cli.Settings {
	s := cli.NewSettings(command)
	fs := s.FS

	if command == "serve" {
		fs.StringVar(&cfg.listen, "listen", defaultListen,
			"`address` to serve HTTP on; port 0 picks a free port (the \"listening\" log line shows it). Without authentication "+
				"only a loopback address is accepted, unless --insecure-no-auth")
		s.Twin("listen", "COORDINATOR_LISTEN")
		fs.StringVar(&cfg.adminTokenFile, "admin-token-file", "",
			"`file` holding the admin token (at least 32 characters, e.g. 'openssl rand -hex 32'); it turns authentication on. "+
				"COORDINATOR_ADMIN_TOKEN may hold the token itself instead")
		s.Twin("admin-token-file", "COORDINATOR_ADMIN_TOKEN_FILE")
		fs.BoolVar(&cfg.insecureNoAuth, "insecure-no-auth", false,
			"serve without authentication on an address other than loopback: anyone who reaches it can do anything")
		s.Twin("insecure-no-auth", "COORDINATOR_INSECURE_NO_AUTH")
	}
	fs.StringVar(&cfg.databaseURL, "database-url", "",
		"PostgreSQL `URL` (postgres://user:password@host:5432/db?sslmode=disable). Without one, the embedded store in --data-dir is used")
	s.Twin("database-url", "COORDINATOR_DATABASE_URL")
	if command == "serve" {
		cli.DurationVar(fs, &cfg.databaseWait, "database-wait", 0,
			"at start-up, how long (`duration`) to keep retrying a --database-url that does not answer yet (connection refused, "+
				"host not resolvable, server starting up) before giving up; 0: do not wait. Not used by the embedded store")
		s.Twin("database-wait", "COORDINATOR_DATABASE_WAIT")
	}
	fs.StringVar(&cfg.dataDir, "data-dir", "./coordinator-data",
		"`directory` of the embedded store, used when no --database-url is given. Only one coordinator process may use a data directory")
	s.Twin("data-dir", "COORDINATOR_DATA_DIR")
	if command == "token" {
		defineToken(fs, &cfg.token)
	}
	if command == "migrate" {
		fs.BoolVar(&cfg.yes, "yes", false,
			"confirm 'migrate down', which drops every table of the coordinator and all its data (without it, down refuses)")
	}
	if command == "serve" {
		fs.BoolVar(&cfg.migrate, "migrate", true,
			"apply pending schema migrations at start-up (false: refuse to start on an old schema; run 'coordinator migrate up')")
		s.Twin("migrate", "COORDINATOR_MIGRATE")
		fs.IntVar(&cfg.dbMaxConns, "db-max-conns", 0,
			"maximum `number` of PostgreSQL connections in the pool (0: the store's default)")
		s.Twin("db-max-conns", "COORDINATOR_DB_MAX_CONNS")
		fs.IntVar(&cfg.dbWriters, "db-writers", 0,
			"how many group commits (`number`) may be in flight at once, each on a pooled connection (0: the store's default, 2)")
		s.Twin("db-writers", "COORDINATOR_DB_WRITERS")
		fs.Int64Var(&cfg.maxBodyBytes, "max-body-bytes", 1<<20,
			"largest request body in `bytes`; larger ones get 413 payload_too_large")
		s.Twin("max-body-bytes", "COORDINATOR_MAX_BODY_BYTES")
		fs.Int64Var(&cfg.maxCheckpointBytes, "max-checkpoint-bytes", coordinator.DefaultMaxCheckpointBytes,
			"most `bytes` of committables one checkpoint may hold, all participants' together; the prepared vote that would pass it "+
				"gets 413 payload_too_large and is not recorded (0: no bound)")
		s.Twin("max-checkpoint-bytes", "COORDINATOR_MAX_CHECKPOINT_BYTES")
		fs.BoolVar(&cfg.metricsJobLabel, "metrics-job-label", true,
			"label metrics with the job (false: no job label, for fleets of very many jobs; the last committed checkpoint is then left out)")
		s.Twin("metrics-job-label", "COORDINATOR_METRICS_JOB_LABEL")
		fs.Var((*byteSize)(&cfg.memoryLimit), "memory-limit",
			"soft memory limit of the Go runtime (`size`, like 512MiB): the collector works harder near it. 0: GOMEMLIMIT if set, "+
				"else 90% of the container's (cgroup) limit, else none")
		s.Twin("memory-limit", "COORDINATOR_MEMORY_LIMIT")
		cli.DurationVar(fs, &cfg.requestTimeout, "request-timeout", 30*time.Second,
			"longest a request's work may take (`duration`), a long-poll's wait_ms coming on top; past it the answer is 503 unavailable")
		s.Twin("request-timeout", "COORDINATOR_REQUEST_TIMEOUT")
		cli.DurationVar(fs, &cfg.shutdownTimeout, "shutdown-timeout", 15*time.Second,
			"on SIGTERM or SIGINT, how long (`duration`) in-flight requests may still take before their connections are closed")
		s.Twin("shutdown-timeout", "COORDINATOR_SHUTDOWN_TIMEOUT")
		cli.DurationVar(fs, &cfg.eventsRetention, "events-retention", 24*time.Hour,
			"how long (`duration`) the status changes that event streams resume from are kept: a stream resuming from an older id starts again (reset)")
		s.Twin("events-retention", "COORDINATOR_EVENTS_RETENTION")
		cli.DurationVar(fs, &cfg.sweepInterval, "sweep-interval", 200*time.Millisecond,
			"how often (`duration`) checkpoints past their deadline are looked for and aborted; at most 1s")
		s.Twin("sweep-interval", "COORDINATOR_SWEEP_INTERVAL")
		fs.StringVar(&cfg.debugListen, "debug-listen", "",
			"`address` to serve Go's profiles on (/debug/pprof/), apart from the API; empty: none. Keep it on loopback: profiles show the process's internals")
		s.Twin("debug-listen", "COORDINATOR_DEBUG_LISTEN")
		cli.DurationVar(fs, &cfg.readHeaderTimeout, "read-header-timeout", defaultReadHeaderTimeout,
			"how long (`duration`) a client may take to send a request's headers before its connection is closed")
		s.Twin("read-header-timeout", "COORDINATOR_READ_HEADER_TIMEOUT")
		fs.IntVar(&cfg.maxHeaderBytes, "max-header-bytes", defaultMaxHeaderBytes,
			"largest request headers in `bytes` (net/http allows 4096 more); larger ones get 431")
		s.Twin("max-header-bytes", "COORDINATOR_MAX_HEADER_BYTES")
		fs.IntVar(&cfg.maxWaiters, "max-waiters", defaultMaxWaiters,
			"how many long-polls (`number`) may be held at once; past it they get 503 unavailable with Retry-After (0: no bound)")
		s.Twin("max-waiters", "COORDINATOR_MAX_WAITERS")
		cfg.maxAnswerBytes = api.DefaultMaxAnswerBytes
		fs.Var((*byteSize)(&cfg.maxAnswerBytes), "max-answer-bytes",
			"most memory (`size`, like 128MiB) that answers of 64 KiB or more may hold at once while they are built and "+
				"read by their clients; past it a page of checkpoints or a single checkpoint gets 503 unavailable with "+
				"Retry-After (0: no bound)")
		s.Twin("max-answer-bytes", "COORDINATOR_MAX_ANSWER_BYTES")
		cli.DurationVar(fs, &cfg.parkAfter, "park-after", api.DefaultParkAfter,
			"an HTTP/1.1 long-poll on pending that has waited this `duration` is parked: its connection set aside "+
				"with only the wait's state until it answers, then handed back (0: never parked)")
		s.Twin("park-after", "COORDINATOR_PARK_AFTER")
		fs.BoolVar(&cfg.ui, "ui", true, "serve the operator console at /ui/ (its pages ask for a token when authentication is on)")
		s.Twin("ui", "COORDINATOR_UI")
		fs.BoolVar(&cfg.http2, "http2", true,
			"serve HTTP/2 besides HTTP/1.1: negotiated over TLS, with prior knowledge (h2c) over plain HTTP. "+
				"Many requests (a fleet's long-polls) then share a few connections; false: HTTP/1.1 only")
		s.Twin("http2", "COORDINATOR_HTTP2")
		fs.StringVar(&cfg.allowedOrigins, "allowed-origins", "",
			"comma-separated `origins` (https://host[:port]) of web pages that may call the API; requests from other pages "+
				"(an Origin header, or Sec-Fetch-Site: cross-site) get 403. Empty: none; null never")
		s.Twin("allowed-origins", "COORDINATOR_ALLOWED_ORIGINS")
		fs.StringVar(&cfg.allowedHosts, "allowed-hosts", "",
			"comma-separated `hosts` a request's Host may name, besides localhost, 127.0.0.1, ::1 and the host of --listen; "+
				"others get 421. * allows every host (behind a proxy that checks it)")
		s.Twin("allowed-hosts", "COORDINATOR_ALLOWED_HOSTS")
		fs.StringVar(&cfg.tlsCertFile, "tls-cert-file", "",
			"PEM `file` of the certificate (its chain following it) to serve the API over HTTPS with, TLS 1.2 or later, and no "+
				"plain HTTP; needs --tls-key-file. Both files are read again when they change (checked every second)")
		s.Twin("tls-cert-file", "COORDINATOR_TLS_CERT_FILE")
		fs.StringVar(&cfg.tlsKeyFile, "tls-key-file", "",
			"PEM `file` of the private key of --tls-cert-file")
		s.Twin("tls-key-file", "COORDINATOR_TLS_KEY_FILE")
		fs.StringVar(&cfg.tlsClientCAFile, "tls-client-ca-file", "",
			"PEM `file` of CA certificates: every client must then present a certificate signed by one of them (needs "+
				"--tls-cert-file; 'coordinator healthcheck' then needs --tls-client-cert-file). Read again when it changes")
		s.Twin("tls-client-ca-file", "COORDINATOR_TLS_CLIENT_CA_FILE")
	}
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log `format`: text or json")
	s.Twin("log-format", "COORDINATOR_LOG_FORMAT")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "least `level` logged: debug, info, warn or error")
	s.Twin("log-level", "COORDINATOR_LOG_LEVEL")
	return s
}

// knownEnv lists the environment twins of every command.
func knownEnv() map[string]bool {
	known := map[string]bool{}
	var cfg config
	for _, command := range []string{"serve", "migrate", "token"} {
		for _, env := range define(command, &cfg).Envs {
			known[env] = true
		}
	}
	known[adminTokenEnv] = true
	for _, env := range ctlEnv() {
		known[env] = true
	}
	return known
}

// unknownEnv returns the COORDINATOR_ variables of environ that no setting reads. Test
// settings (COORDINATOR_TEST_...) are the tests' own and are not reported.
func unknownEnv(environ []string) []string {
	known := knownEnv()
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) && !strings.HasPrefix(name, envPrefix+"TEST_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	return unknown
}

// validate checks the values that the flag types alone do not.
func (cfg *config) validate(command string) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if cfg.databaseURL != "" {
		u, err := url.Parse(cfg.databaseURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" && u.Query().Get("host") == "" {
			bad("--database-url must be a postgres:// URL, like postgres://user:password@127.0.0.1:5432/db?sslmode=disable")
		}
	} else if strings.TrimSpace(cfg.dataDir) == "" {
		bad("--data-dir must not be empty")
	}
	switch cfg.logFormat {
	case "text", "json":
	default:
		bad("--log-format must be text or json, not %q", cfg.logFormat)
	}
	if command != "serve" {
		return errors.Join(errs...)
	}
	if _, port, err := net.SplitHostPort(cfg.listen); err != nil || port == "" {
		bad("--listen must be host:port or :port, like :8080 or 127.0.0.1:0, not %q", cfg.listen)
	} else if err := cfg.checkAuthListen(); err != nil {
		bad("%v", err)
	}
	cfg.validateTransport(bad)
	if (cfg.tlsCertFile == "") != (cfg.tlsKeyFile == "") {
		bad("--tls-cert-file and --tls-key-file go together: give both to serve HTTPS, or neither to serve plain HTTP")
	}
	if cfg.tlsClientCAFile != "" && cfg.tlsCertFile == "" {
		bad("--tls-client-ca-file needs --tls-cert-file and --tls-key-file: client certificates are asked for over HTTPS only")
	}
	if cfg.databaseWait < 0 {
		bad("--database-wait must not be negative (0: do not wait), not %s", cfg.databaseWait)
	}
	if cfg.dbMaxConns < 0 || cfg.dbMaxConns > math.MaxInt32 {
		bad("--db-max-conns must be from 0 (the store's default) to %d, not %d", math.MaxInt32, cfg.dbMaxConns)
	}
	if cfg.dbWriters < 0 || cfg.dbWriters > maxDBWriters {
		bad("--db-writers must be from 0 (the store's default) to %d, not %d", maxDBWriters, cfg.dbWriters)
	}
	if cfg.maxCheckpointBytes < 0 {
		bad("--max-checkpoint-bytes must not be negative (0: no bound), not %d", cfg.maxCheckpointBytes)
	}
	if cfg.maxBodyBytes < 1 {
		bad("--max-body-bytes must be at least 1, not %d", cfg.maxBodyBytes)
	}
	if cfg.requestTimeout <= 0 {
		bad("--request-timeout must be positive, not %s", cfg.requestTimeout)
	}
	if cfg.parkAfter < 0 {
		bad("--park-after must be 0 (never park) or positive, not %s", cfg.parkAfter)
	}
	if cfg.eventsRetention < time.Minute {
		bad("--events-retention must be at least 1m, not %s", cfg.eventsRetention)
	}
	if cfg.shutdownTimeout <= 0 {
		bad("--shutdown-timeout must be positive, not %s", cfg.shutdownTimeout)
	}
	if cfg.sweepInterval <= 0 || cfg.sweepInterval > maxSweepInterval {
		bad("--sweep-interval must be more than 0 and at most %s (expired checkpoints are aborted within one second), not %s",
			maxSweepInterval, cfg.sweepInterval)
	}
	return errors.Join(errs...)
}
