package sqlite

import (
	"errors"
	"syscall"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/twophase/coordinator/coordinator"
)

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
