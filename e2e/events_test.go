package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// sse reads one event stream, as a client reads it.
type sse struct {
	t      *testing.T
	events chan sseEvent
	cancel context.CancelFunc
}

type sseEvent struct{ id, event, data string }

// follow opens GET path on c (with Last-Event-ID when lastID is not "") and reads it in the
// background until the test ends or the stream does.
func follow(t *testing.T, c *harness.Coordinator, path, lastID string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", c.BaseURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if c.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.AdminToken)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		body, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	s := &sse{t: t, events: make(chan sseEvent, 10000), cancel: cancel}
	go readEvents(resp, s.events)
	t.Cleanup(cancel)
	return s
}

// readEvents reads the events of resp into events, closed when the stream ends.
func readEvents(resp *http.Response, events chan<- sseEvent) {
	defer close(events)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var e sseEvent
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "":
			if e.data != "" {
				events <- e
			}
			e = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			e.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			e.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			e.data = line[6:]
		}
	}
}

// changes reads events until want status changes were seen (an event whose checkpoint's
// status differs from the one shown before for it), within 20 s, and returns them as
// "job/id status", with the id of the event of each.
func (s *sse) changes(want int) (changes, ids []string) {
	s.t.Helper()
	shown := map[string]string{}
	deadline := time.After(20 * time.Second)
	for len(changes) < want {
		select {
		case e, ok := <-s.events:
			if !ok {
				s.t.Fatalf("the stream ended after %v", changes)
			}
			if e.event != "checkpoint" {
				s.t.Fatalf("event %q %s after %v", e.event, e.data, changes)
			}
			var cp checkpoint
			if err := json.Unmarshal([]byte(e.data), &cp); err != nil {
				s.t.Fatal(err)
			}
			key := fmt.Sprintf("%s/%d", cp.Job, cp.Id)
			if shown[key] != string(cp.Status) {
				shown[key] = string(cp.Status)
				changes, ids = append(changes, key+" "+string(cp.Status)), append(ids, e.id)
			}
		case <-deadline:
			s.t.Fatalf("20 s and only %v", changes)
		}
	}
	return changes, ids
}

// quiet checks that no status change comes within d.
func (s *sse) quiet(d time.Duration, what string) {
	s.t.Helper()
	select {
	case e, ok := <-s.events:
		if ok {
			s.t.Errorf("%s: an extra event %s %.120s", what, e.event, e.data)
		}
	case <-time.After(d):
	}
}

// round runs checkpoint id of job through b: opened, both voted prepared, both acked.
func round(t *testing.T, b *api, job string, id int64, epochs map[string]int64) {
	t.Helper()
	if cp := b.prepare(t, job, ""); cp.Id != id {
		t.Fatalf("opened %d, want %d", cp.Id, id)
	}
	for _, p := range []string{"a", "b"} {
		b.vote(t, job, id, p, epochs[p], `["x"]`)
	}
	for _, p := range []string{"a", "b"} {
		b.ack(t, job, id, p, epochs[p])
	}
}

