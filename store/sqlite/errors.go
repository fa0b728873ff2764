package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"syscall"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/twophase/coordinator/coordinator"
)

// translate maps database errors to the domain's, once, at the store's boundary:
// sql.ErrNoRows is coordinator.ErrNotFound itself; a database that cannot be used right
// now (locked past the busy timeout, an I/O error, a full disk, a closed store) is
// unavailable.
func translate(err error) error {
	if err == nil || coordinator.IsRejection(err) || errors.Is(err, coordinator.ErrUnavailable) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return coordinator.ErrNotFound
	}
	if unavailable(err) {
		return coordinator.Unavailable(err)
	}
	return err
}

// primaryCode is the SQLite result code of err without its extended bits, 0 if err is
// not SQLite's.
func primaryCode(err error) int {
	var e *msqlite.Error
	if errors.As(err, &e) {
		return e.Code() & 0xff
	}
	return 0
}

// unavailable reports whether err means the database cannot serve now but may later.
func unavailable(err error) bool {
	switch primaryCode(err) {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL:
		return true
	}
	return errors.Is(err, sql.ErrConnDone) || errors.Is(err, errClosed) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EIO)
}

// retryable reports whether the transaction may simply be run again: SQLite was busy
// (a lock held past the busy timeout), so nothing was committed.
func retryable(err error) bool {
	switch primaryCode(err) {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}
