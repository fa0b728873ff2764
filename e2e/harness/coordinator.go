package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
)

const (
	// coordinatorStartTimeout bounds the wait for the "listening" line: migrations and the
	// start-up sweep come first.
	coordinatorStartTimeout = 60 * time.Second
	// coordinatorStopTimeout bounds a graceful stop (SIGTERM to exit).
	coordinatorStopTimeout = 30 * time.Second
	// logLines is how many lines of output a Coordinator keeps for failure messages.
	logLines = 400
)

// processes numbers the coordinator processes this test binary starts.
var processes atomic.Int64

// Coordinator is the coordinator binary running as a process on 127.0.0.1, started by
// StartCoordinator. Its address does not change across Restart, so BaseURL, Client and
// HTTP stay valid for the whole test.
//
// Kill, Stop and Restart may be called from any goroutine, one at a time.
type Coordinator struct {
	// BaseURL is http://127.0.0.1:<port>, the same across restarts.
	BaseURL string
	// Addr is 127.0.0.1:<port>.
	Addr string
	// Client is the generated client on BaseURL, using HTTP.
	Client *coordinatorclient.ClientWithResponses
	// HTTP is a client for raw requests: loopback only, 30 s timeout per request.
	// Client and HTTP send no token; WithToken and Admin return clients that do.
	HTTP *http.Client
	// AdminToken is the admin token the coordinator was started with (--admin-token-file
	// among its flags, e.g. from AdminTokenFile), "" without one: authentication is off.
	AdminToken string

	t      testing.TB
	bin    string
	args   []string // every flag but --listen
	logs   *tail
	listen string // what --listen gets on a restart: Addr, or the host first listened on with its port

	mu          sync.Mutex
	cmd         *exec.Cmd
	exited      chan struct{}
	listening   chan logLine // gets the current process's "listening" line
	state       *os.ProcessState
	listeningAt time.Time
	listeningLn []byte // the current process's "listening" line
	starts      int
	appName     string // the current process's application_name in the database
}

// StartCoordinator builds the coordinator (once) and runs it with --database-url dbURL,
// --listen 127.0.0.1:0, --log-format json and extraArgs, then waits for its "listening"
// line. extraArgs must not set --listen or --log-format. t.Cleanup kills the process if it
// still runs, and prints the tail of its log if the test failed.
func StartCoordinator(t testing.TB, dbURL string, extraArgs ...string) *Coordinator {
	t.Helper()
	c := newCoordinator(t, dbURL, extraArgs)
	if err := c.start("127.0.0.1:0"); err != nil {
		t.Fatalf("harness: start coordinator: %v\n%s", err, c.logs.String())
	}
	return c
}

// LaunchCoordinator starts the coordinator as StartCoordinator does, on the address
// listen (127.0.0.1:port, from FreePort), but returns as soon as the process runs, without
// waiting for its "listening" line: for tests of what it does before it serves, such as
// waiting for its database (--database-wait). WaitListening waits for the line; Exited
// and ExitCode tell how the process ended. BaseURL, Client and HTTP are set at once.
//
// listen may also have port 0 or an unspecified host (0.0.0.0:0, for the tests of where
// the coordinator agrees to listen): then WaitListening sets Addr, BaseURL, Client and
// HTTP from the "listening" line, on 127.0.0.1 when the host is unspecified, and Restart
// listens on the same host and port again.
func LaunchCoordinator(t testing.TB, listen, dbURL string, extraArgs ...string) *Coordinator {
	t.Helper()
	c := newCoordinator(t, dbURL, extraArgs)
	if dialable(listen) == listen && !strings.HasSuffix(listen, ":0") {
		c.Addr, c.BaseURL, c.listen = listen, "http://"+listen, listen
		c.newClients()
	}
	if err := c.launch(listen); err != nil {
		t.Fatalf("harness: launch coordinator: %v", err)
	}
	return c
}

// WaitListening waits up to timeout for the current process's "listening" line, and
// fails the test if the process exits first or the line does not come in time.
func (c *Coordinator) WaitListening(timeout time.Duration) {
	c.t.Helper()
	if err := c.awaitListening(timeout); err != nil {
		c.t.Fatalf("harness: coordinator: %v\n%s", err, c.logs.String())
	}
	c.newClients()
}

