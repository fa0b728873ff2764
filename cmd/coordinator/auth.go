package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/twophase/coordinator/coordinator"
)

// defaultListen is loopback: without authentication the coordinator serves whoever
// connects, so it does not listen beyond this machine unless told to.
const defaultListen = "127.0.0.1:8080"

// adminTokenEnv holds the admin token itself, for platforms that hand secrets over in the
// environment; --admin-token-file (COORDINATOR_ADMIN_TOKEN_FILE) names a file instead.
const adminTokenEnv = "COORDINATOR_ADMIN_TOKEN"

// loadAdminToken reads the admin token from --admin-token-file or COORDINATOR_ADMIN_TOKEN
// into cfg.adminToken, and checks it. Its errors never quote the token.
func (cfg *config) loadAdminToken(environ []string) error {
	var fromEnv string
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, adminTokenEnv+"="); ok {
			fromEnv = v
		}
	}
	switch {
	case cfg.adminTokenFile != "" && fromEnv != "":
		return fmt.Errorf("give the admin token once: --admin-token-file (or %s_FILE) or %s, not both", adminTokenEnv, adminTokenEnv)
	case cfg.adminTokenFile != "":
		b, err := os.ReadFile(cfg.adminTokenFile)
		if err != nil {
			return fmt.Errorf("read --admin-token-file: %w", err)
		}
		// A file written by echo or an editor ends in a newline, which is not the token's.
		cfg.adminToken = strings.TrimRight(string(b), "\r\n")
		if err := coordinator.CheckAdminToken(cfg.adminToken); err != nil {
			return fmt.Errorf("--admin-token-file %s: %w", cfg.adminTokenFile, err)
		}
	case fromEnv != "":
		cfg.adminToken = fromEnv
		if err := coordinator.CheckAdminToken(cfg.adminToken); err != nil {
			return fmt.Errorf("%s: %w", adminTokenEnv, err)
		}
	}
	return nil
}

// authOn reports whether an admin token is configured, which turns authentication on.
func (cfg *config) authOn() bool { return cfg.adminToken != "" }

// checkAuthListen refuses to serve without authentication beyond loopback, unless
// --insecure-no-auth says so.
func (cfg *config) checkAuthListen() error {
	if cfg.authOn() || cfg.insecureNoAuth {
		return nil
	}
	host, _, _ := net.SplitHostPort(cfg.listen)
	if loopbackHost(host) {
		return nil
	}
	where := fmt.Sprintf("%q", cfg.listen)
	if host == "" {
		where += " (every interface)"
	}
	return fmt.Errorf("--listen %s is not a loopback address and authentication is off, so anyone who reaches it could do "+
		"anything: give an admin token (--admin-token-file or %s) to turn authentication on, listen on 127.0.0.1, "+
		"or pass --insecure-no-auth", where, adminTokenEnv)
}

// loopbackHost reports whether host names this machine only: localhost, 127.0.0.0/8, ::1.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authWarnings are what the start-up log warns of about tokens, listening on addr: an
// admin token file that others than its owner may read, and tokens that would cross the
// network in plain text (authentication on, no TLS, an address beyond loopback).
func authWarnings(cfg config, addr string) []string {
	var out []string
	if cfg.adminTokenFile != "" {
		if fi, err := os.Stat(cfg.adminTokenFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			out = append(out, fmt.Sprintf("--admin-token-file %s may be read by others than its owner (mode %04o): "+
				"whoever reads it can do anything; chmod 600 it", cfg.adminTokenFile, fi.Mode().Perm()))
		}
	}
	host, _, _ := net.SplitHostPort(addr)
	if cfg.authOn() && cfg.tlsCertFile == "" && !loopbackHost(host) {
		out = append(out, "tokens travel in plain text to "+addr+": anyone on the path can read and replay them; "+
			"serve HTTPS (--tls-cert-file and --tls-key-file), or listen on loopback behind a proxy that terminates TLS")
	}
	return out
}

// authMode says in the start-up log how requests are authenticated.
func authMode(cfg config) string {
	if cfg.authOn() {
		return "tokens"
	}
	return "off"
}

// startAuth starts access control when an admin token is configured: it reads the tokens
// of store once (so that none is refused for not being read yet), then keeps them current
// in the background until the returned function stops it. Without an admin token it
// returns nils: authentication is off.
func startAuth(ctx context.Context, cfg config, store coordinator.Store, logger *slog.Logger) (*coordinator.Authenticator, *coordinator.Tokens, func(), error) {
	if !cfg.authOn() {
		return nil, nil, func() {}, nil
	}
	tokenStore, ok := store.(coordinator.TokenStore)
	if !ok {
		return nil, nil, nil, fmt.Errorf("the store %T keeps no tokens", store)
	}
	auth := coordinator.NewAuthenticator(tokenStore, cfg.adminToken, logger)
	if err := auth.Refresh(ctx); err != nil {
		return nil, nil, nil, fmt.Errorf("read the tokens: %w", err)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { auth.Run(runCtx) })
	return auth, coordinator.NewTokens(tokenStore), func() {
		stop()
		wg.Wait()
	}, nil
}
