package postgres

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twophase/coordinator/coordinator"
)

// translate maps database errors to the domain's, once, at the store's boundary.
func translate(err error) error {
	if err == nil || coordinator.IsRejection(err) || errors.Is(err, coordinator.ErrUnavailable) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if unreachable(err) {
		return coordinator.Unavailable(err)
	}
	if _, ok := storageFailure(err); ok {
		return coordinator.Unavailable(err)
	}
	if lockTimedOut(err) {
		return &coordinator.Error{Code: coordinator.CodeUnavailable, Err: err,
			Message: "a row the request needs is locked by another transaction; nothing of it was applied: retry it"}
	}
	return err
}

// lockTimedOut reports whether err is a statement that waited for a lock longer than
// lock_timeout: its transaction was rolled back.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// unreachable reports whether err means the database cannot be reached or is going away.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08": // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // shutdown, crash, starting
			return true
		case pgErr.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// retryable reports whether the transaction may simply be run again: a serialisation
// failure or a deadlock, where nothing was committed.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// storageFailure reports whether err means that the database refuses writes (its disk is
// full, an I/O error, a read-only database: a standby after a failover, or transactions
// read-only by default) and says which, in words. A protocol rejection, a constraint
// error, a serialisation failure or a canceled request is none.
func storageFailure(err error) (string, bool) {
	if err == nil || coordinator.IsRejection(err) {
		return "", false // before pgErr, which escapes: most calls have no error
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", false
	}
	switch pgErr.Code {
	case "53100":
		return "the database server's disk is full (SQLSTATE 53100)", true
	case "58030":
		return "an I/O error on the database server (SQLSTATE 58030)", true
	case "25006":
		return "the database is read-only (SQLSTATE 25006)", true
	}
	return "", false
}
