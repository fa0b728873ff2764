package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/twophase/coordinator/internal/cli"
)

// healthcheckTimeout bounds "coordinator healthcheck": connecting, sending, and reading the
// answer.
const healthcheckTimeout = 5 * time.Second

// Exit statuses of "coordinator healthcheck". Docker's HEALTHCHECK reads 0 as healthy and
// 1 as unhealthy, and reserves 2: invalid flags exit 1 too.
const (
	exitHealthy   = 0
	exitUnhealthy = 1
)

const healthcheckUsage = `coordinator healthcheck: ask a running coordinator whether it is ready.

Usage:
  coordinator healthcheck [--url URL]

It sends GET URL and exits 0 if the answer is 200, 1 otherwise (any other status, no answer
within 5s, a redirect, invalid flags), with one line saying why: on stdout when healthy, on
stderr when not. Meant for a container's HEALTHCHECK, where there is no shell nor curl.

Flags of healthcheck:
  --url URL    (default http://127.0.0.1:PORT/readyz, PORT from COORDINATOR_LISTEN, else 8080)
        the endpoint to ask; /readyz is 200 when the database answers, its schema is current
        and it can be written
`

// healthcheckCommand is "coordinator healthcheck": args are the arguments after its name.
func healthcheckCommand(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	s := cli.NewSettings("healthcheck")
	var target string
	s.FS.StringVar(&target, "url", defaultHealthcheckURL(environ), "")
	s.FlagOnly("url")
	rest, err := s.Parse(args, environ)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, healthcheckUsage)
		return exitHealthy
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil {
		if u, perr := url.Parse(target); perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			err = fmt.Errorf("--url must be an http:// URL, like http://127.0.0.1:8080/readyz, not %q", target)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordinator healthcheck: %v\nRun 'coordinator healthcheck --help' for usage.\n", err)
		return exitUnhealthy
	}
	if err := healthcheck(ctx, target, healthcheckTimeout); err != nil {
		fmt.Fprintf(stderr, "unhealthy: %v\n", err)
		return exitUnhealthy
	}
	fmt.Fprintf(stdout, "healthy: GET %s answered 200\n", target)
	return exitHealthy
}

// defaultHealthcheckURL is /readyz on the port the coordinator listens on by environ's
// COORDINATOR_LISTEN (the image's setting), else 8080; on loopback unless it listens on one
// address only.
func defaultHealthcheckURL(environ []string) string {
	host, port := "127.0.0.1", "8080"
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if name != "COORDINATOR_LISTEN" {
			continue
		}
		h, p, err := net.SplitHostPort(value)
		if err != nil || p == "" || p == "0" {
			break // the server refuses it, or picks a port nobody knows
		}
		port = p
		if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz"
}

// healthcheck sends GET target and returns nil if it answered 200 within timeout, else an
// error saying what happened: the status and the problem's detail, or why there was no
// answer. It follows no redirect and takes no proxy: the answer must be the coordinator's.
func healthcheck(ctx context.Context, target string, timeout time.Duration) error {
	client := &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "coordinator-healthcheck")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	why := http.StatusText(resp.StatusCode)
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/problem+json" {
		var problem struct{ Detail string }
		if json.Unmarshal(body, &problem) == nil && problem.Detail != "" {
			why = problem.Detail
		}
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		why += " (to " + loc + ")"
	}
	return fmt.Errorf("GET %s answered %d: %s", target, resp.StatusCode, why)
}
