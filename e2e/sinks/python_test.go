package sinks_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/api"
	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/e2e/pipeline"
	"github.com/twophase/coordinator/e2e/sinks"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// The Python participant (python/pysink.py, standard library only) speaks the REST API by
// hand: fed by the pipeline's source, SIGKILLed twice at random moments and restarted, it
// ends with every event exactly once. python3 must be installed: without it the test
// fails, it does not skip.
func TestPythonParticipant(t *testing.T) {
	t.Parallel()
	coord, url := coordinatorFor(t) // first: under -short it skips the test
	runPythonParticipant(t, coord, url, nil, 3000, 2)
}

// The same over HTTPS, with a bearer token: the sink trusts the coordinator's CA by
// --ca-file and sends its token from PYSINK_TOKEN; one SIGKILL.
func TestPythonParticipantTLSAndToken(t *testing.T) {
	t.Parallel()
	const token = "ctk_py-sink.s3cret"
	coord, url, caFile := tlsTokenCoordinatorFor(t, token)
	runPythonParticipant(t, coord, url, []string{"--ca-file", caFile}, 1000, 1, "PYSINK_TOKEN="+token)
}

// When another participant votes after it, the Python participant learns the decision from
// its own vote: its prepared vote waits for the decision (wait_ms), and it commits and acks
// without asking pending in between.
func TestPythonParticipantLearnsTheDecisionFromItsVote(t *testing.T) {
	t.Parallel()
	python, script := pythonSink(t)
	var seen pySinkRequests
	coord, url := coordinatorWrapped(t, seen.record)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := coord.PutJob(ctx, "pyv", cc.JobConfig{Participants: []string{"source", "py-sink", "late"}, CheckpointTimeoutMs: ptr(int64(10000))}); err != nil {
		t.Fatal(err)
	}
	socket, ln := sinkSocket(t)
	const total = 600
	src := &pipeline.Source{Coordinator: coord, Job: "pyv", Name: "source", Sinks: []string{"py-sink"}, Total: total, Rate: 1000, Listener: ln,
		Logger: slog.New(slog.DiscardHandler)}
	errs := make(chan error, 4)
	go func() { errs <- src.Run(ctx) }()
	go func() {
		errs <- cc.NewRunner(coord, "pyv", "source", cc.Participant[pipeline.Position](src), cc.RunnerOptions{}).Run(ctx)
	}()
	// "late" votes well after the Python participant has written its file and voted.
	go func() {
		errs <- cc.NewRunner(coord, "pyv", "late", cc.Participant[string](slowPreparer{500 * time.Millisecond}), cc.RunnerOptions{}).Run(ctx)
	}()
	trig := &cc.Trigger{Coordinator: coord, Job: "pyv", Interval: 100 * time.Millisecond}
	go func() { errs <- trig.Run(ctx) }()
	dir := t.TempDir()
	py := &pipeline.Process{Name: "pysink", Command: func() *exec.Cmd {
		return exec.Command(python, "-B", script, "--coordinator", url, "--job", "pyv", "--name", "py-sink", "--socket", socket, "--dir", dir)
	}}
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	defer py.Kill()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, pos, err := cc.RestorePoint[pipeline.Position](ctx, coord, "pyv", "source")
		if err == nil && len(pos) > 0 && pos[0].Next == total+1 {
			if open, err := coord.Checkpoints(ctx, "pyv", cc.Committing); err == nil && len(open) == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done; pysink output:\n%s", py.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for range 4 {
		<-errs
	}
	py.Kill()

	reqs := seen.list()
	waited := 0
	for i, r := range reqs {
		if r.method != http.MethodPut || !strings.Contains(r.path, "/votes/") || !strings.Contains(r.query, "wait_ms=") ||
			i+1 == len(reqs) { // the last request: the participant was stopped after it
			continue
		}
		if r.took >= 200*time.Millisecond {
			waited++ // held until "late" voted
		}
		ack := strings.Replace(r.path, "/votes/", "/acks/", 1)
		if reqs[i+1].path != ack {
			t.Errorf("after its vote %s (%v) the Python participant sent %+v; want the ack of that checkpoint", r.path, r.took, reqs[i+1])
		}
	}
	if waited < 2 {
		t.Errorf("%d of the Python participant's votes waited for the decision; want at least 2 (requests: %+v)", waited, reqs)
	}
	held, err := sinks.ReadFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if msg := sinks.Check(held, total); msg != "" {
		t.Error(msg)
	}
}

