package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/twophase/coordinator/api"
)

// The transport's settings: the limits of a connection, the bound on long-polls, and
// which hosts and web pages the API serves.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultMaxHeaderBytes    = 64 << 10
	// minMaxHeaderBytes and maxMaxHeaderBytes bound --max-header-bytes: a request with a
	// token and a request id fits in far less than the first.
	minMaxHeaderBytes = 1 << 10
	maxMaxHeaderBytes = 16 << 20
	// defaultMaxWaiters bounds the long-polls held at once. A participant holds at most
	// one at a time, so it is the size of the fleet one process can keep waiting. Each
	// costs about 50 KiB of resident memory over HTTP/1.1 (a connection with its buffers
	// and reading goroutine, the handler's goroutine, its waiter; 4,000 held took 225 MiB)
	// and 40 KiB over HTTP/2 (180 MiB), 400-500 MiB at the bound. A larger fleet spreads
	// over several processes, or raises it.
	defaultMaxWaiters = 10000
)

// maxConcurrentStreams bounds the requests in flight on one HTTP/2 connection. A client
// with more (a process running many participants, each holding a long-poll) opens more
// connections: Go's transport does so by itself.
const maxConcurrentStreams = 1000

// protocols is what the server speaks: HTTP/1.1, and HTTP/2 unless --http2=false. Over
// plain HTTP, HTTP/2 is prior knowledge (h2c: the client starts with HTTP/2's preface);
// there is no Upgrade from HTTP/1.1, which no client needs. Over TLS it is negotiated by
// ALPN (serverTLS.config offers h2 when this does).
func (cfg *config) protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	if cfg.http2 {
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
	}
	return p
}

// splitList splits a comma-separated setting, dropping blanks around items and empty
// items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// apiAllowedHosts is what api.Options.AllowedHosts gets: --allowed-hosts, and the host of
// --listen when it names one (not when it listens on every address). The loopback names
// are always allowed by the api package itself.
func (cfg *config) apiAllowedHosts() []string {
	hosts := splitList(cfg.allowedHosts)
	if host, _, err := net.SplitHostPort(cfg.listen); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, host)
		}
	}
	return hosts
}

// validateTransport checks the transport's settings, reporting each problem to bad.
func (cfg *config) validateTransport(bad func(format string, args ...any)) {
	if cfg.readHeaderTimeout <= 0 {
		bad("--read-header-timeout must be positive, not %s", cfg.readHeaderTimeout)
	}
	if cfg.maxHeaderBytes < minMaxHeaderBytes || cfg.maxHeaderBytes > maxMaxHeaderBytes {
		bad("--max-header-bytes must be from %d to %d, not %d", minMaxHeaderBytes, maxMaxHeaderBytes, cfg.maxHeaderBytes)
	}
	if cfg.maxWaiters < 0 {
		bad("--max-waiters must not be negative (0: no bound), not %d", cfg.maxWaiters)
	}
	for _, origin := range splitList(cfg.allowedOrigins) {
		if err := api.CheckOrigin(origin); err != nil {
			bad("--allowed-origins: %v", err)
		}
	}
	for _, host := range splitList(cfg.allowedHosts) {
		if err := api.CheckHost(host); err != nil {
			bad("--allowed-hosts: %v", err)
		}
	}
	if cfg.debugListen != "" {
		if err := checkDebugListen(cfg.debugListen); err != nil {
			bad("%v", err)
		}
	}
}

// checkDebugListen refuses a --debug-listen that is not on loopback: the profiles show
// the process's internals to whoever can connect.
func checkDebugListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("--debug-listen must be host:port on loopback, like 127.0.0.1:6060, not %q", addr)
	}
	if host == "" {
		return fmt.Errorf("--debug-listen %q has no host, so it would listen on every interface: "+
			"give a loopback address, like 127.0.0.1%s (profiles show the process's internals)", addr, addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--debug-listen must be on loopback (127.0.0.0/8, ::1 or localhost), not %q: "+
			"profiles show the process's internals", addr)
	}
	return nil
}
