package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// TestNotYetReachable: which errors of Ping mean that the database may still come (a wait
// goes on) and which mean that it answered (a wait would not mend them).
func TestNotYetReachable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"starting up", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{"starting up, wrapped", fmt.Errorf("connect: %w", &pgconn.PgError{Code: "57P03"}), true},
		{"wrong password", &pgconn.PgError{Code: "28P01"}, false},
		{"no such database", &pgconn.PgError{Code: "3D000"}, false},
		{"one address refused, the other a wrong password",
			errors.Join(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, &pgconn.PgError{Code: "28P01"}), false},
		{"one address refused, the other starting up",
			errors.Join(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, &pgconn.PgError{Code: "57P03"}), true},
		{"host not resolvable", &net.DNSError{Err: "no such host", Name: "postgres", IsNotFound: true}, true},
		{"attempt timed out", fmt.Errorf("dial: %w", context.DeadlineExceeded), true},
		{"something else", errors.New("tls: handshake failure"), false},
	} {
		if got := postgres.NotYetReachable(c.err); got != c.want {
			t.Errorf("%s: NotYetReachable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestPingNoServer: Ping to a port nothing listens on fails with an error that
// NotYetReachable recognises, as pgx really reports it.
func TestPingNoServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = postgres.Ping(ctx, "postgres://u:pw@"+addr+"/db?sslmode=disable")
	if err == nil {
		t.Fatalf("Ping to %s (nothing listening) succeeded", addr)
	}
	if !postgres.NotYetReachable(err) {
		t.Errorf("NotYetReachable(%v) = false for a refused connection", err)
	}
}

// TestPingAnswers: Ping to a running server succeeds, and a wrong database is an answer,
// not something to wait for.
func TestPingAnswers(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.Ping(ctx, dbURL); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database_for_ping"
	err = postgres.Ping(ctx, u.String())
	if err == nil {
		t.Fatal("Ping to a database that does not exist succeeded")
	}
	if postgres.NotYetReachable(err) {
		t.Errorf("NotYetReachable(%v) = true for a database that does not exist", err)
	}
}
