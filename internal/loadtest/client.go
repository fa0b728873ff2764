package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// benchClient sends the bench's requests over HTTP/1.1 keep-alive connections that it
// writes and reads itself, in the goroutine of the request: net/http's client hands every
// request to a writing and a reading goroutine of the connection, and that cost a third of
// the bench's CPU, taken from the coordinator and PostgreSQL on the same machine. Answers
// are still parsed by net/http (http.ReadResponse). Bodies are built once per participant
// and answers decoded into the few fields the checks need. A connection is used by one
// request at a time; an idle one is reused, else one is dialled, so no request waits for
// another's connection.
type benchClient struct {
	addr   string // host:port to dial
	host   string // the Host header
	prefix string // the base URL's path, before every request's
	// authorization is the Authorization header's value, "" for none.
	authorization string
	// minimal asks votes and acks (the PUT requests) for minimal answers (Prefer:
	// return=minimal), as the client libraries do.
	minimal bool
	// minimalWait asks the decision waiter's long-polls (GET ...?wait_ms=) for the
	// minimal view too: the status and the counts, no participant's entry.
	minimalWait bool
	tls         *tls.Config
	dialer      net.Dialer

	// h2, when set, carries every request instead (--http2): net/http's HTTP/2 client,
	// whose streams share a few connections, with prior knowledge over http:// (h2c).
	h2 *http.Client

	mu   sync.Mutex
	idle []*benchConn
}

// prefersMinimal reports whether a request asks for a minimal answer: votes and acks (the
// PUT requests) with minimal, the waiter's long-polls with minimalWait.
func (c *benchClient) prefersMinimal(method, path string) bool {
	switch method {
	case http.MethodPut:
		return c.minimal
	case http.MethodGet:
		return c.minimalWait && strings.Contains(path, "?wait_ms=")
	}
	return false
}

// speakHTTP2 makes c send its requests over HTTP/2 (h2c with prior knowledge to an http://
// URL, negotiated over https://), with net/http's client.
func (c *benchClient) speakHTTP2() {
	tr := &http.Transport{
		DialContext:         c.dialer.DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		Protocols:           new(http.Protocols),
	}
	if c.tls != nil {
		tr.TLSClientConfig = c.tls
		tr.Protocols.SetHTTP2(true)
	} else {
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	c.h2 = &http.Client{Transport: tr}
}

// exchangeHTTP2 is exchange over c.h2.
func (c *benchClient) exchangeHTTP2(ctx context.Context, method, path string, body []byte, into *bytes.Buffer) (sent time.Time, status int, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	scheme := "http://"
	if c.tls != nil {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+c.host+c.prefix+path, rd)
	if err != nil {
		return time.Now(), 0, err
	}
	req.Header.Set("User-Agent", "coordinator-bench")
	if c.authorization != "" {
		req.Header.Set("Authorization", c.authorization)
	}
	if c.prefersMinimal(method, path) {
		req.Header.Set("Prefer", "return=minimal")
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	sent = time.Now() // before anything is written, as in exchange
	resp, err := c.h2.Do(req)
	if err != nil {
		return sent, 0, err
	}
	defer resp.Body.Close()
	if _, err := into.ReadFrom(resp.Body); err != nil {
		return sent, 0, err
	}
	return sent, resp.StatusCode, nil
}

type benchConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// newBenchClient returns a client of the coordinator at base, an http:// or https:// URL
// (validated by the flags).
func newBenchClient(base string) *benchClient {
	u, err := url.Parse(base)
	if err != nil {
		panic(err) // validated
	}
	c := &benchClient{host: u.Host, prefix: u.Path, dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
		c.tls = &tls.Config{ServerName: u.Hostname()}
	}
	if u.Port() != "" {
		port = u.Port()
	}
	c.addr = net.JoinHostPort(u.Hostname(), port)
	return c
}

func (c *benchClient) close() {
	if c.h2 != nil {
		c.h2.CloseIdleConnections()
	}
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, conn := range idle {
		conn.Close()
	}
}

// conn returns an idle connection, or a new one; reused says which.
func (c *benchClient) conn(ctx context.Context) (conn *benchConn, reused bool, err error) {
	c.mu.Lock()
	if n := len(c.idle); n > 0 {
		conn = c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
	}
	c.mu.Unlock()
	if conn != nil {
		return conn, true, nil
	}
	raw, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, false, err
	}
	if c.tls != nil {
		tc := tls.Client(raw, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, false, err
		}
		raw = tc
	}
	return &benchConn{Conn: raw, r: bufio.NewReaderSize(raw, 8<<10), w: bufio.NewWriterSize(raw, 4<<10)}, false, nil
}

func (c *benchClient) release(conn *benchConn) {
	c.mu.Lock()
	c.idle = append(c.idle, conn)
	c.mu.Unlock()
}

// requestError is a failed request: a problem document's code, the HTTP status when the
// answer was not a problem document, or a transport failure.
type requestError struct {
	code   string // problem code, "http_<status>" or "transport:<kind>"
	detail string
}

func (e *requestError) Error() string { return e.code + ": " + e.detail }

var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// aLongTimeAgo is a deadline in the past: it wakes a read or write blocked on a connection.
var aLongTimeAgo = time.Unix(1, 0)

// do sends one request and decodes the answer into into when its status is want. It
// returns the time the request was handed to the connection.
func (c *benchClient) do(ctx context.Context, method, path string, body []byte, want int, into any) (time.Time, error) {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer bodyBuffers.Put(buf)
	sent, status, err := c.exchange(ctx, method, path, body, buf)
	if err != nil && method == http.MethodGet && errors.Is(err, errStaleConn) {
		// The server closed a kept-alive connection before reading the request (idle
		// timeout, restart): a GET is sent again on a new one, as net/http does.
		sent, status, err = c.exchange(ctx, method, path, body, buf)
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%v)", ctxErr, err) // what ended it: the round's deadline, or its end
		}
		return sent, transportError(method, path, err)
	}
	if status != want {
		var problem struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		}
		if json.Unmarshal(buf.Bytes(), &problem) == nil && problem.Code != "" {
			return sent, &requestError{code: problem.Code, detail: fmt.Sprintf("%s %s: %d %s", method, path, status, problem.Detail)}
		}
		return sent, &requestError{code: "http_" + strconv.Itoa(status),
			detail: fmt.Sprintf("%s %s: %d, want %d: %.200s", method, path, status, want, buf.String())}
	}
	if into != nil {
		var err error
		if d, ok := into.(answerDecoder); ok {
			err = d.decodeAnswer(buf.Bytes())
		} else {
			err = json.Unmarshal(buf.Bytes(), into)
		}
		if err != nil {
			return sent, &requestError{code: "bad_json", detail: fmt.Sprintf("%s %s: %v in %.200s", method, path, err, buf.String())}
		}
	}
	return sent, nil
}

