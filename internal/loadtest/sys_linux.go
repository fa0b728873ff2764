package loadtest

import (
	"os"
	"syscall"
	"time"
)

func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// sameFilesystem reports whether a and b are on the same device, and whether that is known.
func sameFilesystem(a, b string) (same, known bool) {
	var sa, sb syscall.Stat_t
	if syscall.Stat(a, &sa) != nil || syscall.Stat(b, &sb) != nil {
		return false, false
	}
	return sa.Dev == sb.Dev, true
}

// cpuTime is the CPU time (user and system) this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// openFileLimit is this process's limit of open files (the soft one, which the Go runtime
// raises to the hard one at start).
func openFileLimit() (uint64, bool) {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return 0, false
	}
	return rl.Cur, true
}
