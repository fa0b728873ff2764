//go:build !unix

package sqlite

import (
	"errors"
	"runtime"
)

// dirLock would lock a data directory; only unix systems have the store's flock(2) lock.
type dirLock struct{}

func lockDir(string) (*dirLock, error) {
	return nil, errors.New("sqlite: the embedded store needs flock(2) to own its data directory, which " + runtime.GOOS + " lacks: use Postgres")
}

func (l *dirLock) release() error { return nil }
