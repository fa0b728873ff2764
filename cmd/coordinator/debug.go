package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"
)

// serveDebug serves Go's profiles (net/http/pprof) on addr, a loopback address
// (checkDebugListen), on a server of its own so that the API's mux never exposes them. It
// returns a function that stops it.
//
// /debug/pprof/cmdline is not served (404): the command line can hold a database
// password given as a flag. Nor is anything served to a web page: a request naming a
// Host other than a loopback one (a page of another site reaching the listener through a
// name of its own, DNS rebinding), or sent for a page (Origin, Sec-Fetch-Site:
// cross-site), is refused.
func serveDebug(addr string, readHeaderTimeout time.Duration, logger *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (--debug-listen): %w", addr, err)
	}
	// A name such as localhost is resolved by the system: make sure it was loopback.
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		_ = ln.Close()
		return nil, fmt.Errorf("--debug-listen %s resolved to %s, which is not a loopback address", addr, ln.Addr())
	}
	srv := &http.Server{
		Handler:           debugGuard(debugMux()),
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("serving profiles", "addr", ln.Addr().String(), "path", "/debug/pprof/")
	return func() { _ = srv.Close() }, nil
}

// debugMux is net/http/pprof's handlers but the command line's.
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", http.NotFound)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// debugGuard refuses what a browser sends for a web page, and any Host that is not a
// loopback name.
func debugGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Values("Origin")) > 0 || strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site") {
			http.Error(w, "profiles are not served to web pages", http.StatusForbidden)
			return
		}
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(host), "["), "]"), ".")
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "profiles are served under loopback names only (localhost, 127.0.0.1, ::1)", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