// slowPreparer is a participant whose Prepare takes a while.
type slowPreparer struct{ d time.Duration }

func (p slowPreparer) Prepare(ctx context.Context, _ int64) ([]string, error) {
	select {
	case <-time.After(p.d):
		return []string{"x"}, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
func (slowPreparer) Commit(context.Context, int64, []string) error { return nil }
func (slowPreparer) Abort(context.Context, int64, []string) error  { return nil }

// pySinkRequests records the requests of the participant py-sink, in the order they
// came (it sends one at a time).
type pySinkRequests struct {
	mu   sync.Mutex
	reqs []pySinkRequest
}

type pySinkRequest struct {
	method, path, query string
	took                time.Duration
}

func (s *pySinkRequests) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/py-sink") && !strings.Contains(r.URL.Path, "/py-sink/") {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		s.mu.Lock()
		i := len(s.reqs)
		s.reqs = append(s.reqs, pySinkRequest{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery})
		s.mu.Unlock()
		next.ServeHTTP(w, r)
		s.mu.Lock()
		s.reqs[i].took = time.Since(start)
		s.mu.Unlock()
	})
}

func (s *pySinkRequests) list() []pySinkRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// pythonSink returns the path of python3 and of python/pysink.py; a machine without
// python3 fails the test, it does not skip it.
func pythonSink(t *testing.T) (python, script string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required for the Python participant's test: %v", err)
	}
	script, err = filepath.Abs("python/pysink.py")
	if err != nil {
		t.Fatal(err)
	}
	return python, script
}

