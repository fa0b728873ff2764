package sqlite

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/twophase/coordinator/coordinator"
)

// writeFailureHold is how long Ready reports a write that failed for want of storage.
// Ready does not write to find out whether the store can (a write on every readiness check
// would cost an fsync each time, and a tiny write may pass where a vote with its
// committables does not); it remembers what the writes met. It forgets a failure this long
// after the last one, rather than at the next success, which may be a write that changed
// nothing (an idempotent repeat) and proves nothing: long enough for readiness probes to see
// the failure (Kubernetes' defaults need 3 failed probes 10 s apart), short enough that a
// store whose disk was freed is ready again within half a minute by itself, with no
// traffic and no restart. While writes keep failing, each one renews it.
const writeFailureHold = 30 * time.Second

// writeHealth remembers the last write that failed for want of storage.
type writeHealth struct {
	now func() time.Time // the clock; tests move it

	mu     sync.Mutex
	what   string // what the failure was, in words: no path, no statement
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

// storageFailure reports whether err means that the database's storage refuses writes
// (a full disk, an I/O error, a read-only or corrupt file) and says which, in words. A
// protocol rejection, a constraint error, a busy lock, a closed store or a canceled
// request is none.
func storageFailure(err error) (string, bool) {
	if err == nil || coordinator.IsRejection(err) {
		return "", false
	}
	switch primaryCode(err) {
	case sqlite3.SQLITE_FULL:
		return "the disk is full", true
	case sqlite3.SQLITE_IOERR:
		return "an I/O error", true
	case sqlite3.SQLITE_READONLY:
		return "the database file is read-only", true
	case sqlite3.SQLITE_CANTOPEN:
		return "the database file cannot be opened", true
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return "the database file is corrupt", true
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "the disk is full", true
	case errors.Is(err, syscall.EIO):
		return "an I/O error", true
	case errors.Is(err, syscall.EROFS):
		return "the file system is read-only", true
	}
	return "", false
}