// TestEventStreamsAcrossCoordinators: a stream on one coordinator shows every status change
// made through another on the same database, in order; a reconnect to either, also after
// the first was killed and changes went on without it, gets exactly the status changes
// after its last id.
func TestEventStreamsAcrossCoordinators(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	a := harness.StartCoordinator(t, db)
	b := harness.StartCoordinator(t, db)
	viaB := newAPI(b)
	epochs := viaB.setupJob(t, "orders", `{"participants":["a","b"]}`, "a", "b")

	onA := follow(t, a, "/v1/jobs/orders/events", "")
	allOnA := follow(t, a, "/v1/events", "")
	time.Sleep(200 * time.Millisecond)
	round(t, viaB, "orders", 1, epochs)
	viaB.prepare(t, "orders", "")
	viaB.mustDo(t, "POST", cpPath("orders", 2)+"/abort", `{"reason":"by hand"}`, http.StatusOK, nil)

	want := []string{"orders/1 preparing", "orders/1 committing", "orders/1 committed", "orders/2 preparing", "orders/2 aborted"}
	got, ids := onA.changes(len(want))
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("A's stream of changes made through B: %v, want %v", got, want)
	}
	if all, _ := allOnA.changes(len(want)); strings.Join(all, ", ") != strings.Join(want, ", ") {
		t.Errorf("A's /v1/events: %v", all)
	}
	onA.quiet(300*time.Millisecond, "after the five changes")

	// Resuming on B from each id of A's stream: exactly what came after.
	for i, id := range ids {
		s := follow(t, b, "/v1/jobs/orders/events", id)
		if i+1 < len(want) {
			if rest, _ := s.changes(len(want) - i - 1); strings.Join(rest, ", ") != strings.Join(want[i+1:], ", ") {
				t.Errorf("resumed on B after %s: %v, want %v", want[i], rest, want[i+1:])
			}
		}
		s.quiet(200*time.Millisecond, "resumed on B after "+want[i])
		s.cancel()
	}

	// A is killed; rounds go on through B; A restarted gives, from the last id its stream
	// sent, every change made meanwhile.
	last := ids[len(ids)-1]
	a.Kill()
	round(t, viaB, "orders", 3, epochs)
	a.Restart()
	s := follow(t, a, "/v1/jobs/orders/events", last)
	want = []string{"orders/3 preparing", "orders/3 committing", "orders/3 committed"}
	if rest, _ := s.changes(len(want)); strings.Join(rest, ", ") != strings.Join(want, ", ") {
		t.Errorf("resumed on the restarted A: %v, want %v", rest, want)
	}
	s.quiet(200*time.Millisecond, "resumed on the restarted A")
}

// TestEventStreamCutsOffASlowReader: a client that stops reading is cut off (its
// connection closed) rather than buffered for, while the rounds go on: what the process
// keeps for its streams is the ring, bounded, whatever a reader does.
func TestEventStreamCutsOffASlowReader(t *testing.T) {
	t.Parallel()
	c := harness.StartCoordinator(t, pgtest.URL(t))
	viaC := newAPI(c)
	epochs := viaC.setupJob(t, "big", `{"participants":["a","b"]}`, "a", "b")

	// A reader with a small receive buffer that reads nothing after the head.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		_ = rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	conn, err := d.Dial("tcp", c.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/jobs/big/events HTTP/1.1\r\nHost: %s\r\n\r\n", c.Addr)
	head := make([]byte, 512)
	if n, err := conn.Read(head); err != nil || !strings.Contains(string(head[:n]), "200 OK") {
		t.Fatalf("the stream's head: %q, %v", head[:n], err)
	}

	// Rounds with 16 KiB of committables each: megabytes of events the reader never takes.
	committables := `["` + strings.Repeat("x", 16<<10) + `"]`
	start := time.Now()
	var rounds int64
	for rounds = 1; rounds <= 400 && time.Since(start) < 40*time.Second; rounds++ {
		viaC.prepare(t, "big", "")
		for _, p := range []string{"a", "b"} {
			viaC.vote(t, "big", rounds, p, epochs[p], committables)
		}
		for _, p := range []string{"a", "b"} {
			viaC.ack(t, "big", rounds, p, epochs[p])
		}
	}
	// A reader that takes nothing for longer than a write may wait (10 s) is given up on:
	// reading after that drains what was on its way, then EOF.
	time.Sleep(12 * time.Second)
	deadline := time.Now().Add(30 * time.Second)
	_ = conn.SetReadDeadline(deadline)
	n, err := io.Copy(io.Discard, conn)
	if err != nil {
		t.Fatalf("the slow reader's connection is still open %s after %d rounds (read %d bytes): %v", time.Since(start).Round(time.Second), rounds, n, err)
	}
	t.Logf("cut off after %d rounds; %d bytes were on their way", rounds, n)
}
