package loadtest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestBenchClientKeepsConnectionsAlive(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPut && (r.Header.Get("Content-Type") != "application/json" || string(body) != `{"a":1}`) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":7,"status":"preparing"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := newBenchClient(srv.URL + "/prefix")
	defer c.close()
	for i := range 5 {
		var answer statusAnswer
		method, body := http.MethodGet, []byte(nil)
		if i%2 == 1 {
			method, body = http.MethodPut, []byte(`{"a":1}`)
		}
		if _, err := c.do(context.Background(), method, "/v1/x", body, http.StatusOK, &answer); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if answer.ID != 7 || answer.Status != "preparing" {
			t.Fatalf("request %d: decoded %+v", i, answer)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 requests one after the other opened %d connections, want 1", n)
	}
}

// oneShotServer answers one request per connection, then closes it without saying so
// (no Connection: close), as a server restarting or timing out an idle connection does.
func oneShotServer(t *testing.T) (url string, closed <-chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan struct{}, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err == nil {
					_, _ = io.Copy(io.Discard, req.Body)
					_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				}
				conn.Close()
				ch <- struct{}{}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), ch
}

func TestBenchClientConnectionClosedWhileIdle(t *testing.T) {
	t.Parallel()
	url, closed := oneShotServer(t)
	c := newBenchClient(url)
	defer c.close()
	ctx := context.Background()
	if _, err := c.do(ctx, http.MethodGet, "/a", nil, http.StatusOK, nil); err != nil {
		t.Fatal(err)
	}
	<-closed
	// A GET on the connection the server closed is sent again on a new one.
	if _, err := c.do(ctx, http.MethodGet, "/b", nil, http.StatusOK, nil); err != nil {
		t.Fatalf("GET after the server closed the idle connection: %v", err)
	}
	<-closed
	// A PUT is not: the coordinator may have applied it; the bench counts the error.
	_, err := c.do(ctx, http.MethodPut, "/c", []byte(`{}`), http.StatusOK, nil)
	var re *requestError
	if !errors.As(err, &re) || (re.code != "transport:eof" && re.code != "transport:connection_reset") {
		t.Fatalf("PUT on a closed connection: %v, want transport:eof or transport:connection_reset", err)
	}
}

func TestBenchClientContextEnds(t *testing.T) {
	t.Parallel()
	// A server that reads requests and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, conn); conn.Close() }()
		}
	}()
	c := newBenchClient("http://" + ln.Addr().String())
	defer c.close()

	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		code string
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, "transport:timeout"},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, "transport:canceled"},
	} {
		ctx, cancel := tc.ctx()
		_, err := c.do(ctx, http.MethodGet, "/wait", nil, http.StatusOK, nil)
		cancel()
		var re *requestError
		if !errors.As(err, &re) || re.code != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
}

func TestBenchClientProblemCodes(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/problem" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"code":"fenced","detail":"epoch 1 is not the latest"}`)
			return
		}
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "short and stout")
	}))
	defer srv.Close()
	c := newBenchClient(srv.URL)
	defer c.close()
	for path, want := range map[string]string{"/problem": "fenced", "/other": "http_418"} {
		_, err := c.do(context.Background(), http.MethodGet, path, nil, http.StatusOK, nil)
		var re *requestError
		if !errors.As(err, &re) || re.code != want {
			t.Errorf("%s: %v, want code %s", path, err, want)
		}
	}
}
