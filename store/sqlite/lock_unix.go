//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// dirLock is the exclusive flock(2) on a data directory's lock file. The kernel releases
// it when the process ends, however it ends, so a killed owner leaves no stale lock.
type dirLock struct {
	f *os.File
}

// lockDir takes the lock of dir, or fails at once with an *InUseError.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &InUseError{Dir: dir, LockFile: path, PID: readPID(path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing releases it anyway
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &dirLock{f: f}, nil
}

// readPID reads the owner's process id from the lock file. The owner writes it right after
// taking the lock, so an empty file is read again for a moment; 0 if it stays unknown.
func readPID(path string) int {
	for range 20 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0
}

// release empties the lock file and unlocks it. nil-safe.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	truncErr := f.Truncate(0)
	unlockErr := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return errors.Join(truncErr, unlockErr, f.Close())
}