// errStaleConn: a reused connection ended before any byte of the answer.
var errStaleConn = errors.New("the kept-alive connection was closed before the answer")

// exchange writes the request on a connection and reads the answer's body into into.
func (c *benchClient) exchange(ctx context.Context, method, path string, body []byte, into *bytes.Buffer) (sent time.Time, status int, err error) {
	if c.h2 != nil {
		return c.exchangeHTTP2(ctx, method, path, body, into)
	}
	conn, reused, err := c.conn(ctx)
	if err != nil {
		return time.Now(), 0, err
	}
	keep := false
	defer func() {
		if keep {
			c.release(conn)
		} else {
			conn.Close()
		}
	}()
	deadline, _ := ctx.Deadline() // zero: none
	if err := conn.SetDeadline(deadline); err != nil {
		return time.Now(), 0, err
	}
	// A context cancelled before its deadline (the waiter, once the round failed) wakes
	// the read at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()

	// The send time is taken before anything is written: a body larger than the buffer
	// goes out while it is written, and the answer may be on its way before Flush.
	sent = time.Now()
	w := conn.w
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(c.prefix)
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(c.host)
	w.WriteString("\r\nUser-Agent: coordinator-bench\r\n")
	if c.authorization != "" {
		w.WriteString("Authorization: ")
		w.WriteString(c.authorization)
		w.WriteString("\r\n")
	}
	if c.prefersMinimal(method, path) {
		w.WriteString("Prefer: return=minimal\r\n")
	}
	if body != nil {
		w.WriteString("Content-Type: application/json\r\n")
	}
	if body != nil || method == http.MethodPost || method == http.MethodPut {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.Itoa(len(body)))
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(body)
	if err := w.Flush(); err != nil {
		return sent, 0, err
	}
	if _, err := conn.r.Peek(1); err != nil {
		if reused && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			err = fmt.Errorf("%w: %w", errStaleConn, err)
		}
		return sent, 0, err
	}
	resp, err := http.ReadResponse(conn.r, nil)
	if err != nil {
		return sent, 0, err
	}
	_, err = into.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return sent, 0, err
	}
	keep = !resp.Close && stop()
	return sent, resp.StatusCode, nil
}

// transportError classifies a failure to get an answer at all.
func transportError(method, path string, err error) *requestError {
	kind := "other"
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		kind = "timeout"
	case errors.Is(err, context.Canceled):
		kind = "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		kind = "connection_refused"
	case errors.Is(err, syscall.ECONNRESET):
		kind = "connection_reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		kind = "eof"
	}
	return &requestError{code: "transport:" + kind, detail: fmt.Sprintf("%s %s: %v", method, path, err)}
}

// bearer is the Authorization header of token, "" without one.
func bearer(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}
