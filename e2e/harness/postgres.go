package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// clusterStartTimeout bounds how long a cluster may take to accept connections, crash
// recovery included.
const clusterStartTimeout = 60 * time.Second

// Cluster is a throwaway PostgreSQL cluster owned by one test: its own data directory,
// its own port on 127.0.0.1, trust authentication for the user "postgres", fsync on (a
// crash must lose nothing that was committed), and max_prepared_transactions = 64.
//
// Its methods fail the test when the cluster does not do what they ask. They are safe to
// call from several goroutines, but not at the same time as each other.
type Cluster struct {
	t       testing.TB
	bin     string // directory of initdb, pg_ctl, postgres
	dir     string // owns data/, the socket and the log
	port    int
	cred    *syscall.Credential // nil when not root
	logFile string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	exitErr error
}

// StartCluster creates a cluster (initdb) in a new directory, starts it and waits until it
// accepts connections. t.Cleanup stops it and removes its directory.
//
// The binaries are taken from $COORDINATOR_TEST_PG_BIN, else from the newest
// /usr/lib/postgresql/*/bin, else from `pg_config --bindir`. Under -short it skips the test.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, 0)
}

// StartClusterOnPort is StartCluster on the given port of 127.0.0.1 (from FreePort), for
// a test that points a coordinator at the port before any server listens there. It does
// not move to another port when that one is taken meanwhile: the test fails.
func StartClusterOnPort(t testing.TB, port int) *Cluster {
	t.Helper()
	if port <= 0 || port > 65535 {
		t.Fatalf("harness: StartClusterOnPort: invalid port %d", port)
	}
	return startCluster(t, port)
}

// startCluster starts a cluster on port, or on a free port when port is 0.
func startCluster(t testing.TB, port int) *Cluster {
	t.Helper()
	skipShort(t, "starts a PostgreSQL cluster of its own")
	bin, err := postgresBin()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	// Not t.TempDir(): its parents are private to the test's user, and when the test runs
	// as root, postgres runs as another user that must reach its directory. The path is
	// kept short because it holds the server's unix socket (at most 107 bytes).
	dir, err := os.MkdirTemp("", "e2e-pg-")
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	c := &Cluster{t: t, bin: bin, dir: dir, logFile: filepath.Join(dir, "postgres.log")}
	t.Cleanup(func() {
		c.cleanup()
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		cred, err := postgresUser()
		if err != nil {
			t.Fatalf("harness: running as root, and %v", err)
		}
		c.cred = cred
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	if out, err := c.run("initdb", "-D", c.dataDir(), "-U", "postgres", "--auth=trust",
		"--no-sync", "--encoding=UTF8", "--locale=C", "--no-instructions"); err != nil {
		t.Fatalf("harness: initdb: %v\n%s", err, out)
	}
	// A free port is found by binding and releasing it; another process may take it in
	// between, so a failed start is retried on a new port (not on a port the test chose).
	for attempt := 1; ; attempt++ {
		c.port = port
		if port == 0 {
			c.port, err = freePort()
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
		}
		if err := c.writeConfig(); err != nil {
			t.Fatalf("harness: %v", err)
		}
		err = c.start()
		if err == nil {
			break
		}
		if attempt == 3 || port != 0 {
			t.Fatalf("harness: start postgres on port %d: %v\n%s", c.port, err, c.Log())
		}
	}
	return c
}

// URL is the connection URL of the cluster's "postgres" database.
func (c *Cluster) URL() string { return c.DatabaseURL("postgres") }

// DatabaseURL is the connection URL of database name in the cluster.
func (c *Cluster) DatabaseURL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, name)
}

// Port is the cluster's TCP port on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// NewDatabase creates an empty database in the cluster and returns its URL, so that tests
// sharing a cluster do not see each other's data.
func (c *Cluster) NewDatabase(t testing.TB) string {
	t.Helper()
	name := "e2e_" + strings.ToLower(rand.Text())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatalf("harness: connect to the cluster: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("harness: create database: %v", err)
	}
	return c.DatabaseURL(name)
}

// Crash stops the cluster the way a power cut or an OOM kill would, as far as committed
// data goes: pg_ctl stop -m immediate, no checkpoint, crash recovery on the next Start.
func (c *Cluster) Crash() {
	c.t.Helper()
	c.stop("immediate")
}

// Stop shuts the cluster down cleanly (pg_ctl stop -m fast).
func (c *Cluster) Stop() {
	c.t.Helper()
	c.stop("fast")
}

// Start starts a stopped or crashed cluster on the same port and waits until it accepts
// connections (after crash recovery).
func (c *Cluster) Start() {
	c.t.Helper()
	if err := c.start(); err != nil {
		c.t.Fatalf("harness: start postgres: %v\n%s", err, c.Log())
	}
}

// Running reports whether the server process is running.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return false
	}
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Log returns the server's log (its last 64 KiB).
func (c *Cluster) Log() string {
	b, err := os.ReadFile(c.logFile)
	if err != nil {
		return fmt.Sprintf("(no postgres log: %v)", err)
	}
	if len(b) > 64<<10 {
		b = b[len(b)-64<<10:]
	}
	return string(b)
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) writeConfig() error {
	conf := fmt.Sprintf(`
# e2e harness
port = %d
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
fsync = on
synchronous_commit = on
full_page_writes = on
max_prepared_transactions = 64
max_connections = 200
shared_buffers = 32MB
log_min_messages = warning
log_line_prefix = '%%m [%%p] '
`, c.port, c.dir)
	// Appended settings win over earlier ones; a retry on a new port appends again.
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(conf); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// start runs postgres as a child process (so that it dies with the test binary) and waits
// until it accepts connections.
func (c *Cluster) start() error {
	c.mu.Lock()
	if c.cmd != nil {
		select {
		case <-c.exited:
		default:
			c.mu.Unlock()
			return errors.New("postgres is already running")
		}
	}
	logf, err := os.OpenFile(c.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.dataDir())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr(c.cred)
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.mu.Unlock()
		return err
	}
	logf.Close()
	exited := make(chan struct{})
	c.cmd, c.exited = cmd, exited
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		c.exitErr = err
		c.mu.Unlock()
		close(exited)
	}()
	c.mu.Unlock()

	deadline := time.Now().Add(clusterStartTimeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("postgres exited while starting: %v", c.exitError())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.URL())
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(context.Background())
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return fmt.Errorf("postgres did not accept connections within %s: %v", clusterStartTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) exitError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitErr
}

// stop runs pg_ctl stop with mode and waits for the server process to be gone.
func (c *Cluster) stop(mode string) {
	c.t.Helper()
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil {
		c.t.Fatalf("harness: stop postgres: it was never started")
	}
	select {
	case <-exited:
		c.t.Fatalf("harness: stop postgres: it is not running (%v)\n%s", c.exitError(), c.Log())
	default:
	}
	if out, err := c.run("pg_ctl", "stop", "-D", c.dataDir(), "-m", mode, "-w", "-t", "60"); err != nil {
		c.t.Fatalf("harness: pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("harness: postgres still running 30s after pg_ctl stop -m %s", mode)
	}
}

// cleanup stops the server if it runs, at once: the test is over.
func (c *Cluster) cleanup() {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
	default:
		if c.t.Failed() {
			c.t.Logf("postgres log (%s):\n%s", c.logFile, c.Log())
		}
		_, _ = c.run("pg_ctl", "stop", "-D", c.dataDir(), "-m", "immediate", "-w", "-t", "30")
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		return
	}
	if c.t.Failed() {
		c.t.Logf("postgres log (%s):\n%s", c.logFile, c.Log())
	}
}

// run runs one of the cluster's programs as the cluster's user and returns its output.
func (c *Cluster) run(program string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, program), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = childAttr(c.cred)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// postgresBin finds the directory of the PostgreSQL server binaries.
func postgresBin() (string, error) {
	if dir := os.Getenv("COORDINATOR_TEST_PG_BIN"); dir != "" {
		return dir, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool { return pgVersion(matches[i]) < pgVersion(matches[j]) })
	for i := len(matches) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(matches[i], "initdb")); err == nil {
			return matches[i], nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, postgres, pg_ctl): install Debian's postgresql, or set COORDINATOR_TEST_PG_BIN")
}

func pgVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// postgresUser is the credential of the "postgres" user, which initdb and postgres run as
// when the tests run as root.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("initdb and postgres refuse root: create a postgres user (useradd --system postgres): %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user postgres has a non-numeric uid %q or gid %q", u.Uid, u.Gid)
	}
	// No supplementary groups: the server must not keep the test's (root's) groups.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for a test that
// must know a port before anything listens on it (StartClusterOnPort, a --listen address).
// Another process may take it in between: the test should be ready to fail then.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return port
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. It is drawn from
// below the kernel's ephemeral range when there is room there: the ports the kernel hands
// to outgoing connections (and to listeners on port 0) come from that range, so a port
// below it stays free until whoever asked for it listens, unless another caller of
// freePort drew the same one.
func freePort() (int, error) {
	if low := ephemeralLow(); low > minFreePort+1000 {
		for range 50 {
			port := minFreePort + mrand.IntN(low-minFreePort)
			if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				_ = ln.Close()
				return port, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// minFreePort is the lowest port freePort draws: above the well-known services'.
const minFreePort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, 0 if unknown.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return 0
	}
	low, _ := strconv.Atoi(fields[0])
	return low
}
