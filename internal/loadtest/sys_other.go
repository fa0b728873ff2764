//go:build !linux

package loadtest

import (
	"os"
	"time"
)

func fdatasync(f *os.File) error { return f.Sync() }

func sameFilesystem(a, b string) (same, known bool) { return false, false }

func cpuTime() time.Duration { return 0 }

func openFileLimit() (uint64, bool) { return 0, false }