// ExitCode is the exit status of the current process, and whether it exited at all.
func (c *Coordinator) ExitCode() (code int, exited bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || running(c.exited) || c.state == nil {
		return 0, false
	}
	return c.state.ExitCode(), true
}

func newCoordinator(t testing.TB, dbURL string, extraArgs []string) *Coordinator {
	t.Helper()
	c := &Coordinator{
		t:          t,
		bin:        BuildCoordinator(t),
		args:       append([]string{"--database-url", dbURL, "--log-format", "json"}, extraArgs...),
		logs:       newTail(logLines),
		AdminToken: adminTokenOf(t, extraArgs),
	}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("coordinator log (%s, last %d lines):\n%s", c.BaseURL, logLines, c.logs.String())
		}
	})
	return c
}

// newClients sets HTTP and Client, on BaseURL.
func (c *Coordinator) newClients() {
	c.t.Helper()
	if c.Client != nil {
		return
	}
	c.HTTP = &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		},
	}
	client, err := coordinatorclient.NewClientWithResponses(c.BaseURL, coordinatorclient.WithHTTPClient(c.HTTP))
	if err != nil {
		c.t.Fatalf("harness: client: %v", err)
	}
	c.Client = client
}

// Kill sends SIGKILL and waits for the process to be gone. It is a no-op if the process
// is not running.
func (c *Coordinator) Kill() {
	c.t.Helper()
	c.kill()
}

// KillSettled kills the process as Kill does, then waits until the database has no
// session of it left: from then on nothing the killed process started can still change
// the database (a transaction whose COMMIT reached PostgreSQL before the kill has
// committed, every other one has rolled back). The process's sessions are told apart by
// their application_name, which the harness sets (PGAPPNAME) for each process it starts.
func (c *Coordinator) KillSettled() {
	c.t.Helper()
	c.mu.Lock()
	appName := c.appName
	c.mu.Unlock()
	c.kill()
	url := c.databaseURL()
	if strings.Contains(url, "application_name") {
		// The URL's name would win over PGAPPNAME, and the wait would see no session.
		c.t.Fatalf("harness: KillSettled needs a --database-url without application_name")
	}
	ctx, cancel := context.WithTimeout(context.Background(), coordinatorStopTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		c.t.Fatalf("harness: connect to see the killed coordinator's sessions end: %v", err)
	}
	defer conn.Close(context.Background())
	for {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", appName).Scan(&n)
		if err != nil {
			c.t.Fatalf("harness: the killed coordinator's sessions did not end: %v", err)
		}
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// databaseURL is the --database-url the coordinator was started with.
func (c *Coordinator) databaseURL() string {
	for i, a := range c.args[:len(c.args)-1] {
		if a == "--database-url" {
			return c.args[i+1]
		}
	}
	c.t.Fatalf("harness: the coordinator has no --database-url")
	return ""
}

// Stop sends SIGTERM and expects a graceful exit with status 0 within 30 s; anything else
// fails the test.
func (c *Coordinator) Stop() {
	c.t.Helper()
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil || !running(exited) {
		c.t.Fatalf("harness: stop coordinator: it is not running")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(coordinatorStopTimeout):
		_ = cmd.Process.Kill()
		<-exited
		c.t.Fatalf("harness: coordinator did not exit within %s of SIGTERM\n%s", coordinatorStopTimeout, c.logs.String())
	}
	if state := c.exitState(); state == nil || state.ExitCode() != 0 {
		c.t.Errorf("harness: coordinator exited with %v after SIGTERM, want status 0\n%s", state, c.logs.String())
	}
}

// Restart starts the coordinator again on the same address with the same flags, after
// killing it (SIGKILL) if it still runs, and waits for its "listening" line.
func (c *Coordinator) Restart() {
	c.t.Helper()
	c.kill()
	var err error
	// After a kill the port is free at once; the retries cover the rare case where the
	// kernel handed it to an outgoing connection meanwhile.
	for attempt := 0; attempt < 50; attempt++ {
		if err = c.start(c.listen); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("harness: restart coordinator: %v\n%s", err, c.logs.String())
	}
}

// Running reports whether the process runs.
func (c *Coordinator) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil && running(c.exited)
}

// Exited is closed when the current process exits (for whatever reason).
func (c *Coordinator) Exited() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exited
}

// ListeningAt is the time the current process logged its "listening" line, by its own
// clock: everything the coordinator did before serving happened before it.
func (c *Coordinator) ListeningAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listeningAt
}

