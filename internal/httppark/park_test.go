package httppark

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A connection handed back is accepted again; once the listener is closed, Accept fails
// and what is handed back is closed.
func TestListenerAcceptsWhatIsHandedBack(t *testing.T) {
	t.Parallel()
	l := newListener(t)
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	go l.Return(server)
	again, err := l.Accept()
	if err != nil || again != server {
		t.Fatalf("Accept after Return: %v, %v; want the connection handed back", again, err)
	}
	if l.Closed() {
		t.Fatal("Closed before Close")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !l.Closed() {
		t.Fatal("not Closed after Close")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
	l.Return(again) // closes it: the client reads EOF
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a connection handed back after Close: read %v, want EOF", err)
	}
}

// Once drained, the listener still accepts new connections, but closes every connection
// handed back, even one already on its way to Accept, and answers say Connection: close.
func TestDrainedListenerClosesWhatIsHandedBack(t *testing.T) {
	t.Parallel()
	l := newListener(t)
	dial := func() (client, server net.Conn) {
		t.Helper()
		client, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		server, err = l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return client, server
	}
	eof := func(what string, client net.Conn) {
		t.Helper()
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := client.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("%s: client read %v, want EOF", what, err)
		}
	}
	clientA, serverA := dial()
	clientB, serverB := dial()
	l.Drain()
	if !l.Closed() {
		t.Fatal("not Closed after Drain")
	}
	go l.Return(serverA) // in the background: nothing accepts
	eof("a connection handed back after Drain", clientA)

	// One that was handed back before Drain and not yet accepted is closed by Accept,
	// which goes on to a new connection.
	go func() { l.back <- serverB }()
	type acceptedConn struct {
		conn net.Conn
		err  error
	}
	next := make(chan acceptedConn, 1)
	go func() {
		c, err := l.Accept()
		next <- acceptedConn{c, err}
	}()
	eof("a connection on its way back at Drain", clientB)
	clientC, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer clientC.Close()
	got := <-next
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.conn.RemoteAddr().String() != clientC.LocalAddr().String() {
		t.Fatalf("Accept after Drain: a connection from %v, want the new one from %v", got.conn.RemoteAddr(), clientC.LocalAddr())
	}
	got.conn.Close()
}

// newListener is a Listener on a loopback port, closed when the test ends.
func newListener(t *testing.T) *Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(inner)
	t.Cleanup(func() { l.Close() })
	return l
}

// Wait waits for every Hold to be released.
func TestListenerWaitsForWhatItHolds(t *testing.T) {
	t.Parallel()
	l := newListener(t)
	if err := l.Wait(context.Background()); err != nil {
		t.Fatalf("Wait with nothing held: %v", err)
	}
	release := l.Hold()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while held: %v, want the deadline", err)
	}
	release()
	release() // once only
	if err := l.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after release: %v", err)
	}
}

// A Response is written as an HTTP/1.1 answer a client reads: status, headers, length,
// body, and Connection: close when it is the last.
func TestResponseWriteTo(t *testing.T) {
	t.Parallel()
	for _, last := range []bool{false, true} {
		a, b := net.Pipe()
		h := http.Header{}
		h.Set("X-Request-Id", "abc")
		r := NewResponse(h)
		h.Set("X-Request-Id", "changed after") // a copy was taken
		r.Header().Set("Content-Type", "application/json")
		r.WriteHeader(http.StatusConflict)
		r.WriteHeader(http.StatusOK) // the first counts
		_, _ = r.Write([]byte(`{"a":1}`))
		errc := make(chan error, 1)
		go func() { errc <- r.WriteTo(a, last, time.Now().Add(5*time.Second)) }()
		resp, err := http.ReadResponse(bufio.NewReader(b), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusConflict || string(body) != `{"a":1}` || resp.ContentLength != 7 ||
			resp.Header.Get("X-Request-Id") != "abc" || resp.Header.Get("Content-Type") != "application/json" ||
			resp.Header.Get("Date") == "" || resp.Close != last {
			t.Fatalf("last %v: read %d %v close=%v %q", last, resp.StatusCode, resp.Header, resp.Close, body)
		}
		a.Close()
		b.Close()
	}
}
