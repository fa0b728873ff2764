// Package coordinatorclient is the Go client of the two-phase-commit checkpoint
// coordinator's HTTP API. It has two layers:
//
//   - the types and calls generated from the API's contract, openapi.yaml ([Job],
//     [JobConfig], [Checkpoint], [Problem], ..., and [ClientWithResponses] with one method
//     per operation), which send one request each and never retry;
//   - hand-written code on top of them: [Coordinator], a typed connection that retries
//     what can be retried; [Runner], which drives your [Participant] (Prepare, Commit,
//     Abort) through the protocol; and [Trigger], which opens a job's checkpoints at a
//     fixed interval.
//
// The import path ends in the package's name, so no alias is needed:
//
//	import "github.com/twophase/coordinator/clients/go/coordinatorclient"
//
// This documentation and the examples use the shorter alias cc:
//
//	import cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
//
// # A typical program
//
// A participant process makes one [Coordinator] with [NewCoordinator], makes sure its job
// exists with [Coordinator.PutJob], and runs a [Runner] for its [Participant] until a
// signal ends the context. One process per job also runs a [Trigger], unless something
// else opens the checkpoints with [Coordinator.OpenCheckpoint]:
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	coord, err := cc.NewCoordinator("http://127.0.0.1:8080", cc.Options{})
//	if err != nil {
//		return err
//	}
//	if _, err := coord.PutJob(ctx, "orders", cc.JobConfig{Participants: []string{"pg-sink"}}); err != nil {
//		return err
//	}
//	ctx, cancel := context.WithCancelCause(ctx)
//	defer cancel(nil)
//	trigger := &cc.Trigger{Coordinator: coord, Job: "orders", Interval: time.Second}
//	go func() { cancel(trigger.Run(ctx)) }() // if the trigger fails, the runner stops too
//	r := cc.NewRunner(coord, "orders", "pg-sink", cc.Participant[txn](&sink{}), cc.RunnerOptions{})
//	return r.Run(ctx) // until ctx ends, or something fatal such as cc.ErrFenced
//
// A Participant's committables (here txn, any JSON-encodable type) describe its
// prepared work: they go to the coordinator with its vote and come back, decoded, to
// Commit or Abort, also in the next instance after a crash.
//
// # Retries and idempotency
//
// Every call of a [Coordinator] is retried, with exponential backoff and jitter between
// [Options.MinBackoff] and [Options.MaxBackoff], on network errors and on the answers
// that may go away: a 503 (the coordinator or its database is briefly unavailable),
// whose Retry-After is honoured up to MaxBackoff, any other 5xx, 408 and 429. It retries
// until the call's context ends or [Options.MaxAttempts] attempts were made; each attempt
// is bounded by [Options.RequestTimeout]. Any other answer is returned at once.
//
// Retrying is safe because every retry repeats the request word for word, and the
// coordinator treats a repeated write as a no-op that answers with the current state:
//
//   - [Coordinator.OpenCheckpoint] always sends an Idempotency-Key, a random one when you
//     pass none, so a retry after a lost answer opens no second checkpoint. Pass a key of
//     your own to make your own retries of the call safe as well ([Trigger] does).
//   - Votes, acks, commits and aborts are idempotent; the Runner encodes a vote's
//     committables once and resends the same vote and the same ack until they are answered.
//   - [Coordinator.Register] is the exception: a retry after a lost answer starts one more
//     epoch, which is harmless, since only the newest counts.
//
// The Runner relies in turn on the Participant: Commit and Abort must be idempotent, since
// a crash between applying a decision and acknowledging it makes the decision come again,
// with the same committables. Their errors are retried with backoff until they succeed,
// unless wrapped with [Permanent].
//
// Fencing keeps a participant to one live instance: each Runner registers a new epoch,
// which fences every older instance of the same participant. The coordinator refuses the
// older instances' votes and acks, and their Run returns an error matching [ErrFenced]: a
// fenced instance must stop writing and leave its prepared work to the new one. A Runner
// is run once; a new instance is a new Runner.
//
// # Errors
//
// An answer of the coordinator that is not a success is returned as an [*APIError], with
// its HTTP status, its RFC 9457 problem document and its Retry-After. [errors.Is] matches
// it against the sentinel error of its problem code: [ErrFenced], [ErrNotRegistered],
// [ErrAlreadyDecided], [ErrVoteConflict], [ErrNotDecided], [ErrNotFound],
// [ErrTooManyCheckpoints], [ErrIdempotencyConflict] and [ErrUnavailable]. The errors
// returned may wrap it, so test them with errors.Is rather than ==, and use [errors.As]
// for the details:
//
//	cp, err := coord.OpenCheckpoint(ctx, "orders", "", 0)
//	var apiErr *cc.APIError
//	switch {
//	case errors.Is(err, cc.ErrTooManyCheckpoints):
//		return nil // max_concurrent_checkpoints are preparing: try again later
//	case errors.As(err, &apiErr):
//		return fmt.Errorf("refused with HTTP %d (%s): %w", apiErr.StatusCode, apiErr.Code(), err)
//	case err != nil:
//		return err // the context ended, or the last network error
//	}
//	log.Printf("opened checkpoint %d", cp.Id)
//
// Prepare's context is cancelled with the cause [ErrDecidedMeanwhile] (see
// [context.Cause]) when its checkpoint is decided while it runs. A [*PermanentError],
// made with [Permanent], is how a Participant tells the Runner to stop instead of retrying.
//
// # HTTPS and tokens
//
// For a coordinator served over HTTPS, give [NewCoordinator] an https:// URL and, unless
// its certificate is signed by a CA the system trusts, [Options.RootCAs]; for one that
// asks for client certificates, [Options.Certificates]. [Options.Token] is sent as a
// bearer token on every request, the generated client's ([Coordinator.Client]) included:
//
//	roots := x509.NewCertPool()
//	roots.AppendCertsFromPEM(caPEM)
//	coord, err := cc.NewCoordinator("https://coordinator.example:8443",
//		cc.Options{RootCAs: roots, Token: token}) // token: read from a secret, never logged
//
// A Runner and a Trigger use their Coordinator's connection, so they need nothing more.
//
// # More
//
// The repository's examples/participant is a complete participant program, and
// docs/protocol.md describes the protocol this package implements: the states of a
// checkpoint, the guarantees of the coordinator, and what participants must do.
package coordinatorclient
