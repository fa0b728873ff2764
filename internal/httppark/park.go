// Package httppark lets an HTTP/1.1 server set aside a request that waits for a long
// time, and give its connection back to the server once it has answered.
//
// net/http holds, for every request in progress on an HTTP/1.1 connection, a goroutine
// that runs the handler (its stack grown by whatever the connection served before), a
// goroutine that watches the connection for the client going away, and the connection's
// read and write buffers: about 35 KiB a request. A long-poll that waits for a minute
// holds all of it for the minute. A handler that parks the request instead takes the
// connection from net/http (http.Hijacker), lets all of that go, waits with only the
// socket and its own state, writes the answer itself and then hands the connection back
// through the Listener, which net/http serves again as a new connection: the client's
// keep-alive connection stays open, and it sees an ordinary answer.
package httppark

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Listener is a net.Listener that also accepts the connections handed back with Return.
// Serve an http.Server on it.
type Listener struct {
	inner    net.Listener
	accepted chan accepted
	back     chan net.Conn
	done     chan struct{}
	start    sync.Once
	stop     sync.Once

	mu     sync.Mutex
	held   int
	idle   chan struct{} // closed when held falls to zero; nil while held is zero
	closed bool
}

type accepted struct {
	conn net.Conn
	err  error
}

// NewListener returns a Listener accepting from inner.
func NewListener(inner net.Listener) *Listener {
	return &Listener{
		inner:    inner,
		accepted: make(chan accepted),
		back:     make(chan net.Conn),
		done:     make(chan struct{}),
	}
}

// Accept returns the next connection: a new one from the inner listener, or one handed
// back.
func (l *Listener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.pump() })
	for {
		select {
		case c := <-l.back:
			if l.Closed() {
				// Handed back as Drain was called: the server is shutting down, and a
				// connection it took now would count as busy and hold the shutdown.
				_ = c.Close()
				continue
			}
			return c, nil
		case a := <-l.accepted:
			return a.conn, a.err
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
}

// pump accepts from the inner listener, one connection at a time, as Accept asks.
func (l *Listener) pump() {
	for {
		c, err := l.inner.Accept()
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				_ = c.Close()
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Close stops accepting: the inner listener is closed, and connections handed back from
// now on are closed.
func (l *Listener) Close() error {
	err := net.ErrClosed
	l.stop.Do(func() {
		l.Drain()
		close(l.done)
		err = l.inner.Close()
	})
	return err
}

// Drain makes the listener close, rather than hand back to the server, every connection
// returned from now on, and Closed report true, so that answers written from now on say
// Connection: close; it still accepts new connections until Close. Call it before telling
// parked requests to answer at shutdown: a connection handed back to a server that has
// begun to shut down is one it counts as busy (a new connection, not yet read from) and
// waits for.
func (l *Listener) Drain() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// Addr is the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Closed reports whether Drain or Close was called: an answer written now should tell the
// client that the connection closes after it.
func (l *Listener) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Return hands c back to be served again, or closes it once the listener is drained or
// closed.
func (l *Listener) Return(c net.Conn) {
	if l.Closed() {
		_ = c.Close()
		return
	}
	select {
	case l.back <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// Hold counts a parked request until the function it returns is called; Wait waits for
// those counted.
func (l *Listener) Hold() (release func()) {
	l.mu.Lock()
	l.held++
	if l.idle == nil {
		l.idle = make(chan struct{})
	}
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.held--; l.held == 0 {
				close(l.idle)
				l.idle = nil
			}
		})
	}
}

// Wait waits until no request is held (Hold), or ctx is done.
func (l *Listener) Wait(ctx context.Context) error {
	l.mu.Lock()
	idle := l.idle
	l.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Hijack takes the connection of w's HTTP/1.x request from net/http. clean is false when
// the client had already sent more bytes than the request (a pipelined request): the
// connection then cannot be handed back, only answered and closed.
func Hijack(w http.ResponseWriter) (conn net.Conn, clean bool, err error) {
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, false, err
	}
	return c, rw.Reader.Buffered() == 0, nil
}

// Response is an http.ResponseWriter that keeps the answer, to be written on a hijacked
// connection with WriteTo.
type Response struct {
	header http.Header
	status int
	body   bytes.Buffer
}

// NewResponse returns a Response whose headers start as a copy of header (those set
// before the request was parked: its request id, say).
func NewResponse(header http.Header) *Response {
	return &Response{header: header.Clone()}
}

// Header is the answer's header, as http.ResponseWriter's.
func (r *Response) Header() http.Header { return r.header }

// WriteHeader sets the status; the first call counts.
func (r *Response) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

// Write appends to the body.
func (r *Response) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

// Status is the status written so far, 0 before any (as an answer begun, it is then 200).
func (r *Response) Status() int { return r.status }

// Len is the length of the body.
func (r *Response) Len() int { return r.body.Len() }

// WriteTo writes the answer on c as an HTTP/1.1 response with its Content-Length and
// Date, and with Connection: close when last; it gives up at deadline.
func (r *Response) WriteTo(c net.Conn, last bool, deadline time.Time) error {
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	h := r.header
	h.Del("Transfer-Encoding")
	h.Set("Content-Length", strconv.Itoa(r.body.Len()))
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if last {
		h.Set("Connection", "close")
	} else {
		h.Del("Connection")
	}
	text := http.StatusText(status)
	if text == "" {
		text = "status " + strconv.Itoa(status)
	}
	bw := bufio.NewWriterSize(c, 1024+r.body.Len())
	fmt.Fprintf(bw, "HTTP/1.1 %03d %s\r\n", status, text)
	if err := h.Write(bw); err != nil {
		return err
	}
	_, _ = bw.WriteString("\r\n")
	_, _ = bw.Write(r.body.Bytes())
	if err := c.SetWriteDeadline(deadline); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}
