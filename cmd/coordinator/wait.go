package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twophase/coordinator/internal/cli"
	"github.com/twophase/coordinator/store/postgres"
)

// How --database-wait retries. Not settings: a shorter backoff would only load a database
// that is starting up.
const (
	waitFirstBackoff  = 100 * time.Millisecond // after the first failed attempt; doubling...
	waitMaxBackoff    = 2 * time.Second        // ... up to this
	waitWarnEvery     = 5 * time.Second        // a warning this often while the wait goes on
	waitAttemptLimit  = 5 * time.Second        // longest one attempt to connect may take
	waitElapsedRounds = 100 * time.Millisecond // what the log lines round durations to
)

// databaseWaiter retries reaching a database until it answers or the wait is over. Its
// fields are what a test replaces.
type databaseWaiter struct {
	ping           func(ctx context.Context, url string) error
	notYet         func(error) bool // whether an error of ping is worth waiting out
	firstBackoff   time.Duration
	maxBackoff     time.Duration
	warnEvery      time.Duration
	attemptTimeout time.Duration
}

func postgresWaiter() databaseWaiter {
	return databaseWaiter{
		ping:           postgres.Ping,
		notYet:         postgres.NotYetReachable,
		firstBackoff:   waitFirstBackoff,
		maxBackoff:     waitMaxBackoff,
		warnEvery:      waitWarnEvery,
		attemptTimeout: waitAttemptLimit,
	}
}

// wait returns nil as soon as the database of url answers, or at once when it gives an
// answer that waiting does not mend (a wrong password, no such database): opening the
// store then reports that as it would without a wait. While the database is not there
// yet it retries, for up to wait, and then returns the last error. It returns ctx's error
// when ctx ends first (SIGTERM). With a wait of 0 it does nothing.
//
// It logs once at info that it waits, then a warning every warnEvery while it still does;
// the database's password is in none of its lines.
func (w databaseWaiter) wait(ctx context.Context, url string, wait time.Duration, logger *slog.Logger) error {
	if wait <= 0 {
		return nil
	}
	database := cli.RedactURL(url)
	password := cli.URLPassword(url)
	start := time.Now()
	deadline := start.Add(wait)
	backoff := w.firstBackoff
	waiting := false
	var nextWarn time.Time
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, w.attemptTimeout)
		err := w.ping(attemptCtx, url)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			if waiting {
				logger.Info("database answered", "database", database,
					"waited", time.Since(start).Round(waitElapsedRounds).String())
			}
			return nil
		}
		if !w.notYet(err) {
			return nil // an answer: migrating or opening the store reports it, as without a wait
		}
		now := time.Now()
		if !now.Before(deadline) {
			return fmt.Errorf("the database did not answer within --database-wait %s: %w", wait, err)
		}
		reason := cli.Scrub(err.Error(), password)
		switch {
		case !waiting:
			waiting = true
			nextWarn = now.Add(w.warnEvery)
			logger.Info("waiting for the database to answer", "database", database,
				"database_wait", wait.String(), "error", reason)
		case !now.Before(nextWarn):
			nextWarn = now.Add(w.warnEvery)
			logger.Warn("still waiting for the database to answer", "database", database,
				"waited", now.Sub(start).Round(waitElapsedRounds).String(),
				"left", deadline.Sub(now).Round(waitElapsedRounds).String(), "error", reason)
		}
		timer := time.NewTimer(min(backoff, deadline.Sub(now)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		backoff = min(2*backoff, w.maxBackoff)
	}
}
