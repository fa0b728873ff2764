package pipeline

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the MariaDB sink's driver
	"github.com/jackc/pgx/v5/pgxpool"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/e2e/sinks"
)

// WorkerEnv is the environment variable that makes a test binary a pipeline worker: it
// holds the worker's WorkerConfig as JSON. A test's TestMain calls WorkerMain when it is
// set, so that one binary is both the test and its processes.
const WorkerEnv = "PIPELINE_WORKER"

// Roles of a worker.
const (
	RoleSource = "source"
	RolePGSink = "pgsink"
	// RoleMariaDBSink writes through MariaDB's XA transactions (DatabaseURL is a DSN).
	RoleMariaDBSink = "mariadbsink"
	RoleFileSink    = "filesink"
)

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	// Role is RoleSource, RolePGSink or RoleFileSink.
	Role string `json:"role"`
	// Coordinator is the coordinator's base URL.
	Coordinator string `json:"coordinator"`
	// Token is the bearer token the worker sends (its participant token), "" for none.
	Token string `json:"token,omitempty"`
	// Job and Name are the job and the worker's participant name in it.
	Job  string `json:"job"`
	Name string `json:"name"`
	// Socket is the source's unix socket (the source listens, sinks connect).
	Socket string `json:"socket"`
	// Source: the sinks' names, how many events, events per second.
	Sinks []string `json:"sinks,omitempty"`
	Total int64    `json:"total,omitempty"`
	Rate  int      `json:"rate,omitempty"`
	// PostgreSQL sink: the database and the table.
	DatabaseURL string `json:"database_url,omitempty"`
	Table       string `json:"table,omitempty"`
	// File sink: the directory.
	Dir string `json:"dir,omitempty"`
}

// IsWorker reports whether this process was started as a worker.
func IsWorker() bool { return os.Getenv(WorkerEnv) != "" }

// WorkerMain runs the worker that $PIPELINE_WORKER describes until SIGTERM or SIGINT, and
// returns the process's exit code: 0 after a signal, 1 when something fatal happened
// (it is logged on stderr), 2 on a bad configuration.
func WorkerMain() int {
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "worker: %s: %v\n", WorkerEnv, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).
		With("role", cfg.Role, "name", cfg.Name, "pid", os.Getpid())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := runWorker(ctx, cfg, log)
	if err != nil && ctx.Err() == nil {
		log.Error("worker failed", "error", err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context, cfg WorkerConfig, log *slog.Logger) error {
	coord, err := cc.NewCoordinator(cfg.Coordinator, cc.Options{
		Token:          cfg.Token,
		RequestTimeout: 5 * time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	opts := cc.RunnerOptions{PollInterval: 30 * time.Millisecond, LongPoll: 5 * time.Second,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Logger: log}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	switch cfg.Role {
	case RoleSource:
		_ = os.Remove(cfg.Socket) // left by a killed predecessor
		ln, err := net.Listen("unix", cfg.Socket)
		if err != nil {
			return err
		}
		src := &Source{Coordinator: coord, Job: cfg.Job, Name: cfg.Name, Sinks: cfg.Sinks,
			Total: cfg.Total, Rate: cfg.Rate, Listener: ln, Logger: log}
		errs := make(chan error, 2)
		go func() { errs <- src.Run(ctx) }()
		go func() { errs <- cc.NewRunner(coord, cfg.Job, cfg.Name, cc.Participant[Position](src), opts).Run(ctx) }()
		return firstError(ctx, cancel, errs, 2)
	case RolePGSink, RoleFileSink, RoleMariaDBSink:
		in := &Inbox{Socket: cfg.Socket, Name: cfg.Name, Logger: log}
		errs := make(chan error, 2)
		go func() { errs <- in.Run(ctx) }()
		if cfg.Role == RolePGSink {
			pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer pool.Close()
			sink := &sinks.PGSink{Pool: pool, Coordinator: coord, Job: cfg.Job, Name: cfg.Name, Table: cfg.Table, Input: in, Logger: log}
			// The database may be down (crashed by the test) while this process starts.
			for err := sink.Setup(ctx); err != nil; err = sink.Setup(ctx) {
				log.Warn("setup failed, retrying", "error", err)
				if sleep(ctx, 200*time.Millisecond) != nil {
					return ctx.Err()
				}
			}
			go func() {
				errs <- cc.NewRunner(coord, cfg.Job, cfg.Name, cc.Participant[sinks.PGCommittable](sink), opts).Run(ctx)
			}()
		} else if cfg.Role == RoleMariaDBSink {
			db, err := sql.Open("mysql", cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer db.Close()
			sink := &sinks.MariaDBSink{DB: db, Coordinator: coord, Job: cfg.Job, Name: cfg.Name, Table: cfg.Table, Input: in, Logger: log}
			for err := sink.Setup(ctx); err != nil; err = sink.Setup(ctx) {
				log.Warn("setup failed, retrying", "error", err)
				if sleep(ctx, 200*time.Millisecond) != nil {
					return ctx.Err()
				}
			}
			go func() {
				errs <- cc.NewRunner(coord, cfg.Job, cfg.Name, cc.Participant[sinks.MariaDBCommittable](sink), opts).Run(ctx)
			}()
		} else {
			sink := &sinks.FileSink{Dir: cfg.Dir, Coordinator: coord, Job: cfg.Job, Name: cfg.Name, Input: in, Logger: log}
			go func() {
				errs <- cc.NewRunner(coord, cfg.Job, cfg.Name, cc.Participant[sinks.FileCommittable](sink), opts).Run(ctx)
			}()
		}
		return firstError(ctx, cancel, errs, 2)
	default:
		return fmt.Errorf("unknown role %q", cfg.Role)
	}
}

// firstError returns the first of n results, then cancels the others and waits for them.
func firstError(ctx context.Context, cancel context.CancelFunc, errs <-chan error, n int) error {
	err := <-errs
	cancel()
	for range n - 1 {
		<-errs
	}
	if err == nil && ctx.Err() == nil {
		err = errors.New("stopped on its own")
	}
	return err
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
