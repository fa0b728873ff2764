package loadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/internal/cli"
)

// floorReport is what the database beneath the coordinator can physically do: pgbench
// simple-update at the bench's client count, and the rate of 8 KiB write+fdatasync.
type floorReport struct {
	PgbenchTPS     float64 `json:"pgbench_tps"`
	PgbenchClients int     `json:"pgbench_clients"`
	PgbenchSeconds int     `json:"pgbench_seconds"`
	PgbenchScale   int     `json:"pgbench_scale"`
	PgbenchVersion string  `json:"pgbench_version"`
	// Ratio is the coordinator's durable state changes per second divided by PgbenchTPS.
	Ratio          float64 `json:"ratio"`
	FsyncPerSecond float64 `json:"fsync_per_second"`
	FsyncDir       string  `json:"fsync_dir"`
	FsyncNote      string  `json:"fsync_note,omitempty"`
}

// measureFloor runs pgbench -N with clients clients for seconds seconds on a scratch
// database created on the server of cfg.pgbenchURL (and dropped after), then the fsync
// probe.
func measureFloor(ctx context.Context, cfg benchConfig, clients, seconds int, progress io.Writer) (*floorReport, error) {
	pgbench, err := findPgbench(cfg.pgbenchPath)
	if err != nil {
		return nil, err
	}
	rep := &floorReport{PgbenchClients: clients, PgbenchSeconds: seconds, PgbenchScale: cfg.pgbenchScale}
	if out, err := exec.CommandContext(ctx, pgbench, "--version").Output(); err == nil {
		rep.PgbenchVersion = strings.TrimSpace(string(out))
	}

	adminCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(adminCtx, cfg.pgbenchURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cli.RedactURL(cfg.pgbenchURL), err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	var dataDir string
	_ = admin.QueryRow(adminCtx, "SHOW data_directory").Scan(&dataDir) // needs a privileged user; optional

	name := "coordinator_floor_" + randomHex(4)
	if _, err := admin.Exec(adminCtx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create the scratch database %s: %w", name, err)
	}
	defer func() {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(dropCtx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(progress, "bench: drop the scratch database %s: %v\n", name, err)
		}
	}()
	dbURL, password, err := scratchURL(cfg.pgbenchURL, name)
	if err != nil {
		return nil, err
	}
	env := os.Environ()
	if password != "" {
		env = append(env, "PGPASSWORD="+password) // not on the command line, where ps shows it
	}
	runPgbench := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, pgbench, append(args, dbURL)...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("pgbench %s: %w: %s", strings.Join(args, " "), err, lastLines(errOut.String(), 5))
		}
		return out.String(), nil
	}

	fmt.Fprintf(progress, "bench: floor: pgbench -i -s %d on the scratch database %s\n", cfg.pgbenchScale, name)
	if _, err := runPgbench(10*time.Minute, "-i", "-q", "-s", strconv.Itoa(cfg.pgbenchScale)); err != nil {
		return nil, err
	}
	threads := min(clients, runtime.NumCPU())
	args := []string{"-N", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(threads), "-T", strconv.Itoa(seconds)}
	fmt.Fprintf(progress, "bench: floor: pgbench %s\n", strings.Join(args, " "))
	out, err := runPgbench(time.Duration(seconds)*time.Second+5*time.Minute, args...)
	if err != nil {
		return nil, err
	}
	tps, err := parseTPS(out)
	if err != nil {
		return nil, err
	}
	rep.PgbenchTPS = tps
	fmt.Fprintf(progress, "bench: floor: pgbench %.1f tps\n", tps)

	dir, note := fsyncProbeDir(cfg.fsyncDir, dataDir)
	rep.FsyncDir, rep.FsyncNote = dir, note
	fmt.Fprintf(progress, "bench: floor: write+fdatasync of 8 KiB for %s in %s\n", cfg.fsyncDuration, dir)
	rate, err := fsyncRate(dir, cfg.fsyncDuration)
	if err != nil {
		return rep, fmt.Errorf("fsync probe: %w", err)
	}
	rep.FsyncPerSecond = rate
	return rep, nil
}

// findPgbench returns the pgbench to run: the given path, else pgbench on PATH, else the
// newest /usr/lib/postgresql/*/bin/pgbench.
func findPgbench(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(found) == 0 {
		return "", errors.New("pgbench not found on PATH nor in /usr/lib/postgresql/*/bin: pass --pgbench")
	}
	version := func(p string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(p))), 64)
		return v
	}
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	return found[0], nil
}

// scratchURL returns raw with its database replaced by name and its password taken out
// (returned apart, for PGPASSWORD).
func scratchURL(raw, name string) (string, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("parse the PostgreSQL URL: %w", err)
	}
	password := cli.URLPassword(raw)
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	q := u.Query()
	q.Del("password")
	u.RawQuery = q.Encode()
	u.Path = "/" + name
	return u.String(), password, nil
}

var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \((without initial connection time|excluding connections establishing)\)`)

// parseTPS reads the transactions per second pgbench printed.
func parseTPS(out string) (float64, error) {
	m := tpsLine.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no tps line in pgbench's output: %s", lastLines(out, 5))
	}
	return strconv.ParseFloat(m[1], 64)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// fsyncProbeDir chooses where the fsync probe writes: the given directory, else the parent
// of the PostgreSQL data directory when it is on this machine and writable (the probe's
// file never goes into the data directory itself), else the temp directory.
func fsyncProbeDir(given, dataDir string) (string, string) {
	if given != "" {
		return given, sameFilesystemNote(given, dataDir)
	}
	if dataDir != "" {
		if _, err := os.Stat(dataDir); err == nil {
			parent := filepath.Dir(dataDir)
			if f, err := os.CreateTemp(parent, "coordinator-fsync-probe-*"); err == nil {
				f.Close()
				os.Remove(f.Name())
				return parent, sameFilesystemNote(parent, dataDir)
			}
		}
	}
	return os.TempDir(), sameFilesystemNote(os.TempDir(), dataDir)
}

func sameFilesystemNote(dir, dataDir string) string {
	if dataDir == "" {
		return " (PostgreSQL's data directory unknown)"
	}
	same, known := sameFilesystem(dir, dataDir)
	switch {
	case !known:
		return " (PostgreSQL's data directory " + dataDir + " is not on this machine)"
	case same:
		return " (the filesystem of PostgreSQL's data directory " + dataDir + ")"
	}
	return " (NOT the filesystem of PostgreSQL's data directory " + dataDir + ")"
}

// fsyncRate writes 8 KiB at the start of a temp file and flushes it with fdatasync, again
// and again for d, as a database's write-ahead log does on commit, and returns the flushes
// per second.
func fsyncRate(dir string, d time.Duration) (float64, error) {
	f, err := os.CreateTemp(dir, "coordinator-fsync-probe-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := bytes.Repeat([]byte{0xa5}, 8192)
	if _, err := f.WriteAt(block, 0); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil { // the block is allocated: later flushes are data only
		return 0, err
	}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		block[0] = byte(n)
		if _, err := f.WriteAt(block, 0); err != nil {
			return 0, err
		}
		if err := fdatasync(f); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
