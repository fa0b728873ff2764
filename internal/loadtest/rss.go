package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// readRSS returns the resident set size of process pid in KiB, from /proc/PID/status
// (Linux only).
func readRSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("read the memory of process %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fields := strings.Fields(rest) // "123456 kB"
			if len(fields) == 2 && fields[1] == "kB" {
				return strconv.ParseInt(fields[0], 10, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS line in /proc/%d/status", pid)
}

type rssSample struct {
	Seconds float64 `json:"t_seconds"` // since the bench started
	KiB     int64   `json:"rss_kib"`
}

type rssReport struct {
	PID      int         `json:"pid"`
	FirstKiB int64       `json:"first_kib"`
	LastKiB  int64       `json:"last_kib"`
	MinKiB   int64       `json:"min_kib"`
	MaxKiB   int64       `json:"max_kib"`
	Samples  []rssSample `json:"samples"`
}

// rssSampler samples a process's RSS every interval while the bench runs.
type rssSampler struct {
	pid   int
	start time.Time

	mu      sync.Mutex
	samples []rssSample
}

// run samples at once, then every interval until ctx ends, and once more at the end. Each
// sample is also printed to w.
func (s *rssSampler) run(ctx context.Context, interval time.Duration, w io.Writer) {
	take := func() {
		kib, err := readRSS(s.pid)
		if err != nil {
			fmt.Fprintf(w, "bench: rss: %v\n", err)
			return
		}
		smp := rssSample{Seconds: time.Since(s.start).Seconds(), KiB: kib}
		s.mu.Lock()
		s.samples = append(s.samples, smp)
		s.mu.Unlock()
		fmt.Fprintf(w, "bench: rss pid %d t=%.0fs %.1f MiB\n", s.pid, smp.Seconds, mib(kib))
	}
	take()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			take()
			return
		case <-tick.C:
			take()
		}
	}
}

func (s *rssSampler) report() *rssReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return nil
	}
	rep := &rssReport{PID: s.pid, Samples: append([]rssSample(nil), s.samples...),
		FirstKiB: s.samples[0].KiB, LastKiB: s.samples[len(s.samples)-1].KiB, MinKiB: s.samples[0].KiB, MaxKiB: s.samples[0].KiB}
	for _, smp := range s.samples {
		rep.MinKiB = min(rep.MinKiB, smp.KiB)
		rep.MaxKiB = max(rep.MaxKiB, smp.KiB)
	}
	return rep
}
