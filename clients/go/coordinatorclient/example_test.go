package coordinatorclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"syscall"
	"time"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// The examples without an Output comment need a coordinator at 127.0.0.1:8080: they are
// compiled, not run.

func ExampleNewCoordinator() {
	coord, err := cc.NewCoordinator("http://127.0.0.1:8080", cc.Options{
		RequestTimeout: 5 * time.Second, // per attempt
		MaxAttempts:    10,              // 0: retry until the call's context ends
		Logger:         slog.Default(),  // a debug line per retried attempt
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job, err := coord.Job(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Name, job.Participants, job.Epochs)
}

func ExampleCoordinator_PutJob() {
	coord, err := cc.NewCoordinator("http://127.0.0.1:8080", cc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// Putting the same configuration again changes nothing, so every participant
	// process can put its job when it starts.
	timeout := int64(30_000)
	job, err := coord.PutJob(context.Background(), "orders", cc.JobConfig{
		Participants:        []string{"kafka-source", "pg-sink"},
		CheckpointTimeoutMs: &timeout,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job", job.Name, "last committed checkpoint:", job.LastCommitted)
}

func ExampleCoordinator_OpenCheckpoint() {
	coord, err := cc.NewCoordinator("http://127.0.0.1:8080", cc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// A key of your own makes your own retries of this call safe too: they are answered
	// with the checkpoint the key opened. Timeout 0 is the job's checkpoint_timeout_ms.
	cp, err := coord.OpenCheckpoint(ctx, "orders", "nightly-2025-01-31", 0)
	if errors.Is(err, cc.ErrTooManyCheckpoints) {
		fmt.Println("max_concurrent_checkpoints are preparing; try again later")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	// Long-poll until the participants' votes decide it (or 30s pass).
	cp, err = coord.Checkpoint(ctx, "orders", cp.Id, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("checkpoint", cp.Id, cp.Status)
}

func ExampleTrigger() {
	coord, err := cc.NewCoordinator("http://127.0.0.1:8080", cc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := &cc.Trigger{
		Coordinator: coord,
		Job:         "orders",
		Interval:    time.Second,
		OnOpen:      func(cp *cc.Checkpoint) { log.Printf("opened checkpoint %d", cp.Id) },
	}
	// Run returns nil when ctx ends, and an error only for a refusal that no later tick
	// can cure, such as a job that does not exist.
	if err := t.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("opened", t.Opened(), "skipped", t.Skipped())
}

// fileTxn is the committable of fileSink: what Commit and Abort need to finish the work
// of a prepared checkpoint, possibly in another process.
type fileTxn struct {
	Temp, Final string
}

// fileSink writes each checkpoint's records to a temp file and renames it on commit.
type fileSink struct{}

func (s *fileSink) Prepare(ctx context.Context, checkpoint int64) ([]fileTxn, error) {
	// Write and fsync the buffered records to the temp file.
	return []fileTxn{{
		Temp:  fmt.Sprintf("out/.%d.tmp", checkpoint),
		Final: fmt.Sprintf("out/%d.jsonl", checkpoint),
	}}, nil
}

func (s *fileSink) Commit(ctx context.Context, checkpoint int64, txns []fileTxn) error {
	for _, t := range txns {
		// Idempotent: after a crash the temp file may already have been renamed.
		if err := os.Rename(t.Temp, t.Final); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (s *fileSink) Abort(ctx context.Context, checkpoint int64, txns []fileTxn) error {
	for _, t := range txns {
		if err := os.Remove(t.Temp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func ExampleRunner() {
	coord, err := cc.NewCoordinator("http://127.0.0.1:8080", cc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := cc.NewRunner(coord, "orders", "file-sink", cc.Participant[fileTxn](&fileSink{}), cc.RunnerOptions{})
	err = r.Run(ctx)
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Println("stopped by a signal") // a new instance recovers what is still owed
	case errors.Is(err, cc.ErrFenced):
		log.Fatal("a newer instance of file-sink registered: ", err)
	default:
		log.Fatal(err)
	}
}

// ExampleAPIError shows how to tell the coordinator's refusals apart. It runs against a
// stand-in for the coordinator that knows no job.
func ExampleAPIError() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"type":"/problems/not_found","title":"Not Found",`+
			`"status":404,"code":"not_found","detail":"job orders does not exist"}`)
	}))
	defer srv.Close()

	coord, err := cc.NewCoordinator(srv.URL, cc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = coord.Job(context.Background(), "orders")
	if errors.Is(err, cc.ErrNotFound) {
		fmt.Println("no such job")
	}
	var apiErr *cc.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.StatusCode, apiErr.Code())
	}
	fmt.Println(err)
	// Output:
	// no such job
	// 404 not_found
	// get job orders: HTTP 404 not_found: job orders does not exist
}
