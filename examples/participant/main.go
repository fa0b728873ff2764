// Command participant is the README's Go participant: it creates the job "orders", opens
// one of its checkpoints every second and takes part in each as "pg-sink", until SIGINT
// or SIGTERM.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
)

type txn struct {
	GID string `json:"gid"`
}

type pgSink struct{} // a pool, buffered rows, ...

// Phase one: make the writes durable but invisible, return what phase two needs.
func (s *pgSink) Prepare(ctx context.Context, checkpoint int64) ([]txn, error) {
	gid := fmt.Sprintf("orders.pg-sink.%d", checkpoint)
	// BEGIN; INSERT ...; PREPARE TRANSACTION 'gid'
	return []txn{{GID: gid}}, nil
}

// Phase two: idempotent, it may run again after a crash.
func (s *pgSink) Commit(ctx context.Context, checkpoint int64, cs []txn) error {
	// COMMIT PREPARED 'gid' for each; "does not exist" + a commit marker = already done
	return nil
}

// Roll back: idempotent too.
func (s *pgSink) Abort(ctx context.Context, checkpoint int64, cs []txn) error {
	// ROLLBACK PREPARED 'gid' for each; "does not exist" = already done
	return nil
}

func main() {
	url := flag.String("url", cmp.Or(os.Getenv("COORDINATOR_URL"), "http://127.0.0.1:8080"),
		"the coordinator's URL (or set COORDINATOR_URL)")
	flag.Parse()
	// Debug shows each vote and ack; without a Logger the library logs nothing.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *url, log)
	stop()
	if err != nil && !errors.Is(err, context.Canceled) { // Canceled: stopped by a signal
		log.Error("participant stopped", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, log *slog.Logger) error {
	// With authentication on, the token of this participant (or one that may do what it does):
	// the example's PutJob and Trigger need the operator scope, the Runner its participant's.
	coord, err := coordinatorclient.NewCoordinator(url, coordinatorclient.Options{Logger: log, Token: os.Getenv("COORDINATOR_TOKEN")})
	if err != nil {
		return err
	}
	// The job must exist before anyone registers; putting the same configuration again
	// changes nothing.
	job := coordinatorclient.JobConfig{Participants: []string{"pg-sink"}}
	if _, err := coord.PutJob(ctx, "orders", job); err != nil {
		return err
	}
	// One Trigger per job opens its checkpoints; if it fails, the runner stops too.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	trigger := &coordinatorclient.Trigger{
		Coordinator: coord, Job: "orders", Interval: time.Second, Logger: log,
	}
	go func() { cancel(trigger.Run(ctx)) }()

	var sink coordinatorclient.Participant[txn] = &pgSink{}
	r := coordinatorclient.NewRunner(coord, "orders", "pg-sink", sink, coordinatorclient.RunnerOptions{Logger: log})
	// Run returns when ctx ends, or on something fatal, such as
	// errors.Is(err, coordinatorclient.ErrFenced).
	return r.Run(ctx)
}
