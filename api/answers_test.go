package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/metrics"
)

// answerServer is the API on a test store with the bounds on answers of opts, its metrics
// read from m.
type answerServer struct {
	url string
	svc *coordinator.Service
	m   *metrics.Metrics
}

func newAnswerServer(t *testing.T, opts Options) *answerServer {
	t.Helper()
	s := &answerServer{svc: coordinator.NewService(testStore(t), nil), m: metrics.New(metrics.Options{Version: "test", Store: "test"})}
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.RequestTimeout = time.Minute
	opts.Metrics = s.m
	ts := httptest.NewServer(NewHandler(s.svc, opts))
	t.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

// metric is the value of the series of m whose line starts with series.
func metricValue(t *testing.T, m *metrics.Metrics, series string) float64 {
	t.Helper()
	var buf bytes.Buffer
	if _, err := m.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(buf.String()) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no series %s in the metrics:\n%s", series, buf.String())
	return 0
}

// checkpointsWith opens n checkpoints of job j (one participant, p), each committed by a
// vote whose committables are a JSON array of one string, size bytes in all.
func (s *answerServer) checkpointsWith(t *testing.T, n, size int) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := s.svc.PutJob(ctx, "j", coordinator.JobConfig{Participants: []string{"p"},
		CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	reg, err := s.svc.Register(ctx, "j", "p")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		cp, _, err := s.svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
		if err != nil {
			t.Fatal(err)
		}
		committables := fmt.Sprintf(`["%d%s"]`, i, strings.Repeat("x", size-4-len(strconv.Itoa(i))))
		if _, err := s.svc.VoteAndWait(ctx, "j", cp.ID, "p", coordinator.Vote{Epoch: reg.Epoch, Kind: coordinator.VotePrepared,
			Committables: []byte(committables)}, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPageBytes(t *testing.T) { onEachStore(t, testPageBytes) }

// testPageBytes: a page of checkpoints ends once its encoding reaches MaxPageBytes, with a
// next_cursor from which the pages that follow hold the rest, in order, none skipped; a
// checkpoint larger than the budget is a page by itself.
func testPageBytes(t *testing.T) {
	s := newAnswerServer(t, Options{})
	const n, size = 9, 300 << 10
	s.checkpointsWith(t, n, size)
	for _, list := range []struct {
		path string
		ids  []int64 // in the list's order
	}{
		{"/v1/jobs/j/checkpoints?limit=1000", []int64{9, 8, 7, 6, 5, 4, 3, 2, 1}},
		{"/v1/checkpoints?limit=1000", []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}},
	} {
		var got []int64
		pages := 0
		for path := list.path; ; pages++ {
			if pages > n {
				t.Fatalf("%s: more pages than checkpoints", list.path)
			}
			resp, err := http.Get(s.url + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
			}
			var page CheckpointList
			if err := json.Unmarshal(body, &page); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if len(body) > MaxPageBytes+size+4<<10 {
				t.Errorf("%s: a page of %d bytes, more than %d and one checkpoint", path, len(body), MaxPageBytes)
			}
			for _, cp := range page.Items {
				got = append(got, cp.Id)
				if len(cp.Participants) != 1 || len(cp.Participants[0].Committables) != size {
					t.Fatalf("%s: checkpoint %d does not carry its committables", path, cp.Id)
				}
			}
			if page.NextCursor == nil {
				break
			}
			path = list.path + "&cursor=" + *page.NextCursor
		}
		if fmt.Sprint(got) != fmt.Sprint(list.ids) {
			t.Errorf("%s: the pages held %v, want %v", list.path, got, list.ids)
		}
		if pages < 2 {
			t.Errorf("%s: %d checkpoints of %d bytes came in one page", list.path, n, size)
		}
	}

	// One checkpoint larger than the budget is a page of its own.
	big := newAnswerServer(t, Options{MaxBodyBytes: 2 << 20})
	big.checkpointsWith(t, 2, MaxPageBytes+1000)
	resp, err := http.Get(big.url + "/v1/jobs/j/checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	var page CheckpointList
	err = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil || len(page.Items) != 1 || page.Items[0].Id != 2 || page.NextCursor == nil {
		t.Errorf("a page of checkpoints larger than the budget: %v, %d items, next_cursor %v; want checkpoint 2 and a cursor",
			err, len(page.Items), page.NextCursor)
	}
}

// unreadRequest sends a GET of path on a connection whose client reads nothing, with a
// receive buffer kept small, and returns the connection.
func unreadRequest(t *testing.T, base, path string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return conn
}

// awaitMetric waits until the series has the value want (the server's own accounting, as
// it gets to it), failing after a generous bound.
func awaitMetric(t *testing.T, m *metrics.Metrics, series string, ok func(float64) bool, what string) float64 {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		v := metricValue(t, m, series)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is still %v", what, series, v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAnswerBytesBound: answers that their clients do not read count against
// MaxAnswerBytes; past it a read of a checkpoint or of a page of them answers 503 with
// Retry-After and reads nothing; once those clients go, the bytes are let go and reads are
// served again.
func TestAnswerBytesBound(t *testing.T) { onEachStore(t, testAnswerBytesBound) }

func testAnswerBytesBound(t *testing.T) {
	const size = 8 << 20 // more than the kernel buffers of one connection
	s := newAnswerServer(t, Options{MaxBodyBytes: size + 1<<20, MaxAnswerBytes: size + size/2})
	s.checkpointsWith(t, 1, size)
	const held = "coordinator_http_answer_bytes_in_flight"

	conn := unreadRequest(t, s.url, "/v1/jobs/j/checkpoints/1")
	got := awaitMetric(t, s.m, held, func(v float64) bool { return v >= size }, "a checkpoint asked for and not read")
	if got > size+size/2 {
		t.Errorf("%s = %v, past the bound %d", held, got, size+size/2)
	}
	for _, path := range []string{"/v1/jobs/j/checkpoints/1", "/v1/jobs/j/checkpoints", "/v1/checkpoints"} {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		p := decodeProblem(t, resp, http.StatusServiceUnavailable, codeUnavailable)
		if resp.Header.Get("Retry-After") == "" || p.Detail == nil || !strings.Contains(*p.Detail, "--max-answer-bytes") {
			t.Errorf("GET %s past the bound: Retry-After %q, detail %v", path, resp.Header.Get("Retry-After"), p.Detail)
		}
	}
	if v := metricValue(t, s.m, `coordinator_http_shed_requests_total{reason="answer_bytes"}`); v != 3 {
		t.Errorf("answers refused for their bytes: %v, want 3", v)
	}
	// A participant's pending is never refused for it (it carries no committables here).
	if resp, err := http.Get(s.url + "/v1/jobs/j/participants/p/pending"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
		t.Errorf("pending past the bound: %d", resp.StatusCode)
	}

	conn.Close()
	awaitMetric(t, s.m, held, func(v float64) bool { return v == 0 }, "the client that did not read went away")
	resp, err := http.Get(s.url + "/v1/jobs/j/checkpoints/1")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n < size {
		t.Errorf("once the bytes were let go: %d, %d bytes", resp.StatusCode, n)
	}
}

// TestLargeAnswerWriteTimeout: a client that does not read a large answer is cut off once
// LargeAnswerWriteTimeout has passed, and what its answer held is let go, while it still
// holds its connection open.
func TestLargeAnswerWriteTimeout(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		const size = 8 << 20
		s := newAnswerServer(t, Options{MaxBodyBytes: size + 1<<20, LargeAnswerWriteTimeout: 300 * time.Millisecond})
		s.checkpointsWith(t, 1, size)
		conn := unreadRequest(t, s.url, "/v1/jobs/j/checkpoints/1")
		const held = "coordinator_http_answer_bytes_in_flight"
		awaitMetric(t, s.m, held, func(v float64) bool { return v >= size }, "a checkpoint asked for and not read")
		awaitMetric(t, s.m, held, func(v float64) bool { return v == 0 }, "past the write timeout")
		// The client, reading at last, finds the answer cut short.
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return // cut before the headers were read: cut off all the same
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && n >= size {
			t.Errorf("the answer was read whole (%d bytes) after the write timeout", n)
		}
	})
}
