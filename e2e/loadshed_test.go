package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// What one caller can take from everyone, through the binary: the memory of answers its
// clients do not read, and the long-poll slots.

// metricOf reads one series of the coordinator's /metrics (with the admin token), and
// whether it is there.
func metricOf(t *testing.T, c *harness.Coordinator, series string) (float64, bool) {
	t.Helper()
	resp, err := c.Admin().HTTP.Get(c.BaseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v, true
		}
	}
	return 0, false
}

// awaitSeries waits until series satisfies ok, failing after a generous bound (it waits
// for the coordinator to get to what it was asked, it measures no time).
func awaitSeries(t *testing.T, c *harness.Coordinator, series string, ok func(float64) bool, what string) float64 {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		v, found := metricOf(t, c, series)
		if !found {
			t.Fatalf("%s: the coordinator has no series %s", what, series)
		}
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is still %v", what, series, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUnreadAnswersAreBounded: clients that ask for large checkpoints and pages and read
// nothing (raw TCP, a small receive buffer) hold no more than --max-answer-bytes of the
// coordinator's memory, by its own count; past it a read gets 503 with Retry-After; a
// page of large checkpoints ends at about 1 MiB with a cursor to the rest; once the
// clients go, the memory is let go and reads are served.
func TestUnreadAnswersAreBounded(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t) // first: under -short it skips the test
	const size = 6 << 20   // a checkpoint's committables: more than a connection's kernel buffers
	const bound = 3 * size // --max-answer-bytes
	adminFile, _ := harness.AdminTokenFile(t)
	c := harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile,
		"--max-body-bytes", strconv.Itoa(size+1<<20), "--max-answer-bytes", strconv.Itoa(bound))
	admin := &api{base: c.BaseURL, hc: c.Admin().HTTP}
	admin.mustDo(t, "PUT", jobPath("big"), `{"participants":["p"],"checkpoint_timeout_ms":600000,"max_concurrent_checkpoints":10}`, 201, nil)
	reg := admin.register(t, "big", "p")
	for i := range 3 {
		cp := admin.prepare(t, "big", "")
		admin.mustDo(t, "PUT", votePath("big", cp.Id, "p"), voteBody(reg.Epoch, fmt.Sprintf(`["%d%s"]`, i, strings.Repeat("x", size))), 200, nil)
	}

	const held = "coordinator_http_answer_bytes_in_flight"
	var conns []net.Conn
	for i := range 8 {
		path := cpPath("big", int64(1+i%3))
		if i%2 == 1 {
			path = jobPath("big") + "/checkpoints?limit=1000"
		}
		conns = append(conns, unreadGet(t, c, path))
	}
	// Each of the eight asked for 6 MiB or more; the bound holds three.
	got := awaitSeries(t, c, held, func(v float64) bool { return v >= 2*size }, "eight clients that read nothing")
	if got > bound {
		t.Errorf("%s = %v, past --max-answer-bytes %d", held, got, bound)
	}
	awaitSeries(t, c, `coordinator_http_shed_requests_total{reason="answer_bytes"}`, func(v float64) bool { return v >= 1 },
		"answers past the bound")
	resp, err := c.Admin().HTTP.Get(c.BaseURL + cpPath("big", 1))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "--max-answer-bytes") {
		t.Errorf("a read past the bound: %d, Retry-After %q, %.300s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if v, _ := metricOf(t, c, held); v > bound {
		t.Errorf("%s = %v, past --max-answer-bytes %d", held, v, bound)
	}

	for _, conn := range conns {
		conn.Close()
	}
	awaitSeries(t, c, held, func(v float64) bool { return v == 0 }, "the clients that read nothing went away")
	// A page of 6 MiB checkpoints holds one, and a cursor to the rest.
	var ids []int64
	for path := jobPath("big") + "/checkpoints?limit=1000"; path != ""; {
		rep := admin.mustDo(t, "GET", path, "", 200, nil)
		var page struct {
			Items []struct {
				ID int64 `json:"id"`
			} `json:"items"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(rep.body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 1 {
			t.Errorf("a page of %d checkpoints of %d bytes each", len(page.Items), size)
		}
		for _, it := range page.Items {
			ids = append(ids, it.ID)
		}
		path = ""
		if page.NextCursor != nil {
			path = jobPath("big") + "/checkpoints?limit=1000&cursor=" + *page.NextCursor
		}
	}
	if fmt.Sprint(ids) != "[3 2 1]" {
		t.Errorf("the pages held %v, want [3 2 1]", ids)
	}
}

// unreadGet sends a GET of path with the admin token on a connection whose client reads
// nothing, its receive buffer kept small; the connection closes when the test ends.
func unreadGet(t *testing.T, c *harness.Coordinator, path string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		_ = rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	conn, err := d.Dial("tcp", c.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n", path, c.AdminToken); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestGreedyReadTokenLeavesParticipantsTheirWaits: a read token that asks for far more
// long-polls than the pool holds, on one HTTP/2 connection, holds its share of it
// (--max-waiters / 16) and is refused the rest with 503 and Retry-After, saying why; more
// read tokens fill the half of the pool reads may hold, and no more; a participant's own
// long-poll on its pending is still held, and answered when its work comes.
func TestGreedyReadTokenLeavesParticipantsTheirWaits(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t) // first: under -short it skips the test
	const pool, share, reads = 64, 4, 32
	adminFile, _ := harness.AdminTokenFile(t)
	c := harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile, "--max-waiters", strconv.Itoa(pool))
	admin := &api{base: c.BaseURL, hc: c.Admin().HTTP}
	admin.mustDo(t, "PUT", jobPath("watched"), `{"participants":["w"],"checkpoint_timeout_ms":600000}`, 201, nil)
	admin.mustDo(t, "PUT", jobPath("work"), `{"participants":["p"],"checkpoint_timeout_ms":600000}`, 201, nil)
	watched := admin.prepare(t, "watched", "")
	specs := []harness.TokenSpec{{Name: "p", Scopes: []string{"participant"}, Job: "work", Participant: "p"}}
	for i := range reads / share {
		specs = append(specs, harness.TokenSpec{Name: fmt.Sprintf("reader-%d", i), Scopes: []string{"read"}})
	}
	specs = append(specs, harness.TokenSpec{Name: "one-too-many", Scopes: []string{"read"}})
	secrets := c.CreateTokens(t, specs...)
	participant := &api{base: c.BaseURL, hc: c.WithToken(secrets[0]).HTTP}
	reg := participant.register(t, "work", "p")

	// Long-polls of the watched checkpoint, all on one h2c connection per token.
	type answer struct {
		status     int
		retryAfter string
		body       string
	}
	var mu sync.Mutex
	var held sync.WaitGroup
	refused := map[string][]answer{}
	wait := func(token, secret string, n int) {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		hc := &http.Client{Transport: tr}
		for range n {
			held.Go(func() {
				req, _ := http.NewRequest("GET", c.BaseURL+cpPath("watched", watched.Id)+"?wait_ms=60000", nil)
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := hc.Do(req)
				if err != nil {
					t.Errorf("%s: %v", token, err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					mu.Lock()
					refused[token] = append(refused[token], answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(body)})
					mu.Unlock()
				}
			})
		}
	}
	const reading = `coordinator_http_waiters{class="read"}`
	wait("greedy", secrets[1], 300)
	awaitSeries(t, c, `coordinator_http_shed_requests_total{reason="waiters_token_share"}`,
		func(v float64) bool { return v == 300-share }, "a read token asking for 300 long-polls")
	if v, _ := metricOf(t, c, reading); v != share {
		t.Errorf("the greedy token holds %v long-polls, want its share %d", v, share)
	}
	mu.Lock()
	for _, a := range refused["greedy"] {
		if a.status != http.StatusServiceUnavailable || a.retryAfter == "" || !strings.Contains(a.body, "this token holds") {
			t.Errorf("a refused long-poll of the greedy token: %d, Retry-After %q, %s", a.status, a.retryAfter, a.body)
			break
		}
	}
	mu.Unlock()
	// The other readers fill the half of the pool reads may hold.
	for i := 2; i <= reads/share; i++ {
		wait(fmt.Sprintf("reader-%d", i-1), secrets[i], share)
	}
	awaitSeries(t, c, reading, func(v float64) bool { return v == reads }, "every reader holding its share")
	wait("one-too-many", secrets[len(secrets)-1], 1)
	awaitSeries(t, c, `coordinator_http_shed_requests_total{reason="waiters_read_share"}`,
		func(v float64) bool { return v == 1 }, "a read past the half of the pool reads may hold")

	// The participant's own long-poll is held, and answered when a checkpoint owes it a vote.
	own := make(chan reply, 1)
	go func() {
		rep, err := participant.do(t.Context(), "GET", pendingPath("work", "p")+fmt.Sprintf("?wait_ms=60000&epoch=%d", reg.Epoch), "")
		if err != nil {
			t.Error(err)
		}
		own <- rep
	}()
	awaitSeries(t, c, `coordinator_http_waiters{class="participant"}`, func(v float64) bool { return v == 1 },
		"the participant's own long-poll, with the reads' part of the pool held")
	opened := admin.prepare(t, "work", "")
	rep := <-own
	if rep.status != http.StatusOK || !strings.Contains(string(rep.body), fmt.Sprintf(`"checkpoint":%d`, opened.Id)) {
		t.Errorf("the participant's long-poll: %s", rep)
	}

	// The reads end with the watched checkpoint.
	admin.mustDo(t, "POST", cpPath("watched", watched.Id)+"/abort", "", 200, nil)
	held.Wait()
	awaitSeries(t, c, reading, func(v float64) bool { return v == 0 }, "the reads answered")
}
