package loadtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPU use of other processes, from /proc (Linux only: elsewhere the reads fail and the
// fleet reports the CPU as unknown).

// clockTicks is the unit of the times in /proc/PID/stat (USER_HZ), from the auxiliary
// vector's AT_CLKTCK; 100, the value on every common Linux, when it cannot be read.
var clockTicks = sync.OnceValue(func() int64 {
	const atClkTck = 17
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	for ; len(b) >= 16; b = b[16:] { // pairs of 64-bit words on the 64-bit platforms
		key, val := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		if key == atClkTck && val > 0 && val < 1e6 {
			return int64(val)
		}
		if key == 0 {
			break
		}
	}
	return 100
})

func ticksToDuration(ticks uint64) time.Duration {
	return time.Duration(ticks) * time.Second / time.Duration(clockTicks())
}

// procStat is what the fleet reads of /proc/PID/stat.
type procStat struct {
	comm         string
	self, reaped uint64 // utime+stime, and cutime+cstime (children waited for), in ticks
}

// readProcStat reads /proc/<pid>/stat (pid may be "self").
func readProcStat(pid string) (procStat, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the last ')'.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 > len(b) {
		return procStat{}, fmt.Errorf("/proc/%s/stat: unexpected format", pid)
	}
	fields := strings.Fields(string(b[end+2:])) // fields[0] is field 3 (state)
	if len(fields) < 15 {
		return procStat{}, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(fields))
	}
	var v [4]uint64 // utime, stime, cutime, cstime: fields 14 to 17
	for i := range v {
		n, err := strconv.ParseInt(fields[11+i], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("/proc/%s/stat field %d: %w", pid, 14+i, err)
		}
		v[i] = uint64(max(n, 0))
	}
	return procStat{comm: string(b[open+1 : end]), self: v[0] + v[1], reaped: v[2] + v[3]}, nil
}

// processCPU is the CPU time (user and system) process pid used so far.
func processCPU(pid int) (time.Duration, error) {
	st, err := readProcStat(strconv.Itoa(pid))
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of process %d: %w", pid, err)
	}
	return ticksToDuration(st.self), nil
}

// commandCPU is the CPU time used so far by every process whose command (comm) is name,
// with that of their children already waited for: PostgreSQL's backends that ended are
// counted in the postmaster's. It returns how many processes it found.
func commandCPU(name string) (time.Duration, int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	var ticks uint64
	n := 0
	for _, e := range entries {
		pid := e.Name()
		if pid == "" || pid[0] < '0' || pid[0] > '9' {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.comm != name {
			continue // gone meanwhile, or another command
		}
		ticks += st.self + st.reaped
		n++
	}
	return ticksToDuration(ticks), n, nil
}
