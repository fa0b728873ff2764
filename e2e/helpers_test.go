package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// Short names for the generated models.
type (
	checkpoint = coordinatorclient.Checkpoint
	job        = coordinatorclient.Job
	pending    = coordinatorclient.Pending
)

// api sends raw HTTP requests to one coordinator, as curl users and clients in other
// languages do. Its methods return errors instead of failing the test, so that goroutines
// can use them; the must* helpers are for the test's own goroutine.
//
// With authentication on, an api made by credentials.api sends every request with the
// token its route needs (credentials.forRoute): each participant its own, the trigger's
// for opening checkpoints, and so on. A request's own Authorization header wins.
type api struct {
	base string
	hc   *http.Client
	cred *credentials // nil: no token
	hist *history     // if not nil, records every request and its answer
}

func newAPI(c *harness.Coordinator) *api { return &api{base: c.BaseURL, hc: c.HTTP} }

// reply is an HTTP answer, read in full.
type reply struct {
	method, path string
	status       int
	header       http.Header
	body         []byte
	elapsed      time.Duration
	// sent and received are ledger times (see ledger.tick), set by workload.call.
	sent, received int64
}

func (r reply) String() string {
	return fmt.Sprintf("%s %s -> %d %s", r.method, r.path, r.status, bytes.TrimSpace(r.body))
}

// request is one raw HTTP request. A body is sent as application/json unless contentType
// says otherwise ("-" sends no Content-Type at all).
type request struct {
	method, path string
	body         string
	contentType  string
	header       map[string]string
}

func (a *api) send(ctx context.Context, r request) (reply, error) {
	if h := a.hist; h != nil {
		unrecorded := *a
		unrecorded.hist = nil
		return h.send(ctx, &unrecorded, r)
	}
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, a.base+r.path, body)
	if err != nil {
		return reply{}, err
	}
	switch {
	case r.contentType == "-":
	case r.contentType != "":
		req.Header.Set("Content-Type", r.contentType)
	case r.body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	if token := a.cred.forRoute(r.method, r.path); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := a.hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{method: r.method, path: r.path, status: resp.StatusCode, header: resp.Header, body: b, elapsed: time.Since(start)}, nil
}

// do sends a request with a JSON body ("" for none).
func (a *api) do(ctx context.Context, method, path, body string) (reply, error) {
	return a.send(ctx, request{method: method, path: path, body: body})
}

