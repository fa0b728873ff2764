package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/twophase/coordinator/ui"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/twophase/coordinator/api"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/internal/httppark"
	"github.com/twophase/coordinator/metrics"
)

// HTTP server limits that are not settings (those that are: transport.go).
const (
	idleTimeout = 2 * time.Minute
	// timeoutSlack is added to the longest a request may take (--request-timeout plus the
	// longest long-poll) for the connection's read and write deadlines, so that the
	// handler's own timeout answers first, as a problem document.
	timeoutSlack = 5 * time.Second
)

// serve runs the coordinator until ctx ends, then shuts down gracefully. A nil error
// means a clean shutdown.
func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
	// Before the store: an unusable certificate fails at once.
	tlsConfig, stopTLS, err := startTLS(cfg, logger)
	if err != nil {
		return err
	}
	defer stopTLS()
	build := buildInfo(cfg, logger)
	var stats func(context.Context) (*coordinator.Stats, error)
	m := metrics.New(metrics.Options{Version: build.Version, Store: string(build.Store), NoJobLabel: !cfg.metricsJobLabel,
		Stats: func(ctx context.Context) (*coordinator.Stats, error) { return stats(ctx) }, Logger: logger})
	store, describe, err := openStore(ctx, cfg, logger, m.StoreCommit)
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
	// Without a job label, metrics do not show each job's last committed checkpoint: its
	// read (one per job) is skipped.
	stats = func(ctx context.Context) (*coordinator.Stats, error) { return store.Stats(ctx, cfg.metricsJobLabel) }
	svc := coordinator.NewService(store, logger, coordinator.WithMaxCheckpointBytes(cfg.maxCheckpointBytes), coordinator.WithObserver(m))

	// Rule 6 of docs/protocol.md: after an outage, expired checkpoints are aborted before
	// new work is served.
	swept, err := sweepAtStart(ctx, svc, cfg.requestTimeout)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		logger.Warn("could not abort every checkpoint that expired while no coordinator ran; the sweeper goes on", "error", err)
	}
	if swept > 0 {
		logger.Info("aborted checkpoints that expired while no coordinator ran", "jobs", swept)
	}

	// Access control: the tokens are read before the first request is served, then kept
	// current (a revocation anywhere takes effect here within a second).
	auth, tokens, stopAuth, err := startAuth(ctx, cfg, store, logger)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer stopAuth()

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.listen, err)
	}
	scheme := "http"
	if tlsConfig != nil {
		// HTTPS only: a plain HTTP request gets 400 and nothing else.
		ln, scheme = tls.NewListener(ln, tlsConfig), "https"
	}
	// Long-polls parked (api.Options.Park) come back to the server through it.
	parked := httppark.NewListener(ln)
	ln = parked

	if cfg.debugListen != "" {
		stopDebug, err := serveDebug(cfg.debugListen, cfg.readHeaderTimeout, logger)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer stopDebug()
	}

	sweepCtx, stopSweeper := context.WithCancel(context.WithoutCancel(ctx))
	var sweeper sync.WaitGroup
	sweeper.Go(func() { svc.RunSweeper(sweepCtx, cfg.sweepInterval) })
	sweeper.Go(func() {
		svc.RunRetention(sweepCtx, coordinator.RetentionOptions{Deleted: m.RetentionDeleted, Events: cfg.eventsRetention})
	})
	defer func() {
		stopSweeper()
		sweeper.Wait()
	}()

	srv := &http.Server{
		Handler: api.NewHandler(svc, api.Options{
			MaxBodyBytes:   cfg.maxBodyBytes,
			Logger:         logger,
			RequestTimeout: cfg.requestTimeout,
			Build:          build,
			Metrics:        m,
			AllowedOrigins: splitList(cfg.allowedOrigins),
			AllowedHosts:   cfg.apiAllowedHosts(),
			MaxWaiters:     cfg.maxWaiters,
			MaxAnswerBytes: cfg.maxAnswerBytes,
			Auth:           auth,
			Tokens:         tokens,
			Park:           parkListener(parked, cfg.parkAfter),
			ParkAfter:      cfg.parkAfter,
			UI:             consoleHandler(cfg.ui),
		}),
		ReadHeaderTimeout: cfg.readHeaderTimeout,
		// Not shorter than a request may take: when the read deadline passes while a
		// handler runs, net/http cancels the request's context.
		ReadTimeout:    longestRequest(cfg),
		WriteTimeout:   longestRequest(cfg),
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: cfg.maxHeaderBytes,
		Protocols:      cfg.protocols(),
		HTTP2:          &http.HTTP2Config{MaxConcurrentStreams: maxConcurrentStreams},
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("listening", append([]any{"addr", ln.Addr().String(), "scheme", scheme, "auth", authMode(cfg)}, describe...)...)
	for _, w := range authWarnings(cfg, ln.Addr().String()) {
		logger.Warn(w)
	}
	if !cfg.authOn() {
		logger.Warn("authentication is off: whoever reaches " + ln.Addr().String() +
			" can do anything; give an admin token (--admin-token-file or COORDINATOR_ADMIN_TOKEN) to turn it on")
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve HTTP: %w", err)
	case <-ctx.Done():
	}

	logger.Info("shutting down: finishing in-flight requests", "timeout", cfg.shutdownTimeout.String())
	// Long-polls answer now, with the checkpoint as it stands, rather than hold the
	// shutdown until their wait ends; the parked ones with Connection: close, their
	// connections closed rather than handed back to a server shutting down.
	parked.Drain()
	svc.EndWaits()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// Requests still running (long-polls, most likely) are cut: their clients retry.
		logger.Warn("shutdown timeout passed: closing the remaining connections", "error", err)
		_ = srv.Close()
	}
	// Parked long-polls were told to answer with the rest; their answers are written
	// with Connection: close.
	if err := parked.Wait(shutdownCtx); err != nil {
		logger.Warn("shutdown timeout passed with long-polls still parked: their connections close as the process exits", "error", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP: %w", err)
	}
	logger.Info("stopped accepting requests")
	return nil
}

