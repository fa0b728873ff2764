package sqlite

import (
	"errors"
	"fmt"
)

// ErrInUse is matched (errors.Is) by the *InUseError of a data directory that another
// store owns.
var ErrInUse = errors.New("data directory is in use")

// InUseError reports that another store, in this process or another, owns the data
// directory: it holds the exclusive lock on LockFile.
type InUseError struct {
	Dir      string
	LockFile string
	// PID is the owner's process id, as written in the lock file; 0 if unknown.
	PID int
}

func (e *InUseError) Error() string {
	owner := "another process (its id is not in the lock file yet)"
	if e.PID > 0 {
		owner = fmt.Sprintf("process %d", e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by %s, which holds the lock on %s: stop it, or use another data directory", e.Dir, owner, e.LockFile)
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }
