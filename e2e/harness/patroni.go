package harness

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PatroniCluster is PostgreSQL under Patroni on this machine: a local etcd (Debian's
// etcd-server) and two Patroni nodes (Debian's patroni), each managing a PostgreSQL of
// the local binaries on its own loopback port, one primary and one standby, with
// synchronous_mode on or off. The coordinators reach it through URL, which names both
// nodes with target_session_attrs=read-write, as a deployment under Patroni does.
type PatroniCluster struct {
	t    testing.TB
	dir  string
	cred *syscall.Credential
	etcd *exec.Cmd
	// etcdExited is closed when etcd exits.
	etcdExited chan struct{}
	Nodes      []*PatroniNode
	// URL is the multi-host URL of the database "postgres".
	URL string
	// Synchronous is whether synchronous_mode is on.
	Synchronous bool
}

// PatroniNode is one Patroni process and the PostgreSQL it manages.
type PatroniNode struct {
	Name     string
	PGPort   int
	APIPort  int
	dataDir  string
	config   string
	c        *PatroniCluster
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	logsPath string
}

// StartPatroni starts etcd and two Patroni nodes, and waits until node 0 leads and node
// 1 streams from it (and, with synchronous, is its synchronous standby).
func StartPatroni(t testing.TB, synchronous bool) *PatroniCluster {
	t.Helper()
	skipShort(t, "runs Patroni, etcd and PostgreSQL")
	for _, tool := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("harness: %s is required (Debian's patroni and etcd-server; scripts/test-env installs them): %v", tool, err)
		}
	}
	bin, err := postgresBin()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	cred, err := postgresUser()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	dir, err := os.MkdirTemp("", "coordinator-patroni-")
	if err != nil {
		t.Fatal(err)
	}
	c := &PatroniCluster{t: t, dir: dir, cred: cred, Synchronous: synchronous}
	t.Cleanup(c.cleanup)
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}

	clientPort := c.startEtcd()

	var hosts []string
	for i := range 2 {
		n := &PatroniNode{Name: fmt.Sprintf("node%d", i), PGPort: FreePort(t), APIPort: FreePort(t), c: c}
		n.dataDir = filepath.Join(dir, n.Name)
		n.config = filepath.Join(dir, n.Name+".yml")
		n.logsPath = filepath.Join(dir, n.Name+".log")
		if err := os.WriteFile(n.config, []byte(patroniConfig(n, bin, clientPort, synchronous, dir)), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, n)
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", n.PGPort))
	}
	c.URL = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2", strings.Join(hosts, ","))

	// Node 0 first, so that it bootstraps and leads; then node 1 joins as its standby.
	c.Nodes[0].Start()
	if _, err := c.WaitLeader(60 * time.Second); err != nil {
		t.Fatalf("harness: %v\n%s", err, c.Logs())
	}
	c.Nodes[1].Start()
	if err := c.WaitReplicaStreaming(90 * time.Second); err != nil {
		t.Fatalf("harness: %v\n%s", err, c.Logs())
	}
	return c
}

func patroniConfig(n *PatroniNode, bin string, etcdPort int, synchronous bool, dir string) string {
	return fmt.Sprintf(`scope: e2e
name: %[1]s
log:
  level: INFO
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd3:
  hosts: 127.0.0.1:%[3]d
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: %[4]t
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 200
        fsync: "on"
  initdb:
    - encoding: UTF8
    - auth: trust
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:%[5]d
  connect_address: 127.0.0.1:%[5]d
  data_dir: %[6]s
  bin_dir: %[7]s
  pgpass: %[8]s/pgpass-%[1]s
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
  parameters:
    unix_socket_directories: %[8]s
`, n.Name, n.APIPort, etcdPort, synchronous, n.PGPort, n.dataDir, bin, dir)
}

// Start starts the node's Patroni (which starts its PostgreSQL).
func (n *PatroniNode) Start() {
	n.mu.Lock()
	defer n.mu.Unlock()
	logs, err := os.OpenFile(n.logsPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		n.c.t.Fatal(err)
	}
	cmd := exec.Command("patroni", n.config)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Env = append(os.Environ(), "HOME="+n.c.dir)
	// Its own process group, so that killing the node kills its PostgreSQL too.
	attr := childAttr(n.c.cred)
	attr.Setpgid = true
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		n.c.t.Fatalf("harness: start patroni %s: %v", n.Name, err)
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	exited := n.exited
	go func() { _ = cmd.Wait(); logs.Close(); close(exited) }()
}

