package postgres

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Ping opens one connection to the database of url, as the store's pool would, and closes
// it: nil means the database answered and let the connection in.
func Ping(ctx context.Context, url string) error {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// NotYetReachable reports whether err, from Ping, means that the database is not there
// yet but may soon be, as while the database starts next to the coordinator: the server
// refuses connections (not listening yet) or answers that it is starting up (SQLSTATE
// 57P03), its host name does not resolve (yet), its network is unreachable, or the attempt
// timed out. Any other answer of the server (a wrong password, no such database, ...) is
// not: waiting does not mend it.
func NotYetReachable(err error) bool {
	if err == nil {
		return false
	}
	starting, answered := false, false
	walkErrors(err, func(e error) {
		if pgErr, ok := e.(*pgconn.PgError); ok {
			if pgErr.Code == "57P03" { // cannot_connect_now: starting up, or recovering
				starting = true
			} else {
				answered = true
			}
		}
	})
	if answered {
		return false
	}
	if starting {
		return true
	}
	var dnsErr *net.DNSError
	var netErr net.Error
	return errors.As(err, &dnsErr) ||
		errors.As(err, &netErr) && netErr.Timeout() ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) ||
		pgconn.Timeout(err)
}

// walkErrors calls fn on err and on every error it wraps, joined ones included: pgx joins
// the errors of every address it tried.
func walkErrors(err error, fn func(error)) {
	if err == nil {
		return
	}
	fn(err)
	switch e := err.(type) {
	case interface{ Unwrap() error }:
		walkErrors(e.Unwrap(), fn)
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			walkErrors(inner, fn)
		}
	}
}