// parkListener is what api.Options.Park gets: nil, parking nothing, when --park-after is 0.
func parkListener(l *httppark.Listener, after time.Duration) *httppark.Listener {
	if after <= 0 {
		return nil
	}
	return l
}

// longestRequest is the longest a request may take before the handler answers 503: its
// work bounded by --request-timeout, plus the longest long-poll wait.
func longestRequest(cfg config) time.Duration {
	return cfg.requestTimeout + coordinator.MaxLongPoll + timeoutSlack
}

// consoleHandler is what api.Options.UI gets: the console, or nil with --ui=false.
func consoleHandler(on bool) http.Handler {
	if !on {
		return nil
	}
	return ui.Handler()
}

// sweepAtStart aborts the checkpoints that expired while no coordinator ran, before the
// coordinator serves. A sweep bounds each job's share (a job whose row is locked
// elsewhere keeps no other job waiting), so the jobs a sweep could not finish, on a
// loaded machine or behind another coordinator's transaction, are swept again until
// every expired checkpoint is aborted or within has passed; then the coordinator serves
// anyway and its sweeper goes on (no vote counts past a deadline either way). It returns
// how many jobs it swept and the last sweep's error.
func sweepAtStart(ctx context.Context, svc *coordinator.Service, within time.Duration) (int, error) {
	const pause = 50 * time.Millisecond
	end := time.Now().Add(within)
	total := 0
	for {
		swept, err := svc.SweepExpired(ctx)
		total += swept
		if err == nil || ctx.Err() != nil || time.Now().Add(pause).After(end) {
			return total, err
		}
		select {
		case <-ctx.Done():
			return total, err
		case <-time.After(pause):
		}
	}
}
