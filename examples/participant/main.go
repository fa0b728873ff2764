// Command participant is the README's Go participant: it takes part as "pg-sink" in
// every checkpoint of the job "orders", until SIGINT or SIGTERM. With a token that may
// (an operator's, or none when authentication is off) it also creates the job and opens a
// checkpoint every second; with a participant token, whoever runs the pipeline does that.
package main

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
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
	caFile := flag.String("ca-file", "", "PEM file of the CA that signed the coordinator's certificate, for https://")
	flag.Parse()
	// Debug shows each vote and ack; without a Logger the library logs nothing.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *url, *caFile, log)
	stop()
	if err != nil && !errors.Is(err, context.Canceled) { // Canceled: stopped by a signal
		log.Error("participant stopped", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, caFile string, log *slog.Logger) error {
	opts := coordinatorclient.Options{Logger: log, Token: os.Getenv("COORDINATOR_TOKEN")}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		opts.RootCAs = x509.NewCertPool()
		if !opts.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s holds no PEM certificate", caFile)
		}
	}
	coord, err := coordinatorclient.NewCoordinator(url, opts)
	if err != nil {
		return err
	}
	// The job must exist before anyone registers; putting the same configuration again
	// changes nothing. A participant token may not: then the job is someone else's to
	// create and to trigger.
	job := coordinatorclient.JobConfig{Participants: []string{"pg-sink"}}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	_, err = coord.PutJob(ctx, "orders", job)
	var refused *coordinatorclient.APIError
	switch {
	case errors.As(err, &refused) && refused.StatusCode == http.StatusForbidden:
		log.Info("this token only takes part: the job is created and triggered elsewhere")
	case err != nil:
		return err
	default:
		// One Trigger per job opens its checkpoints; if it fails, the runner stops too.
		trigger := &coordinatorclient.Trigger{
			Coordinator: coord, Job: "orders", Interval: time.Second, Logger: log,
		}
		go func() { cancel(trigger.Run(ctx)) }()
	}

	var sink coordinatorclient.Participant[txn] = &pgSink{}
	r := coordinatorclient.NewRunner(coord, "orders", "pg-sink", sink, coordinatorclient.RunnerOptions{Logger: log})
	// Run returns when ctx ends, or on something fatal, such as
	// errors.Is(err, coordinatorclient.ErrFenced).
	return r.Run(ctx)
}