// must sends r and fails the test unless the answer has status want; it decodes a 2xx body
// into out (strictly: no unknown fields) when out is not nil.
func (a *api) must(t testing.TB, r request, want int, out any) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := a.send(ctx, r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	if rep.status != want {
		t.Fatalf("%v, want %d", rep, want)
	}
	checkAnswer(t, rep)
	if out != nil {
		dec := json.NewDecoder(bytes.NewReader(rep.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(out); err != nil {
			t.Fatalf("%v: decode: %v", rep, err)
		}
	}
	return rep
}

func (a *api) mustDo(t testing.TB, method, path, body string, want int, out any) reply {
	t.Helper()
	return a.must(t, request{method: method, path: path, body: body}, want, out)
}

// checkAnswer checks what every answer carries: an X-Request-Id, a JSON content type for
// any body, and for an error a complete problem document.
func checkAnswer(t testing.TB, rep reply) {
	t.Helper()
	if rep.header.Get("X-Request-Id") == "" {
		t.Errorf("%v: no X-Request-Id", rep)
	}
	if rep.status >= 400 {
		checkProblem(t, rep, rep.status, "")
		return
	}
	if rep.status != http.StatusNoContent && rep.header.Get("Content-Type") != "application/json" {
		t.Errorf("%v: Content-Type %q, want application/json", rep, rep.header.Get("Content-Type"))
	}
}

// problemDoc is an RFC 9457 problem document of the coordinator.
type problemDoc struct {
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Status     int         `json:"status"`
	Detail     string      `json:"detail"`
	Code       string      `json:"code"`
	RequestID  string      `json:"request_id"`
	Checkpoint *checkpoint `json:"checkpoint"`
	Missing    []string    `json:"missing"`
	Errors     []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

// problemError describes what is wrong with rep as a problem document of status and code
// (code "" accepts any), or returns nil.
func problemError(rep reply, status int, code string) error {
	if rep.status != status {
		return fmt.Errorf("%v: want status %d (%s)", rep, status, code)
	}
	if ct := rep.header.Get("Content-Type"); ct != "application/problem+json" {
		return fmt.Errorf("%v: Content-Type %q, want application/problem+json", rep, ct)
	}
	var p problemDoc
	if err := json.Unmarshal(rep.body, &p); err != nil {
		return fmt.Errorf("%v: not a problem document: %v", rep, err)
	}
	switch {
	case p.Type == "" || p.Title == "" || p.Detail == "":
		return fmt.Errorf("%v: problem without type, title or detail", rep)
	case p.Status != status:
		return fmt.Errorf("%v: problem status %d", rep, p.Status)
	case p.Code == "" || code != "" && p.Code != code:
		return fmt.Errorf("%v: code %q, want %q", rep, p.Code, code)
	}
	if status == http.StatusServiceUnavailable {
		if s, err := strconv.Atoi(rep.header.Get("Retry-After")); err != nil || s < 0 {
			return fmt.Errorf("%v: 503 with Retry-After %q, want seconds", rep, rep.header.Get("Retry-After"))
		}
	}
	return nil
}

// checkProblem fails the test unless rep is a problem document of status and code (""
// accepts any), and returns it.
func checkProblem(t testing.TB, rep reply, status int, code string) problemDoc {
	t.Helper()
	if err := problemError(rep, status, code); err != nil {
		t.Fatal(err)
	}
	var p problemDoc
	_ = json.Unmarshal(rep.body, &p)
	return p
}

// mustProblem sends r and checks that the answer is the problem status/code.
func (a *api) mustProblem(t testing.TB, r request, status int, code string) problemDoc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := a.send(ctx, r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	return checkProblem(t, rep, status, code)
}

// Paths.

func jobPath(job string) string { return "/v1/jobs/" + url.PathEscape(job) }

func cpPath(job string, id int64) string { return fmt.Sprintf("%s/checkpoints/%d", jobPath(job), id) }

func votePath(job string, id int64, p string) string { return cpPath(job, id) + "/votes/" + p }

func ackPath(job string, id int64, p string) string { return cpPath(job, id) + "/acks/" + p }

func registerPath(job, p string) string { return jobPath(job) + "/participants/" + p + "/register" }

func pendingPath(job, p string) string { return jobPath(job) + "/participants/" + p + "/pending" }

// Bodies.

func voteBody(epoch int64, committables string) string {
	if committables == "" {
		return fmt.Sprintf(`{"epoch":%d,"vote":"prepared"}`, epoch)
	}
	return fmt.Sprintf(`{"epoch":%d,"vote":"prepared","committables":%s}`, epoch, committables)
}

func abortVoteBody(epoch int64, reason string) string {
	r, _ := json.Marshal(reason)
	return fmt.Sprintf(`{"epoch":%d,"vote":"abort","reason":%s}`, epoch, r)
}

func ackBody(epoch int64) string { return fmt.Sprintf(`{"epoch":%d}`, epoch) }

// Small operations for the test's goroutine.

// setupJob creates job with config (a JobConfig as JSON) and registers each participant
// once; it returns their epochs.
func (a *api) setupJob(t testing.TB, name, config string, participants ...string) map[string]int64 {
	t.Helper()
	a.mustDo(t, "PUT", jobPath(name), config, http.StatusCreated, nil)
	epochs := map[string]int64{}
	for _, p := range participants {
		epochs[p] = a.register(t, name, p).Epoch
	}
	return epochs
}

func (a *api) register(t testing.TB, job, p string) coordinatorclient.Registration {
	t.Helper()
	var reg coordinatorclient.Registration
	a.mustDo(t, "POST", registerPath(job, p), "", http.StatusOK, &reg)
	return reg
}

func (a *api) prepare(t testing.TB, job, body string) checkpoint {
	t.Helper()
	var cp checkpoint
	a.mustDo(t, "POST", jobPath(job)+"/checkpoints", body, http.StatusCreated, &cp)
	return cp
}

func (a *api) get(t testing.TB, job string, id int64) checkpoint {
	t.Helper()
	var cp checkpoint
	a.mustDo(t, "GET", cpPath(job, id), "", http.StatusOK, &cp)
	return cp
}

func (a *api) getJob(t testing.TB, name string) job {
	t.Helper()
	var j job
	a.mustDo(t, "GET", jobPath(name), "", http.StatusOK, &j)
	return j
}

func (a *api) pending(t testing.TB, job, p string) pending {
	t.Helper()
	var pe pending
	a.mustDo(t, "GET", pendingPath(job, p), "", http.StatusOK, &pe)
	return pe
}

func (a *api) vote(t testing.TB, job string, id int64, p string, epoch int64, committables string) checkpoint {
	t.Helper()
	var cp checkpoint
	a.mustDo(t, "PUT", votePath(job, id, p), voteBody(epoch, committables), http.StatusOK, &cp)
	return cp
}

func (a *api) ack(t testing.TB, job string, id int64, p string, epoch int64) checkpoint {
	t.Helper()
	var cp checkpoint
	a.mustDo(t, "PUT", ackPath(job, id, p), ackBody(epoch), http.StatusOK, &cp)
	return cp
}

// listAll returns every checkpoint of job, lowest id first, following next_cursor.
func (a *api) listAll(ctx context.Context, job string) ([]checkpoint, error) {
	var all []checkpoint
	path := jobPath(job) + "/checkpoints?limit=1000"
	for {
		rep, err := a.do(ctx, "GET", path, "")
		if err != nil {
			return nil, err
		}
		if rep.status != http.StatusOK {
			return nil, fmt.Errorf("%v", rep)
		}
		var page coordinatorclient.CheckpointList
		if err := json.Unmarshal(rep.body, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil {
			break
		}
		path = jobPath(job) + "/checkpoints?limit=1000&cursor=" + url.QueryEscape(*page.NextCursor)
	}
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all, nil
}

func (a *api) mustListAll(t testing.TB, job string) []checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cps, err := a.listAll(ctx, job)
	if err != nil {
		t.Fatalf("list checkpoints of %s: %v", job, err)
	}
	return cps
}

// participant returns p's part of cp.
func participant(cp checkpoint, p string) *coordinatorclient.CheckpointParticipant {
	for i := range cp.Participants {
		if cp.Participants[i].Name == p {
			return &cp.Participants[i]
		}
	}
	return nil
}

// compact is the compact form of a JSON text, which the coordinator returns committables in.
func compact(t testing.TB, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("compact %s: %v", s, err)
	}
	return b.String()
}

// eventually retries fn every 20 ms until it returns nil or timeout passes.
func eventually(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

// runPython runs source, a Python 3 script, with input as JSON on its standard input, and
// returns what it printed and, for messages, its standard error; it fails the test if
// python3 is missing or the script exits with an error.
func runPython(t *testing.T, name, source string, input any) (stdout []byte, stderr string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required: %v", err)
	}
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(script, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script)
	cmd.Stdin = bytes.NewReader(in)
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	started := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 %s: %v\nstderr:\n%s\nstdout:\n%s", script, err, errBuf.String(), out)
	}
	t.Logf("the Python client ran for %s", time.Since(started).Round(time.Millisecond))
	return out, errBuf.String()
}