// KillPostgres kills the node's PostgreSQL (its postmaster, with SIGKILL), leaving Patroni
// running.
func (n *PatroniNode) KillPostgres() {
	pid := n.postmasterPID()
	if pid <= 0 {
		n.c.t.Fatalf("harness: %s has no running PostgreSQL", n.Name)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// KillNode kills Patroni and its PostgreSQL at once, as losing the machine would.
func (n *PatroniNode) KillNode() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if pid := n.postmasterPID(); pid > 0 {
		// Its backends and WAL senders too, at once: left alone, they notice their
		// postmaster's death only a moment later, and a WAL sender may still send a standby
		// what the machine's loss should have taken with it.
		children := childrenOf(pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for _, c := range children {
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
	}
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	// PostgreSQL's other processes end once their postmaster is gone.
}

func (n *PatroniNode) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(n.dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	var pid int
	fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "%d", &pid)
	return pid
}

// Role is what the node's Patroni says its PostgreSQL is ("primary", "replica", ...), and
// whether it is the synchronous standby; "" if it does not answer.
func (n *PatroniNode) Role() (role string, syncStandby bool) {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/patroni", n.APIPort))
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var st struct {
		Role        string `json:"role"`
		State       string `json:"state"`
		SyncStandby bool   `json:"sync_standby"`
		Replication []struct {
			SyncState string `json:"sync_state"`
		} `json:"replication"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.State != "running" {
		return "", false
	}
	if st.Role == "master" {
		st.Role = "primary"
	}
	return st.Role, st.SyncStandby
}

// WaitLeader waits until a node is a running primary and returns it.
func (c *PatroniCluster) WaitLeader(timeout time.Duration) (*PatroniNode, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if role, _ := n.Role(); role == "primary" {
				return n, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("no Patroni node became primary within %s", timeout)
}

// WaitReplicaStreaming waits until the leader streams to a standby: in synchronous mode,
// one that PostgreSQL itself reports as synchronous (pg_stat_replication's sync_state, as
// the leader's Patroni shows it) and that Patroni lists as the synchronous standby, so that
// a failover may promote it.
func (c *PatroniCluster) WaitReplicaStreaming(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if role, _ := n.Role(); role != "primary" {
				continue
			}
			states := n.replicationStates()
			for _, other := range c.Nodes {
				if other == n {
					continue
				}
				role, sync := other.Role()
				if role != "replica" {
					continue
				}
				for _, st := range states {
					if st.State == "streaming" && (!c.Synchronous || (st.SyncState == "sync" && sync)) {
						return nil
					}
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the leader did not stream to a %sstandby within %s", map[bool]string{true: "synchronous "}[c.Synchronous], timeout)
}

type replicationState struct {
	State     string `json:"state"`
	SyncState string `json:"sync_state"`
}

// replicationStates is pg_stat_replication of the node, as its Patroni shows it.
func (n *PatroniNode) replicationStates() []replicationState {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/patroni", n.APIPort))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var st struct {
		Replication []replicationState `json:"replication"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil
	}
	return st.Replication
}

// etcdStartTimeout bounds the wait for etcd to answer on its client port.
const etcdStartTimeout = 30 * time.Second

// startEtcd runs a one-member etcd on loopback ports and waits until it answers, and
// returns its client port. Its ports were free a moment before it started: if another
// process took one meanwhile, etcd exits, and it is started again on other ports.
func (c *PatroniCluster) startEtcd() int {
	c.t.Helper()
	logPath := filepath.Join(c.dir, "etcd.log")
	for attempt := 1; ; attempt++ {
		clientPort, peerPort := FreePort(c.t), FreePort(c.t)
		cmd := exec.Command("etcd", "--name", "e2e", "--data-dir", filepath.Join(c.dir, fmt.Sprintf("etcd-%d", attempt)),
			"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", clientPort),
			"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", clientPort),
			"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
			"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
			"--initial-cluster", fmt.Sprintf("e2e=http://127.0.0.1:%d", peerPort))
		logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			c.t.Fatal(err)
		}
		fmt.Fprintf(logFile, "=== harness: start #%d, client port %d, peer port %d ===\n", attempt, clientPort, peerPort)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = childAttr(nil)
		err = cmd.Start()
		_ = logFile.Close()
		if err != nil {
			c.t.Fatalf("harness: start etcd: %v", err)
		}
		c.etcd = cmd
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		c.etcdExited = exited
		err = awaitEtcd(clientPort, exited, etcdStartTimeout)
		if err == nil {
			return clientPort
		}
		if !running(exited) && attempt < 3 {
			continue // a port taken meanwhile, most likely: the log says
		}
		c.t.Fatalf("harness: etcd: %v\n%s", err, tailOf(logPath, 40))
	}
}

// awaitEtcd waits until etcd answers GET /health on port, or exited is closed, or timeout.
func awaitEtcd(port int, exited <-chan struct{}, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("it exited before it answered on port %d", port)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("it did not answer on port %d within %s (last: %v)", port, timeout, err)
		}
	}
}

// tailOf is the last n lines of the file at path.
func tailOf(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(string(data), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Logs returns the tail of etcd's log and of every node's, for failure messages.
func (c *PatroniCluster) Logs() string {
	var b strings.Builder
	fmt.Fprintf(&b, "=== etcd ===\n%s\n", tailOf(filepath.Join(c.dir, "etcd.log"), 20))
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "=== %s ===\n%s\n", n.Name, tailOf(n.logsPath, 40))
	}
	return b.String()
}

func (c *PatroniCluster) cleanup() {
	for _, n := range c.Nodes {
		n.KillNode()
	}
	if c.etcd != nil && c.etcd.Process != nil {
		_ = c.etcd.Process.Kill()
		<-c.etcdExited
	}
	if c.t.Failed() {
		c.t.Logf("Patroni logs:\n%s", c.Logs())
		if os.Getenv("COORDINATOR_TEST_KEEP") != "" {
			c.t.Logf("kept %s", c.dir)
			return
		}
	}
	_ = os.RemoveAll(c.dir)
}

// PauseWALSenders stops (SIGSTOP) the node's WAL senders, so that its standbys fall
// behind it (nothing more is sent: a paused receiver would still find in its socket what
// was sent meanwhile); the function returned resumes them (SIGCONT). It fails the test if
// the node sends no WAL.
func (n *PatroniNode) PauseWALSenders() (resume func()) {
	var paused []int
	for _, pid := range childrenOf(n.postmasterPID()) {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if strings.Contains(string(cmdline), "walsender") {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			paused = append(paused, pid)
		}
	}
	if len(paused) == 0 {
		n.c.t.Fatalf("harness: %s has no WAL sender", n.Name)
	}
	return func() {
		for _, pid := range paused {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// childrenOf returns the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: the fields after the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		if fields := strings.Fields(string(stat[i+1:])); len(fields) >= 2 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}
