package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/twophase/coordinator/api"
	"github.com/twophase/coordinator/coordinator"
)

// HTTP server limits that are not settings.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	// timeoutSlack is added to the longest a request may take (--request-timeout plus the
	// longest long-poll) for the connection's read and write deadlines, so that the
	// handler's own timeout answers first, as a problem document.
	timeoutSlack = 5 * time.Second
)

// serve runs the coordinator until ctx ends, then shuts down gracefully. A nil error
// means a clean shutdown.
func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
	store, describe, err := openStore(ctx, cfg, logger)
	if err != nil {
		if ctx.Err() != nil {
			return nil // asked to stop while starting
		}
		return err
	}
	defer func() {
		store.Close()
		logger.Info("store closed")
	}()
	svc := coordinator.NewService(store, logger)

	// Rule 6 of docs/protocol.md: after an outage, expired checkpoints are aborted before
	// new work is served.
	// A job that cannot be swept now (its row locked elsewhere) does not keep the others
	// waiting: the sweeper tries it again, and no vote is counted past a deadline anyway.
	swept, err := svc.SweepExpired(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		logger.Warn("could not abort every checkpoint that expired while no coordinator ran; the sweeper goes on", "error", err)
	}
	if swept > 0 {
		logger.Info("aborted checkpoints that expired while no coordinator ran", "jobs", swept)
	}

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.listen, err)
	}

	if cfg.debugListen != "" {
		stopDebug, err := serveDebug(cfg.debugListen, logger)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer stopDebug()
	}

	sweepCtx, stopSweeper := context.WithCancel(context.WithoutCancel(ctx))
	var sweeper sync.WaitGroup
	sweeper.Go(func() { svc.RunSweeper(sweepCtx, cfg.sweepInterval) })
	defer func() {
		stopSweeper()
		sweeper.Wait()
	}()

	srv := &http.Server{
		Handler: api.NewHandler(svc, api.Options{
			MaxBodyBytes:   cfg.maxBodyBytes,
			Logger:         logger,
			RequestTimeout: cfg.requestTimeout,
			Build:          buildInfo(cfg, logger),
		}),
		ReadHeaderTimeout: readHeaderTimeout,
		// Not shorter than a request may take: when the read deadline passes while a
		// handler runs, net/http cancels the request's context.
		ReadTimeout:    longestRequest(cfg),
		WriteTimeout:   longestRequest(cfg),
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("listening", append([]any{"addr", ln.Addr().String()}, describe...)...)

	select {
	case err := <-served:
		return fmt.Errorf("serve HTTP: %w", err)
	case <-ctx.Done():
	}

	logger.Info("shutting down: finishing in-flight requests", "timeout", cfg.shutdownTimeout.String())
	// Long-polls answer now, with the checkpoint as it stands, rather than hold the
	// shutdown until their wait ends.
	svc.EndWaits()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// Requests still running (long-polls, most likely) are cut: their clients retry.
		logger.Warn("shutdown timeout passed: closing the remaining connections", "error", err)
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP: %w", err)
	}
	logger.Info("stopped accepting requests")
	return nil
}

// longestRequest is the longest a request may take before the handler answers 503: its
// work bounded by --request-timeout, plus the longest long-poll wait.
func longestRequest(cfg config) time.Duration {
	return cfg.requestTimeout + coordinator.MaxLongPoll + timeoutSlack
}

// serveDebug serves Go's profiles (net/http/pprof) on addr, on a server of its own so that
// the API's mux never exposes them. It returns a function that stops it.
func serveDebug(addr string, logger *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (--debug-listen): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("serving profiles", "addr", ln.Addr().String(), "path", "/debug/pprof/")
	return func() { _ = srv.Close() }, nil
}
