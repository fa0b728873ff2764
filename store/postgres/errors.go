package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

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
	var pgErr *pgconn.PgError
	if err == nil || coordinator.IsRejection(err) || !errors.As(err, &pgErr) {
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

// writeFailureHold is how long Ready reports a write that failed for want of storage or
// on a read-only database. Ready does not write to find out whether the database can (a
// write on every readiness check of every coordinator would cost a commit each time, and a
// tiny write may pass where a vote with its committables does not); it remembers what the
// writes met. It forgets a failure this long after the last one, rather than at the next
// success, which may be a write that changed nothing (an idempotent repeat) and proves
// nothing: long enough for readiness probes to see the failure (Kubernetes' defaults need
// 3 failed probes 10 s apart), short enough that a coordinator is ready again within half a
// minute of the database being fixed, by itself, with no traffic and no restart. While
// writes keep failing, each one renews it.
const writeFailureHold = 30 * time.Second

// writeHealth remembers the last write that failed for want of storage or on a read-only
// database (storageFailure). Store.Update and PutJob note what their writes met.
type writeHealth struct {
	now func() time.Time // the clock; tests move it

	mu     sync.Mutex
	what   string // what the failure was, in words: no statement, no value
	cause  error
	failed time.Time
}

// note records err, the outcome of a write, if it is a storage failure.
func (h *writeHealth) note(err error) {
	what, ok := storageFailure(err)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.what, h.cause, h.failed = what, err, h.clock()
}

// check returns nil, or an unavailable error saying what the last storage failure was, if
// it was within writeFailureHold.
func (h *writeHealth) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cause == nil {
		return nil
	}
	ago := h.clock().Sub(h.failed)
	if ago >= writeFailureHold {
		h.what, h.cause = "", nil
		return nil
	}
	return &coordinator.Error{
		Code: coordinator.CodeUnavailable,
		Message: fmt.Sprintf("the database cannot be written: a write failed %s ago (%s); ready again %s after the last such failure",
			ago.Round(time.Second), h.what, writeFailureHold),
		Err: h.cause,
	}
}

func (h *writeHealth) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}
