package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// errNotYet stands for a database that is not there yet; it repeats the URL, password
// included, as some libraries' errors do.
var errNotYet = errors.New("dial postgres://app:s3cret-pw@db:5432/app: connection refused")

const waitTestURL = "postgres://app:s3cret-pw@db:5432/app?sslmode=disable"

// fakeWaiter is a databaseWaiter whose ping answers from answers, one per call, the last
// one again and again; it retries quickly.
func fakeWaiter(answers ...error) (databaseWaiter, func() int) {
	var mu sync.Mutex
	calls := 0
	w := databaseWaiter{
		ping: func(ctx context.Context, url string) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			return answers[min(calls, len(answers))-1]
		},
		notYet:         func(err error) bool { return errors.Is(err, errNotYet) },
		firstBackoff:   time.Millisecond,
		maxBackoff:     20 * time.Millisecond,
		warnEvery:      50 * time.Millisecond,
		attemptTimeout: time.Second,
	}
	return w, func() int { mu.Lock(); defer mu.Unlock(); return calls }
}

func waitLogger() (*slog.Logger, *logBuffer) {
	logs := &logBuffer{}
	return slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), logs
}

func msgs(t *testing.T, logs *logBuffer, level string) []string {
	t.Helper()
	var out []string
	for _, line := range logs.lines(t) {
		if line["level"] == level {
			out = append(out, line["msg"].(string))
		}
	}
	return out
}

func TestDatabaseWaitOff(t *testing.T) {
	t.Parallel()
	w, calls := fakeWaiter(errNotYet)
	logger, logs := waitLogger()
	if err := w.wait(context.Background(), waitTestURL, 0, logger); err != nil {
		t.Fatal(err)
	}
	if calls() != 0 || len(logs.lines(t)) != 0 {
		t.Errorf("with no wait: %d pings and log %q, want none", calls(), logText(logs))
	}
}

func TestDatabaseWaitUntilItAnswers(t *testing.T) {
	t.Parallel()
	w, calls := fakeWaiter(errNotYet, errNotYet, errNotYet, nil)
	logger, logs := waitLogger()
	if err := w.wait(context.Background(), waitTestURL, time.Minute, logger); err != nil {
		t.Fatal(err)
	}
	if calls() != 4 {
		t.Errorf("%d pings, want 4 (three refused, then the answer)", calls())
	}
	if got := msgs(t, logs, "INFO"); len(got) != 2 || got[0] != "waiting for the database to answer" || got[1] != "database answered" {
		t.Errorf("info lines %q, want one that it waits and one that the database answered", got)
	}
	if strings.Contains(logText(logs), "s3cret-pw") {
		t.Errorf("the password is in the log:\n%s", logText(logs))
	}
}

func TestDatabaseWaitDoesNotWaitOutAnAnswer(t *testing.T) {
	t.Parallel()
	wrongPassword := errors.New("password authentication failed")
	w, calls := fakeWaiter(wrongPassword)
	logger, logs := waitLogger()
	if err := w.wait(context.Background(), waitTestURL, time.Hour, logger); err != nil {
		t.Fatalf("wait = %v, want nil: opening the store reports the error, as without a wait", err)
	}
	if calls() != 1 || len(logs.lines(t)) != 0 {
		t.Errorf("%d pings and log %q, want one ping and no log", calls(), logText(logs))
	}
}

func TestDatabaseWaitGivesUp(t *testing.T) {
	t.Parallel()
	w, calls := fakeWaiter(errNotYet)
	logger, logs := waitLogger()
	err := w.wait(context.Background(), waitTestURL, 300*time.Millisecond, logger)
	if err == nil || !errors.Is(err, errNotYet) || !strings.Contains(err.Error(), "did not answer within --database-wait 300ms") {
		t.Fatalf("wait = %v, want the last error, saying the wait is over", err)
	}
	if calls() < 2 {
		t.Errorf("%d pings, want retries", calls())
	}
	if got := msgs(t, logs, "INFO"); len(got) != 1 {
		t.Errorf("info lines %q, want exactly one", got)
	}
	warns := msgs(t, logs, "WARN")
	if len(warns) == 0 || len(warns) > calls() {
		t.Errorf("%d warnings over %d pings, want some, and fewer than the pings", len(warns), calls())
	}
	if strings.Contains(logText(logs), "s3cret-pw") {
		t.Errorf("the password is in the log:\n%s", logText(logs))
	}
}

func TestDatabaseWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	w, _ := fakeWaiter(errNotYet)
	logger, _ := waitLogger()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.wait(ctx, waitTestURL, time.Hour, logger) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("wait = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("wait goes on after its context ended")
	}
}

// closedPort returns 127.0.0.1:port where nothing listens (a moment ago).
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestServeDatabaseWait runs the command: with nothing on the database's port it waits,
// a SIGTERM (ctx) during the wait exits 0, and the end of the wait exits 1 with a message
// that names the wait and not the password.
func TestServeDatabaseWait(t *testing.T) {
	t.Parallel()
	dbURL := "postgres://app:s3cret-pw@" + closedPort(t) + "/app?sslmode=disable"

	t.Run("SIGTERM during the wait", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		logs := &logBuffer{}
		exit := make(chan int, 1)
		args := []string{"--listen", "127.0.0.1:0", "--database-url", dbURL, "--database-wait", "1h", "--log-format", "json"}
		go func() { exit <- run(ctx, args, nil, &bytes.Buffer{}, logs) }()
		waitFor(t, logs, "waiting for the database to answer")
		cancel()
		select {
		case code := <-exit:
			if code != exitOK {
				t.Errorf("exit %d after SIGTERM during the wait, want 0; log:\n%s", code, logText(logs))
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no exit 30s after SIGTERM during the wait; log:\n%s", logText(logs))
		}
	})

	t.Run("wait over", func(t *testing.T) {
		t.Parallel()
		logs := &logBuffer{}
		args := []string{"--listen", "127.0.0.1:0", "--database-url", dbURL, "--database-wait", "500ms", "--log-format", "json"}
		code := run(context.Background(), args, nil, &bytes.Buffer{}, logs)
		out := logText(logs)
		if code != exitFailure || !strings.Contains(out, "did not answer within --database-wait 500ms") {
			t.Errorf("exit %d, log:\n%s\nwant exit 1 naming --database-wait", code, out)
		}
		if strings.Contains(out, "s3cret-pw") {
			t.Errorf("the password is in the log:\n%s", out)
		}
		for _, line := range logs.lines(t) {
			if line["msg"] == "listening" {
				t.Errorf("listened without a database: %v", line)
			}
		}
	})
}

// waitFor waits until logs has a line with message msg.
func waitFor(t *testing.T, logs *logBuffer, msg string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range logs.lines(t) {
			if line["msg"] == msg {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %q line within 30s; log:\n%s", msg, logText(logs))
}

// logText is everything logged so far.
func logText(b *logBuffer) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