// Starts is how many processes were started so far, the first included.
func (c *Coordinator) Starts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts
}

// Logs returns the last lines the coordinator wrote, of every process started so far.
func (c *Coordinator) Logs() string { return c.logs.String() }

func running(exited chan struct{}) bool {
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

func (c *Coordinator) exitState() *os.ProcessState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func (c *Coordinator) kill() {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil || !running(exited) {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// start runs one process listening on listen and waits for its "listening" line.
func (c *Coordinator) start(listen string) error {
	if err := c.launch(listen); err != nil {
		return err
	}
	if err := c.awaitListening(coordinatorStartTimeout); err != nil {
		c.kill()
		return err
	}
	c.newClients()
	return nil
}

// launch runs one process listening on listen.
func (c *Coordinator) launch(listen string) error {
	c.mu.Lock()
	c.starts++
	n := c.starts
	c.mu.Unlock()
	c.logs.add(fmt.Sprintf("=== harness: start #%d on %s ===", n, listen))

	listening := make(chan logLine, 1)
	out := &lineWriter{fn: func(line []byte) {
		c.logs.add(string(line))
		var l logLine
		if bytes.Contains(line, []byte(`"listening"`)) && json.Unmarshal(line, &l) == nil && l.Msg == "listening" {
			l.raw = append([]byte(nil), line...)
			select {
			case listening <- l:
			default:
			}
		}
	}}
	args := append([]string{"--listen", listen}, c.args...)
	cmd := exec.Command(c.bin, args...)
	appName := fmt.Sprintf("coordinator-test-%d-%d", os.Getpid(), processes.Add(1))
	cmd.Env = append(coordinatorEnv(), "PGAPPNAME="+appName)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childAttr(nil)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // returns once the output is copied
		out.flush()
		c.mu.Lock()
		c.state = cmd.ProcessState
		c.mu.Unlock()
		c.logs.add(fmt.Sprintf("=== harness: process %d exited: %v ===", cmd.Process.Pid, cmd.ProcessState))
		close(exited)
	}()
	c.mu.Lock()
	c.cmd, c.exited, c.listening, c.state, c.listeningLn, c.appName = cmd, exited, listening, nil, nil, appName
	c.mu.Unlock()
	return nil
}

// awaitListening waits up to timeout for the current process's "listening" line.
func (c *Coordinator) awaitListening(timeout time.Duration) error {
	c.mu.Lock()
	exited, listening := c.exited, c.listening
	c.mu.Unlock()
	select {
	case l := <-listening:
		if l.Addr == "" {
			return errors.New(`the "listening" line has no addr`)
		}
		c.mu.Lock()
		c.listeningAt, c.listeningLn = l.Time, l.raw
		c.mu.Unlock()
		if c.Addr == "" {
			c.listen = l.Addr
			c.Addr = dialable(l.Addr)
			c.BaseURL = "http://" + c.Addr
		}
		return nil
	case <-exited:
		logs := c.logs.String()
		if strings.Contains(logs, "address already in use") {
			return fmt.Errorf("address already in use: exited with %v", c.exitState())
		}
		return fmt.Errorf("the coordinator exited with %v before listening", c.exitState())
	case <-time.After(timeout):
		return fmt.Errorf("no \"listening\" line within %s", timeout)
	}
}

// logLine is what the harness reads from the coordinator's JSON log lines.
type logLine struct {
	Time time.Time `json:"time"`
	Msg  string    `json:"msg"`
	Addr string    `json:"addr"`
	raw  []byte
}

// dialable is addr (host:port of a listener) with an unspecified host (0.0.0.0, ::)
// replaced by 127.0.0.1, which reaches it.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// ListeningLine is the current process's "listening" log line, decoded (addr, scheme,
// auth, ...); nil before it came.
func (c *Coordinator) ListeningLine() map[string]any {
	c.mu.Lock()
	raw := c.listeningLn
	c.mu.Unlock()
	if raw == nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil
	}
	return m
}

// coordinatorEnv is the test's environment without the coordinator's own settings, so
// that a developer's COORDINATOR_LISTEN or the like cannot change what the test runs.
func coordinatorEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "COORDINATOR_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// lineWriter calls fn for every complete line written to it.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	fn  func([]byte)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.fn(w.buf)
		w.buf = nil
	}
}