// sinkSocket listens on a new unix socket, for the source to feed a sink through, removed
// when the test ends (its directory is short-named: a socket's path is bounded).
func sinkSocket(t *testing.T) (string, net.Listener) {
	t.Helper()
	dir, err := os.MkdirTemp("", "py-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	return socket, ln
}

// runPythonParticipant runs python/pysink.py with args on the coordinator at url (coord
// being a client of it) until total events are committed, SIGKILLing it kills times on the
// way, and checks that every event was committed exactly once.
func runPythonParticipant(t *testing.T, coord *cc.Coordinator, url string, args []string, total int64, kills int64, env ...string) {
	t.Helper()
	python, script := pythonSink(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := coord.PutJob(ctx, "py", cc.JobConfig{Participants: []string{"source", "py-sink"}, CheckpointTimeoutMs: ptr(int64(5000))}); err != nil {
		t.Fatal(err)
	}
	socket, ln := sinkSocket(t)
	var srcLog lockedBuffer
	logger := slog.New(slog.NewTextHandler(&srcLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src := &pipeline.Source{Coordinator: coord, Job: "py", Name: "source", Sinks: []string{"py-sink"}, Total: total, Rate: 1000, Listener: ln, Logger: logger}
	errs := make(chan error, 3)
	go func() { errs <- src.Run(ctx) }()
	go func() {
		errs <- cc.NewRunner(coord, "py", "source", cc.Participant[pipeline.Position](src), cc.RunnerOptions{PollInterval: 10 * time.Millisecond, Logger: logger}).Run(ctx)
	}()
	trig := &cc.Trigger{Coordinator: coord, Job: "py", Interval: 100 * time.Millisecond}
	go func() { errs <- trig.Run(ctx) }()

	dir := t.TempDir()
	py := &pipeline.Process{Name: "pysink", Command: func() *exec.Cmd {
		cmd := exec.Command(python, append([]string{"-B", script, "--coordinator", url, "--job", "py", "--name", "py-sink", "--socket", socket, "--dir", dir}, args...)...)
		if len(env) > 0 {
			cmd.Env = append(os.Environ(), env...)
		}
		return cmd
	}}
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	defer py.Kill()
	defer func() {
		if t.Failed() {
			t.Logf("pysink output:\n%s", py.Output())
			t.Logf("source log:\n%s", srcLog.String())
		}
	}()
	committed := func() int64 {
		_, pos, err := cc.RestorePoint[pipeline.Position](ctx, coord, "py", "source")
		if err != nil || len(pos) == 0 {
			return 1
		}
		return pos[0].Next
	}
	deadline := time.Now().Add(90 * time.Second)
	for kill := int64(1); kill <= kills; kill++ {
		// Kill somewhere in the first or second third (of two kills), once it made progress.
		target := kill*total/(kills+1) - rand.Int64N(total/(2*(kills+1)))
		for committed() < target {
			if time.Now().After(deadline) {
				t.Fatalf("no progress: committed position %d", committed())
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		py.Kill()
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		if err := py.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for {
		// The position first: the checkpoint that holds the last events may become committing
		// between the two reads, and only a list read after it shows it.
		if committed() == total+1 {
			if open, err := coord.Checkpoints(ctx, "py", cc.Committing); err == nil && len(open) == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done: committed position %d", committed())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for range 3 {
		<-errs
	}
	py.Kill()
	if u := py.Unexpected(); len(u) > 0 {
		t.Errorf("the Python participant stopped by itself: %s", strings.Join(u, "; "))
	}
	held, err := sinks.ReadFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if msg := sinks.Check(held, total); msg != "" {
		t.Error(msg)
		logCheckpoints(t, coord, "py")
	}
	t.Logf("%d events, %d Python runs (%d SIGKILLs), %d checkpoints opened, %d source rewinds",
		total, py.Runs(), kills, trig.Opened(), src.Rewinds())
}

// tlsTokenCoordinatorFor is coordinatorFor over HTTPS, with a certificate for 127.0.0.1
// signed by a CA of the test's, that refuses with 401 every request whose Authorization
// is not exactly "Bearer <token>". It returns a client of it (with the token and the CA),
// its URL and the CA's PEM file.
func tlsTokenCoordinatorFor(t *testing.T, token string) (*cc.Coordinator, string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(store.Close)
	svc := coordinator.NewService(store, nil)
	go svc.RunSweeper(ctx, 50*time.Millisecond)
	handler := api.NewHandler(svc, api.Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute})
	var refused atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+token {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"type":"/problems/unauthorized","title":"Unauthorized","status":401,"code":"unauthorized"}`))
			return
		}
		handler.ServeHTTP(w, r)
	}))
	caPEM, cert := testServerCert(t)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		if n := refused.Load(); n > 0 {
			t.Errorf("%d requests without the token", n)
		}
	})
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	coord, err := cc.NewCoordinator(srv.URL, cc.Options{Token: token, RootCAs: roots, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return coord, srv.URL, caFile
}

// testServerCert makes a CA and a certificate for 127.0.0.1 and localhost signed by it,
// and returns the CA's PEM and the certificate with its key.
func testServerCert(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pysink test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(crand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(crand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func ptr[T any](v T) *T { return &v }

// logCheckpoints writes the job's history to the test log, to explain a failure.
func logCheckpoints(t *testing.T, coord *cc.Coordinator, job string) {
	cps, err := coord.Checkpoints(context.Background(), job)
	if err != nil {
		t.Logf("list checkpoints: %v", err)
		return
	}
	for i := len(cps) - 1; i >= 0; i-- {
		cp := cps[i]
		line := fmt.Sprintf("checkpoint %d %s", cp.Id, cp.Status)
		if cp.AbortReason != nil {
			line += " (" + *cp.AbortReason + ")"
		}
		for _, p := range cp.Participants {
			vote := "-"
			if p.Vote != nil {
				vote = string(*p.Vote)
			}
			line += fmt.Sprintf(" | %s %s %s acked=%v", p.Name, vote, p.Committables, p.AckedAt != nil)
		}
		t.Log(line)
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
