package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// The memory limit of the Go runtime (debug.SetMemoryLimit): the garbage collector works
// harder as the heap nears it, instead of the process meeting its container's limit and
// being killed. GOMEMLIMIT rules when set; else --memory-limit; else a part of the
// container's limit (cgroup), leaving room for what the runtime does not count.
const containerShare = 0.9

// cgroupRoot is where the process's cgroup files are read; tests point it elsewhere.
var cgroupRoot = "/sys/fs/cgroup"

// applyMemoryLimit sets the runtime's memory limit and logs where it came from.
func applyMemoryLimit(cfg config, environ []string, logger *slog.Logger) {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GOMEMLIMIT="); ok && v != "" {
			logger.Info("memory limit", "from", "GOMEMLIMIT", "value", v)
			return
		}
	}
	limit, from := cfg.memoryLimit, "--memory-limit"
	if limit == 0 {
		if container, ok := containerMemoryLimit(cgroupRoot); ok {
			limit, from = int64(float64(container)*containerShare), "the container's limit"
		}
	}
	if limit <= 0 {
		logger.Debug("no memory limit")
		return
	}
	debug.SetMemoryLimit(limit)
	logger.Info("memory limit", "from", from, "bytes", limit)
}

// containerMemoryLimit reads the memory limit of the process's cgroup under root: cgroup v2's
// memory.max, else v1's memory.limit_in_bytes; ok is false when there is none ("max", or a
// value so large that it means none).
func containerMemoryLimit(root string) (int64, bool) {
	for _, file := range []string{"memory.max", "memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= math.MaxInt64/2 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// byteSize is a flag value of bytes: a number with an optional KiB, MiB, GiB or TiB.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("not a size: a number of bytes, optionally with KiB, MiB, GiB or TiB (like 512MiB)")
	}
	return n * mult, nil
}
