package loadtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The kinds of request the fleet makes, as the counting transport classifies them.
const (
	reqPutJob = iota
	reqGetJob
	reqRegister
	reqPendingWait // GET .../pending?wait_ms=: the idle participant's long-poll
	reqPending
	reqOpen            // POST .../checkpoints
	reqListCheckpoints // GET .../checkpoints
	reqCheckpointWait  // GET .../checkpoints/{id}?wait_ms=
	reqCheckpoint
	reqVote
	reqAck
	reqOther
	reqKinds
)

var reqKindNames = [reqKinds]string{
	"put_job", "get_job", "register", "pending_wait", "pending", "open_checkpoint", "list_checkpoints",
	"checkpoint_wait", "checkpoint", "vote", "ack", "other",
}

// classifyRequest names the kind of a request of the coordinator's API.
func classifyRequest(r *http.Request) int {
	path := r.URL.Path
	i := strings.Index(path, "/v1/jobs/")
	if i < 0 {
		return reqOther
	}
	seg := strings.Split(strings.Trim(path[i+len("/v1/jobs/"):], "/"), "/") // job, ...
	wait := r.URL.Query().Get("wait_ms")
	waits := wait != "" && wait != "0"
	get := r.Method == http.MethodGet
	switch {
	case len(seg) == 1 && r.Method == http.MethodPut:
		return reqPutJob
	case len(seg) == 1 && get:
		return reqGetJob
	case len(seg) == 4 && seg[1] == "participants" && seg[3] == "register":
		return reqRegister
	case len(seg) == 4 && seg[1] == "participants" && seg[3] == "pending":
		if waits {
			return reqPendingWait
		}
		return reqPending
	case len(seg) == 2 && seg[1] == "checkpoints" && r.Method == http.MethodPost:
		return reqOpen
	case len(seg) == 2 && seg[1] == "checkpoints" && get:
		return reqListCheckpoints
	case len(seg) == 3 && seg[1] == "checkpoints" && get:
		if waits {
			return reqCheckpointWait
		}
		return reqCheckpoint
	case len(seg) == 5 && seg[1] == "checkpoints" && seg[3] == "votes":
		return reqVote
	case len(seg) == 5 && seg[1] == "checkpoints" && seg[3] == "acks":
		return reqAck
	}
	return reqOther
}

// countingTransport counts the requests the fleet's participants and triggers make, by
// kind and outcome, and the connections they dial.
type countingTransport struct {
	base *http.Transport

	sent, ok, failed, canceled [reqKinds]atomic.Int64 // failed: a transport error, or not 2xx
	dials                      atomic.Int64

	mu       sync.Mutex
	statuses map[string]int64 // "kind status" or "kind transport", for answers that are not 2xx
	examples map[string]string
}

// newCountingTransport returns a transport for conns simultaneous connections to one
// host: each participant's Runner holds one long-poll open while idle.
func newCountingTransport(conns int, http2, tls bool) *countingTransport {
	t := &countingTransport{statuses: map[string]int64{}, examples: map[string]string{}}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	t.base = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			t.dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        0, // no bound overall
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	if http2 {
		t.base.Protocols = new(http.Protocols)
		if tls {
			t.base.Protocols.SetHTTP2(true) // negotiated by ALPN
		} else {
			// As coordinatorclient.Options.UnencryptedHTTP2 does: prior knowledge.
			t.base.Protocols.SetUnencryptedHTTP2(true)
		}
	}
	return t
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	kind := classifyRequest(r)
	t.sent[kind].Add(1)
	resp, err := t.base.RoundTrip(r)
	switch {
	case err != nil && (errors.Is(err, context.Canceled) || r.Context().Err() == context.Canceled):
		t.canceled[kind].Add(1) // the caller gave up (a Runner's decision watch, the end of the run)
	case err != nil:
		t.failed[kind].Add(1)
		t.note(reqKindNames[kind]+" transport", err.Error())
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		t.failed[kind].Add(1)
		key := reqKindNames[kind] + " " + strconv.Itoa(resp.StatusCode)
		if r.Context().Err() != nil {
			// Counted apart: an answer that came once the caller had given up (at the end
			// of the run, or a Trigger's tick out of time) is not one it acted on.
			key += afterGivingUp
		}
		t.noteAnswer(key, r, resp)
	default:
		t.ok[kind].Add(1)
	}
	return resp, err
}

// afterGivingUp ends the key of a failed answer that arrived after its request's context
// had ended.
const afterGivingUp = " after the caller gave up"

// note counts one failure under key, and keeps example as the key's example if it is the
// first; first says so.
func (t *countingTransport) note(key, example string) (first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.statuses[key]++
	if _, ok := t.examples[key]; !ok {
		t.examples[key] = example
		return true
	}
	return false
}

// exampleBodyBytes is how much of a failed answer's body its example keeps.
const exampleBodyBytes = 300

// noteAnswer counts a failed answer under key. The first one of each key is kept as its
// example with the start of its body: a problem document's code and detail, or the text
// net/http answers a request it could not read with, which tells the two apart. The
// body stays whole for the caller.
func (t *countingTransport) noteAnswer(key string, r *http.Request, resp *http.Response) {
	example := r.Method + " " + r.URL.Path
	if !t.note(key, example) {
		return
	}
	start, _ := io.ReadAll(io.LimitReader(resp.Body, exampleBodyBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(start), resp.Body), resp.Body}
	t.mu.Lock()
	t.examples[key] = example + " -> " + strconv.Quote(string(start))
	t.mu.Unlock()
}

// requestCounts is a copy of the counters at one time.
type requestCounts struct {
	sent, ok, failed, canceled [reqKinds]int64
	dials                      int64
	statuses                   map[string]int64
}

func (t *countingTransport) snapshot() requestCounts {
	var c requestCounts
	for k := range reqKinds {
		c.sent[k], c.ok[k], c.failed[k], c.canceled[k] = t.sent[k].Load(), t.ok[k].Load(), t.failed[k].Load(), t.canceled[k].Load()
	}
	c.dials = t.dials.Load()
	t.mu.Lock()
	c.statuses = make(map[string]int64, len(t.statuses))
	for k, n := range t.statuses {
		c.statuses[k] = n
	}
	t.mu.Unlock()
	return c
}

func (c requestCounts) total() int64 {
	var n int64
	for _, s := range c.sent {
		n += s
	}
	return n
}
