package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// h2cClient speaks HTTP/2 with prior knowledge to http:// URLs and counts the connections
// it dials.
func h2cClient(dials *atomic.Int64) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

// proto is the protocol of GET url's answer through client, or the error.
func proto(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.Proto, &statusError{resp.StatusCode}
	}
	return resp.Proto, nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

// requestProtos counts the access log's request lines for path by their proto.
func requestProtos(t *testing.T, logs *logBuffer, path string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, line := range logs.lines(t) {
		if line["msg"] == "request" && line["path"] == path {
			p, _ := line["proto"].(string)
			n[p]++
		}
	}
	return n
}

// TestHTTP2PlainAndTLS checks that the coordinator serves HTTP/1.1 and HTTP/2 (h2c over
// plain HTTP, negotiated over TLS) by default, and HTTP/1.1 only with --http2=false.
func TestHTTP2PlainAndTLS(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	base, logs, _ := startedArgs(t, ctx)
	var dials atomic.Int64
	if p, err := proto(h2cClient(&dials), base+"/healthz"); err != nil || p != "HTTP/2.0" {
		t.Errorf("GET /healthz with HTTP/2 prior knowledge: %q %v, want HTTP/2.0", p, err)
	}
	if p, err := proto(&http.Client{Timeout: 10 * time.Second}, base+"/healthz"); err != nil || p != "HTTP/1.1" {
		t.Errorf("GET /healthz over HTTP/1.1: %q %v, want HTTP/1.1", p, err)
	}
	if n := requestProtos(t, logs, "/healthz"); n["HTTP/2.0"] != 1 || n["HTTP/1.1"] != 1 {
		t.Errorf("request log lines of /healthz by proto: %v, want one of each", n)
	}

	base1, _, _ := startedArgs(t, ctx, "--http2=false")
	if p, err := proto(h2cClient(&dials), base1+"/healthz"); err == nil {
		t.Errorf("GET /healthz with HTTP/2 prior knowledge from a coordinator with --http2=false: %q, want refused", p)
	}
	if p, err := proto(&http.Client{Timeout: 10 * time.Second}, base1+"/healthz"); err != nil || p != "HTTP/1.1" {
		t.Errorf("GET /healthz over HTTP/1.1 with --http2=false: %q %v, want HTTP/1.1", p, err)
	}

	ca, certFile, keyFile := serverCertFiles(t, t.TempDir())
	tlsClient := func() *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: ca.pool()},
		}}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "HTTP/2.0"},
		{[]string{"--http2=false"}, "HTTP/1.1"},
	} {
		addr, _, _ := startedTLS(t, ctx, append([]string{"--tls-cert-file", certFile, "--tls-key-file", keyFile}, c.args...)...)
		if p, err := proto(tlsClient(), "https://"+addr+"/healthz"); err != nil || p != c.want {
			t.Errorf("GET /healthz over TLS offering h2 and http/1.1, coordinator args %v: %q %v, want %s", c.args, p, err, c.want)
		}
	}
}

// TestHTTP2LongPollsShareAConnection holds many long-polls on pending over one HTTP/2
// connection, opens a checkpoint through a coordinatorclient with UnencryptedHTTP2, and
// checks that each waiter is answered with it and that every request went over HTTP/2.
func TestHTTP2LongPollsShareAConnection(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	base, logs, _ := startedArgs(t, ctx)

	coord, err := coordinatorclient.NewCoordinator(base, coordinatorclient.Options{UnencryptedHTTP2: true, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 50
	participants := make([]string, waiters)
	for i := range participants {
		participants[i] = "p-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	if _, err := coord.PutJob(ctx, "h2", coordinatorclient.JobConfig{Participants: participants}); err != nil {
		t.Fatal(err)
	}
	for _, p := range participants {
		if _, err := coord.Register(ctx, "h2", p); err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		items int
		err   error
	}
	// The waiters speak HTTP/2 through a client of their own, which counts its connections.
	var dials atomic.Int64
	raw := h2cClient(&dials)
	raw.Timeout = 40 * time.Second
	// The first request makes the connection; requests sent before one exists would each
	// dial their own.
	if p, err := proto(raw, base+"/healthz"); err != nil || p != "HTTP/2.0" {
		t.Fatalf("GET /healthz with HTTP/2 prior knowledge: %q %v", p, err)
	}
	answers := make(chan answer, waiters)
	for _, p := range participants {
		go func() {
			resp, err := raw.Get(base + "/v1/jobs/h2/participants/" + p + "/pending?wait_ms=30000")
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			var got coordinatorclient.Pending
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
				answers <- answer{err: fmt.Errorf("%d %v", resp.StatusCode, err)}
				return
			}
			answers <- answer{items: len(got.Items)}
		}()
	}
	// Most long-polls are held by then and woken by the open; one that arrives later finds
	// the checkpoint owed and is answered at once: either way it gets the checkpoint.
	time.Sleep(500 * time.Millisecond)
	opened := time.Now()
	if _, err := coord.OpenCheckpoint(ctx, "h2", "", 0); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		select {
		case a := <-answers:
			if a.err != nil || a.items != 1 {
				t.Errorf("a waiter got %d items, %v; want the opened checkpoint", a.items, a.err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("a waiter was not answered within 20s of the open")
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d long-polls over HTTP/2 dialed %d connections, want 1", waiters, n)
	}
	t.Logf("%d waiters answered %v after the open", waiters, time.Since(opened))
	for _, line := range logs.lines(t) {
		if line["msg"] == "request" && strings.HasPrefix(line["path"].(string), "/v1/") && line["proto"] != "HTTP/2.0" {
			t.Errorf("request %v %v went over %v, want HTTP/2.0", line["method"], line["path"], line["proto"])
		}
	}

	if _, err := coordinatorclient.NewCoordinator(base, coordinatorclient.Options{UnencryptedHTTP2: true, HTTPClient: http.DefaultClient}); err == nil {
		t.Errorf("NewCoordinator with UnencryptedHTTP2 and an HTTPClient: no error, want one (the option configures its own client)")
	}
}
