package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/internal/cli"
)

// Exit statuses of "coordinator ctl", documented in ctlUsage.
const (
	ctlExitOK      = 0 // done; find-stuck: nothing stuck
	ctlExitFound   = 1 // find-stuck only: something is stuck
	ctlExitUsage   = 2 // invalid command line or settings
	ctlExitRefused = 3 // the API answered with a 4xx problem
	ctlExitNoReply = 4 // no usable answer: transport error, timeout, 5xx
)

// ctlAttempts bounds the attempts of one request: a 503, a 5xx, 408, 429 or a connection
// error is retried, with a short backoff, within --timeout.
const ctlAttempts = 3

// ctlMaxRetryDelay caps the wait between attempts, Retry-After included.
const ctlMaxRetryDelay = 2 * time.Second

// The settings every ctl command takes: flags with environment twins (the same ones as the
// example participant's).
const (
	ctlURLEnv     = "COORDINATOR_URL"
	ctlTokenEnv   = "COORDINATOR_TOKEN"
	ctlDefaultURL = "http://127.0.0.1:8080"
)

const ctlUsage = `coordinator ctl: operate a running coordinator through its API.

Usage:
  coordinator ctl [flags] COMMAND [flags] [ARGS]

Commands:
  checkpoints [--status S,...] [--job PATTERN] [--older-than D] [--limit N] [--cursor C]
  checkpoints --newest --job NAME [--status S,...] [--limit N] [--cursor C]
        checkpoints of every job the token may read, oldest first: those preparing or
        committing unless --status says otherwise (preparing, committing, committed, aborted,
        or all); --job keeps the jobs a pattern matches (a name, a prefix ending in *, or *);
        --older-than keeps those opened more than D ago; --limit bounds how many are shown
        (default 100), and when it cut the list, the cursor to go on from is printed
        (--cursor). With --newest, one job's checkpoints of every status (unless --status),
        newest first: the end of a long history
  checkpoint JOB ID
        one checkpoint: its status, decision and every participant's vote and ack
  pending JOB PARTICIPANT
        what a participant still owes (votes, commits, rollbacks), oldest first
  find-stuck [--committing-for D] [--grace D] [--job PATTERN]
        checkpoints committing for longer than D (default 10m), with the participants that
        have not acked, and checkpoints still preparing more than --grace (default 5s) past
        their deadline (the coordinator aborts an expired checkpoint within a second, so one
        still preparing means that no coordinator is sweeping). "Committing for" is measured
        from when the checkpoint opened, by the database's clock: a little longer than since
        its decision. Exits 1 if it finds any, 0 if not: for cron jobs and alerts
  abort JOB ID [--reason R]
        decide abort (every higher preparing checkpoint of the job is aborted too)
  commit JOB ID [--reason R]
        decide commit, for a job without auto_commit whose votes are all prepared
  complete JOB ID [--reason R]
        settle the acks that participants gone for good will never send, so that nothing of
        the checkpoint is owed any more (a committing one becomes committed)
  audit [--job PATTERN] [--limit N]
        actions taken by request (jobs changed, checkpoints committed, aborted or completed
        by hand, tokens), newest first, with the token and reason of each (default 100)
  help [COMMAND]
        this text

The reason of abort, commit and complete goes to the audit.

Flags of every command, before or after it:
  --url URL          env COORDINATOR_URL (default http://127.0.0.1:8080)
        the coordinator's base URL, http:// or https://
  --token TOKEN      env COORDINATOR_TOKEN (default none)
        the token sent as "Authorization: Bearer"; prefer the environment, which other users
        of the machine cannot see in the process list. It is never printed. Reading needs the
        read scope on the jobs; abort, commit, complete and the audit need operator (or admin)
  --ca-file FILE     (no environment twin)
        PEM certificates of the CAs an https:// coordinator's certificate must be signed by;
        without it, the system's
  -o table|json      (default table)
        json prints the API's JSON, one document per run, for scripts: the checkpoint
        (checkpoint, abort, commit, complete), the pending document (pending), or for lists
        {"items": [...]} with every page's items together, and "next_cursor" when --limit left
        some out; find-stuck prints {"items": [{"job", "id", "status", "stuck", "waiting_for",
        "checkpoint"}]}, "stuck" being committing or past_deadline
  --timeout D        (default 10s)
        how long the whole command may take, every page and retry included. A connection
        error, a 5xx (503 unavailable) or 429 is retried, up to 3 attempts per request

Exit status:
  0  done; find-stuck: nothing stuck
  1  find-stuck only: something is stuck (it is listed)
  2  invalid command line or settings
  3  the coordinator refused the request: a 4xx problem, printed as CODE: DETAIL
     (401 unauthenticated, 403 forbidden, 404 not_found, 409 already_decided, ...)
  4  no answer from the coordinator: connection refused, timeout, TLS failure, or still a
     5xx (503 unavailable, 500 internal) after 3 attempts

Examples:
  export COORDINATOR_URL=https://coordinator.example:8080 COORDINATOR_TOKEN=tpc_...
  coordinator ctl find-stuck --committing-for 15m
  coordinator ctl checkpoint orders 41
  coordinator ctl pending orders sink-b
  coordinator ctl complete orders 41 --reason "sink-b decommissioned, its output restored from 40"
  coordinator ctl audit --job orders -o json
`

// ctlConfig holds the settings of every ctl command.
type ctlConfig struct {
	url     string
	token   string // never printed
	caFile  string
	output  string
	timeout time.Duration
}

// ctlSettings defines the settings of every ctl command on a new cli.Settings, bound to
// cfg, with their environment twins.
func ctlSettings(cfg *ctlConfig) *cli.Settings {
	s := cli.NewSettings("ctl")
	cfg.define(s.FS, ctlConfig{url: ctlDefaultURL, output: "table", timeout: 10 * time.Second})
	s.Twin("url", ctlURLEnv)
	s.Twin("token", ctlTokenEnv)
	s.FlagOnly("ca-file")
	s.FlagOnly("o")
	s.FlagOnly("timeout")
	return s
}

// define defines the settings on fs, bound to cfg, with the defaults def.
func (cfg *ctlConfig) define(fs *flag.FlagSet, def ctlConfig) {
	fs.StringVar(&cfg.url, "url", def.url, "the coordinator's base `URL`")
	fs.StringVar(&cfg.token, "token", def.token, "the bearer `token`")
	fs.StringVar(&cfg.caFile, "ca-file", def.caFile, "PEM `file` of the CAs of an https:// coordinator")
	fs.StringVar(&cfg.output, "o", def.output, "output `format`: table or json")
	cli.DurationVar(fs, &cfg.timeout, "timeout", def.timeout, "how long the whole command may take")
}

// ctlEnv lists the environment twins of the ctl settings, which knownEnv counts as known.
func ctlEnv() []string {
	var names []string
	for _, env := range ctlSettings(new(ctlConfig)).Envs {
		names = append(names, env)
	}
	return names
}

// ctlOpts are the flags of the commands themselves; each command defines those it takes.
type ctlOpts struct {
	status        string
	job           string
	olderThan     time.Duration
	limit         int
	committingFor time.Duration
	grace         time.Duration
	reason        string
	newest        bool
	cursor        string
}

// ctlCmd is one command of ctl.
type ctlCmd struct {
	name  string
	args  []string // the names of its positional arguments
	flags func(fs *flag.FlagSet, o *ctlOpts)
	run   func(ctx context.Context, c *ctlRun, args []string) (int, error)
}

func ctlLimitFlag(fs *flag.FlagSet, o *ctlOpts) {
	fs.IntVar(&o.limit, "limit", 100, "most `entries` shown")
}

func ctlJobFlag(fs *flag.FlagSet, o *ctlOpts) {
	fs.StringVar(&o.job, "job", "", "a job's name, a prefix of one followed by *, or *")
}

func ctlReasonFlag(fs *flag.FlagSet, o *ctlOpts) {
	fs.StringVar(&o.reason, "reason", "", "why: recorded in the audit")
}

var ctlCommands = []ctlCmd{
	{name: "checkpoints", run: ctlCheckpoints, flags: func(fs *flag.FlagSet, o *ctlOpts) {
		fs.StringVar(&o.status, "status", "", "comma-separated statuses, or all")
		ctlJobFlag(fs, o)
		cli.DurationVar(fs, &o.olderThan, "older-than", 0, "keep those opened more than this long ago")
		fs.BoolVar(&o.newest, "newest", false, "one job's checkpoints (--job NAME), newest first")
		fs.StringVar(&o.cursor, "cursor", "", "go on from where a run that --limit cut stopped")
		ctlLimitFlag(fs, o)
	}},
	{name: "checkpoint", args: []string{"JOB", "ID"}, run: ctlCheckpoint},
	{name: "pending", args: []string{"JOB", "PARTICIPANT"}, run: ctlPending},
	{name: "find-stuck", run: ctlFindStuck, flags: func(fs *flag.FlagSet, o *ctlOpts) {
		cli.DurationVar(fs, &o.committingFor, "committing-for", 10*time.Minute, "how long committing is too long")
		cli.DurationVar(fs, &o.grace, "grace", 5*time.Second, "how long past its deadline preparing is too long")
		ctlJobFlag(fs, o)
	}},
	{name: "abort", args: []string{"JOB", "ID"}, run: ctlDecide("abort"), flags: func(fs *flag.FlagSet, o *ctlOpts) { ctlReasonFlag(fs, o) }},
	{name: "commit", args: []string{"JOB", "ID"}, run: ctlDecide("commit"), flags: func(fs *flag.FlagSet, o *ctlOpts) { ctlReasonFlag(fs, o) }},
	{name: "complete", args: []string{"JOB", "ID"}, run: ctlDecide("complete"), flags: func(fs *flag.FlagSet, o *ctlOpts) { ctlReasonFlag(fs, o) }},
	{name: "audit", run: ctlAudit, flags: func(fs *flag.FlagSet, o *ctlOpts) {
		ctlJobFlag(fs, o)
		ctlLimitFlag(fs, o)
	}},
}

func ctlCommandNames() string {
	names := make([]string, len(ctlCommands))
	for i, c := range ctlCommands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// ctlRun is what a command runs with: the settings, its flags, the client and the output.
type ctlRun struct {
	cfg    ctlConfig
	opts   ctlOpts
	api    *coordinatorclient.ClientWithResponses
	stdout io.Writer
	stderr io.Writer
	now    func() time.Time
}

func (c *ctlRun) json() bool { return c.cfg.output == "json" }

// ctlCommand is "coordinator ctl": args are the arguments after its name.
func ctlCommand(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	var cfg ctlConfig
	cmd, rest, opts, err := parseCtl(args, environ, &cfg)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, ctlUsage)
		return ctlExitOK
	}
	name := "ctl"
	if cmd != nil {
		name = "ctl " + cmd.name
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordinator %s: %s\nRun 'coordinator ctl --help' for usage.\n", name, cli.Scrub(err.Error(), cfg.token))
		return ctlExitUsage
	}
	api, err := cfg.client(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "coordinator %s: %s\nRun 'coordinator ctl --help' for usage.\n", name, cli.Scrub(err.Error(), cfg.token))
		return ctlExitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	c := &ctlRun{cfg: cfg, opts: opts, api: api, stdout: stdout, stderr: stderr, now: time.Now}
	code, err := cmd.run(ctx, c, rest)
	if err == nil {
		return code
	}
	msg, code := c.describe(ctx, err)
	fmt.Fprintf(stderr, "coordinator %s: %s\n", name, cli.Scrub(msg, cfg.token))
	return code
}

// parseCtl parses the command line of ctl: the settings before the command (with their
// environment twins), the command, then its flags and arguments, in any order, settings
// among them. It returns flag.ErrHelp when help was asked for.
func parseCtl(args, environ []string, cfg *ctlConfig) (*ctlCmd, []string, ctlOpts, error) {
	opts := ctlOpts{limit: 100} // the commands without --limit check it all the same
	// Where the command starts: the settings before it are parsed with their twins.
	probe := ctlSettings(new(ctlConfig))
	if err := probe.FS.Parse(args); err != nil {
		return nil, nil, opts, err
	}
	rest := probe.FS.Args()
	if _, err := ctlSettings(cfg).Parse(args[:len(args)-len(rest)], environ); err != nil {
		return nil, nil, opts, err
	}
	if len(rest) == 0 {
		return nil, nil, opts, fmt.Errorf("which command? (%s)", ctlCommandNames())
	}
	if rest[0] == "help" {
		return nil, nil, opts, flag.ErrHelp
	}
	var cmd *ctlCmd
	for i := range ctlCommands {
		if ctlCommands[i].name == rest[0] {
			cmd = &ctlCommands[i]
		}
	}
	if cmd == nil {
		shown := strconv.Quote(rest[0])
		if strings.HasPrefix(rest[0], "tpc_") {
			shown = "(not shown: it looks like a token)"
		}
		return nil, nil, opts, fmt.Errorf("unknown command %s (commands: %s)", shown, ctlCommandNames())
	}
	fs := flag.NewFlagSet("ctl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.define(fs, *cfg) // settings given after the command win over those before and the twins
	if cmd.flags != nil {
		cmd.flags(fs, &opts)
	}
	positional, err := ctlParseInterleaved(fs, rest[1:])
	if err != nil {
		return cmd, nil, opts, err
	}
	if len(positional) != len(cmd.args) {
		want := "no arguments"
		if len(cmd.args) > 0 {
			want = strings.Join(cmd.args, " ")
		}
		return cmd, nil, opts, fmt.Errorf("%s takes %s, got %d argument(s)", cmd.name, want, len(positional))
	}
	if err := cfg.validate(); err != nil {
		return cmd, nil, opts, err
	}
	if err := opts.validate(); err != nil {
		return cmd, nil, opts, err
	}
	for i, name := range cmd.args {
		if err := ctlCheckArg(name, positional[i]); err != nil {
			return cmd, nil, opts, err
		}
	}
	return cmd, positional, opts, nil
}

// parseInterleaved parses fs from args, flags and positional arguments in any order, and
// returns the positional ones. After "--", everything is positional.
func ctlParseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		consumed := len(args) - fs.NArg()
		if consumed > 0 && args[consumed-1] == "--" {
			return append(positional, fs.Args()...), nil
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional, args = append(positional, args[0]), args[1:]
	}
}

var (
	ctlNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	ctlJobPattern  = regexp.MustCompile(`^(\*|[A-Za-z0-9][A-Za-z0-9._-]{0,127}\*?)$`)
)

func ctlCheckArg(name, value string) error {
	switch name {
	case "ID":
		if id, err := strconv.ParseInt(value, 10, 64); err != nil || id < 1 {
			return fmt.Errorf("ID must be a checkpoint id, a whole number from 1, not %q", value)
		}
	default:
		if !ctlNamePattern.MatchString(value) {
			return fmt.Errorf("%s %q is not a name: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128", name, value)
		}
	}
	return nil
}

// validate checks the settings that the flag types do not.
func (cfg *ctlConfig) validate() error {
	u, err := url.Parse(cfg.url)
	if err != nil {
		return fmt.Errorf("--url (or %s) must be the coordinator's http:// or https:// base URL, like %s: it does not parse",
			ctlURLEnv, ctlDefaultURL)
	}
	shown := cli.RedactURL(cfg.url)
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("--url (or %s) must be the coordinator's http:// or https:// base URL, without user or password, "+
			"like %s, not %q", ctlURLEnv, ctlDefaultURL, shown)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--url (or %s) must be a base URL, without a query or fragment: %q", ctlURLEnv, shown)
	}
	if cfg.caFile != "" && u.Scheme != "https" {
		return fmt.Errorf("--ca-file is for an https:// --url, not %q", shown)
	}
	switch cfg.output {
	case "table", "json":
	default:
		return fmt.Errorf("-o must be table or json, not %q", cfg.output)
	}
	if cfg.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %s", cfg.timeout)
	}
	return nil
}

// validate checks the flags of the commands.
func (o *ctlOpts) validate() error {
	if o.job != "" && !ctlJobPattern.MatchString(o.job) {
		return fmt.Errorf("--job must be a job's name, a prefix of one followed by *, or *, not %q", o.job)
	}
	if o.newest && (o.job == "" || strings.HasSuffix(o.job, "*")) {
		return fmt.Errorf("--newest lists one job's checkpoints: name it with --job NAME (not a pattern)")
	}
	if o.newest && o.olderThan > 0 {
		return fmt.Errorf("--older-than keeps the old ones: it does not go with --newest")
	}
	if o.limit < 1 || o.limit > 100000 {
		return fmt.Errorf("--limit must be from 1 to 100000, not %d", o.limit)
	}
	if _, err := ctlParseStatuses(o.status); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--older-than", o.olderThan}, {"--committing-for", o.committingFor}, {"--grace", o.grace}} {
		if d.v < 0 || d.v > 365*24*time.Hour {
			return fmt.Errorf("%s must be from 0s to 8760h, not %s", d.name, d.v)
		}
	}
	return nil
}

var ctlStatuses = []coordinatorclient.CheckpointStatus{
	coordinatorclient.Preparing, coordinatorclient.Committing, coordinatorclient.Committed, coordinatorclient.Aborted,
}

// parseStatuses parses --status: nil when empty (the API's default).
func ctlParseStatuses(s string) ([]coordinatorclient.CheckpointStatus, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	if strings.TrimSpace(s) == "all" {
		return ctlStatuses, nil
	}
	var out []coordinatorclient.CheckpointStatus
	for _, part := range strings.Split(s, ",") {
		st := coordinatorclient.CheckpointStatus(strings.TrimSpace(part))
		if !st.Valid() {
			return nil, fmt.Errorf("--status takes preparing, committing, committed, aborted (comma-separated) or all, not %q", part)
		}
		out = append(out, st)
	}
	return out, nil
}

// client makes the API client of cfg. It warns on stderr when the token would travel in
// clear to a host other than loopback.
func (cfg *ctlConfig) client(stderr io.Writer) (*coordinatorclient.ClientWithResponses, error) {
	// The Coordinator carries the token and the TLS configuration; the calls go through its
	// generated client (ctlRun.call retries them), which keeps the API's JSON as it was sent.
	opts := coordinatorclient.Options{Token: cfg.token}
	if cfg.caFile != "" {
		pem, err := os.ReadFile(cfg.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		opts.RootCAs = x509.NewCertPool()
		if !opts.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", cfg.caFile)
		}
	}
	if u, _ := url.Parse(cfg.url); cfg.token != "" && u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		fmt.Fprintf(stderr, "coordinator ctl: warning: the token travels in clear over http:// to %s; use https://\n", u.Host)
	}
	coord, err := coordinatorclient.NewCoordinator(cfg.url, opts)
	if err != nil {
		// The message names the URL and where the token is wrong, never the token.
		return nil, err
	}
	return coord.Client(), nil
}

// answer is what one attempt of a request produced.
type ctlAnswer struct {
	resp    *http.Response
	body    []byte
	problem *coordinatorclient.Problem
	decoded bool // a success body was decoded
}

// call sends a request until it succeeds, fails for good, ctlAttempts are made or ctx
// ends: a transport error (but an answer that does not decode), a 5xx, 408 and 429 are
// retried. A refusal is a *coordinatorclient.APIError.
func (c *ctlRun) call(ctx context.Context, op string, send func(context.Context) (ctlAnswer, error)) (ctlAnswer, error) {
	var last error
	for attempt := 1; ; attempt++ {
		out, err := send(ctx)
		var delay time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				e := ctlNoAnswer{op: op, err: err}
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					e.timeout = c.cfg.timeout
				}
				return out, e
			}
			var syn *json.SyntaxError
			var typ *json.UnmarshalTypeError
			if errors.As(err, &syn) || errors.As(err, &typ) {
				return out, ctlNoAnswer{op: op, err: fmt.Errorf("the answer is not the API's JSON: %w", err)}
			}
			var cert *tls.CertificateVerificationError
			if errors.As(err, &cert) {
				return out, ctlNoAnswer{op: op, err: err} // the same certificate again
			}
			last = ctlNoAnswer{op: op, err: err}
		case out.resp.StatusCode >= 200 && out.resp.StatusCode < 300:
			if !out.decoded {
				return out, ctlNoAnswer{op: op, err: fmt.Errorf("HTTP %d without the expected JSON body", out.resp.StatusCode)}
			}
			return out, nil
		default:
			apiErr := &coordinatorclient.APIError{Op: op, StatusCode: out.resp.StatusCode, Problem: out.problem}
			if s, perr := strconv.Atoi(strings.TrimSpace(out.resp.Header.Get("Retry-After"))); perr == nil && s >= 0 {
				apiErr.RetryAfter = time.Duration(s) * time.Second
			}
			if !ctlRetryable(apiErr.StatusCode) {
				return out, apiErr
			}
			last, delay = apiErr, apiErr.RetryAfter
		}
		if attempt >= ctlAttempts {
			return out, last
		}
		base := 100 * time.Millisecond << (attempt - 1)
		delay = min(max(delay, base/2+rand.N(base/2+1)), ctlMaxRetryDelay)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < delay {
			return out, last // no time for another attempt: the last answer says more than a timeout
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return out, last
		case <-t.C:
		}
	}
}

func ctlRetryable(status int) bool {
	return status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout
}

// noAnswer is a request that got no usable answer.
type ctlNoAnswer struct {
	op      string
	err     error
	timeout time.Duration // set when --timeout ran out
}

func (e ctlNoAnswer) Error() string {
	if e.timeout > 0 {
		return fmt.Sprintf("%s: no answer within --timeout %s: %v", e.op, e.timeout, e.err)
	}
	return fmt.Sprintf("%s: %v", e.op, e.err)
}

func (e ctlNoAnswer) Unwrap() error { return e.err }

// describe turns the error of a command into its message and exit status.
func (c *ctlRun) describe(ctx context.Context, err error) (string, int) {
	var apiErr *coordinatorclient.APIError
	if !errors.As(err, &apiErr) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && !strings.Contains(err.Error(), "--timeout") {
			return fmt.Sprintf("no answer within --timeout %s: %v", c.cfg.timeout, err), ctlExitNoReply
		}
		return err.Error(), ctlExitNoReply
	}
	code := ctlExitRefused
	if ctlRetryable(apiErr.StatusCode) {
		code = ctlExitNoReply
	}
	p := apiErr.Problem
	if p == nil {
		return fmt.Sprintf("%s: HTTP %d %s (not a problem document of the coordinator: is --url right?)",
			apiErr.Op, apiErr.StatusCode, http.StatusText(apiErr.StatusCode)), code
	}
	var b strings.Builder
	b.WriteString(ctlClean(string(p.Code)))
	if p.Detail != nil && *p.Detail != "" {
		b.WriteString(": " + ctlClean(*p.Detail))
	}
	if p.Missing != nil && len(*p.Missing) > 0 && !ctlContainsAll(b.String(), *p.Missing) {
		b.WriteString(" (missing: " + ctlClean(strings.Join(*p.Missing, ", ")) + ")")
	}
	if p.Errors != nil {
		for _, fe := range *p.Errors {
			b.WriteString("; " + ctlClean(fe.Field) + ": " + ctlClean(fe.Message))
		}
	}
	fmt.Fprintf(&b, " (HTTP %d", apiErr.StatusCode)
	if p.RequestId != nil && *p.RequestId != "" {
		b.WriteString(", request_id " + ctlClean(*p.RequestId))
	}
	b.WriteString(")")
	if apiErr.StatusCode == http.StatusUnauthorized && c.cfg.token == "" {
		b.WriteString("; no token was given: set " + ctlTokenEnv + " (or --token)")
	}
	return b.String(), code
}

func ctlContainsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// page is a page of a list, typed and as the API sent its items.
type ctlPage[T any] struct {
	items []T
	raw   []json.RawMessage
	next  *string
}

// collect follows the pages of a list from its first, up to max items (0: all).
// It returns the items, as typed and as sent, and the cursor of what is left when max
// left some out.
func ctlCollect[T any](ctx context.Context, max int, fetch func(ctx context.Context, cursor *string, limit int) (ctlPage[T], error)) (ctlPage[T], error) {
	return ctlCollectFrom(ctx, nil, max, fetch)
}

// ctlCollectFrom is ctlCollect from the page cursor names (nil: the first).
func ctlCollectFrom[T any](ctx context.Context, cursor *string, max int, fetch func(ctx context.Context, cursor *string, limit int) (ctlPage[T], error)) (ctlPage[T], error) {
	var all ctlPage[T]
	for {
		limit := 1000
		if max > 0 {
			limit = min(limit, max-len(all.items))
		}
		p, err := fetch(ctx, cursor, limit)
		if err != nil {
			return all, err
		}
		if len(p.raw) != len(p.items) {
			return all, fmt.Errorf("a page of %d items decoded as %d", len(p.raw), len(p.items))
		}
		all.items = append(all.items, p.items...)
		all.raw = append(all.raw, p.raw...)
		if p.next == nil || len(p.items) == 0 {
			return all, nil
		}
		if max > 0 && len(all.items) >= max {
			all.next = p.next
			return all, nil
		}
		cursor = p.next
	}
}

// rawItems decodes the items of a list page as they were sent.
func ctlRawItems(body []byte) ([]json.RawMessage, error) {
	var p struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	return p.Items, nil
}

// listJSON is what -o json prints for a list.
type ctlListJSON struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor *string           `json:"next_cursor,omitempty"`
}

func ctlNewListJSON(raw []json.RawMessage, next *string) ctlListJSON {
	if raw == nil {
		raw = []json.RawMessage{}
	}
	return ctlListJSON{Items: raw, NextCursor: next}
}

// writeJSON prints v, indented.
func (c *ctlRun) writeJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jobCheckpoints lists one job's checkpoints (GET /v1/jobs/{job}/checkpoints), newest first,
// from the page cursor names (nil: the first).
func (c *ctlRun) jobCheckpoints(ctx context.Context, job string, params coordinatorclient.ListCheckpointsParams, cursor *string, max int) (ctlPage[coordinatorclient.Checkpoint], error) {
	return c.checkpointPages(ctx, "list checkpoints of "+job, cursor, max, func(ctx context.Context, cursor *string, limit int) (ctlCheckpointPage, error) {
		params := params
		params.Cursor, params.Limit = cursor, &limit
		r, err := c.api.ListCheckpointsWithResponse(ctx, job, &params)
		if err != nil {
			return ctlCheckpointPage{}, err
		}
		return ctlCheckpointPage{r.HTTPResponse, r.Body, coordinatorclient.ProblemIn(r.HTTPResponse, r.Body), r.JSON200}, nil
	})
}

// openCheckpoints lists checkpoints across jobs (GET /v1/checkpoints), oldest first, from
// the page cursor names (nil: the first).
func (c *ctlRun) openCheckpoints(ctx context.Context, params coordinatorclient.ListOpenCheckpointsParams, cursor *string, max int) (ctlPage[coordinatorclient.Checkpoint], error) {
	return c.checkpointPages(ctx, "list checkpoints", cursor, max, func(ctx context.Context, cursor *string, limit int) (ctlCheckpointPage, error) {
		params := params
		params.Cursor, params.Limit = cursor, &limit
		r, err := c.api.ListOpenCheckpointsWithResponse(ctx, &params)
		if err != nil {
			return ctlCheckpointPage{}, err
		}
		return ctlCheckpointPage{r.HTTPResponse, r.Body, coordinatorclient.ProblemIn(r.HTTPResponse, r.Body), r.JSON200}, nil
	})
}

// ctlCheckpointPage is one answer of a list of checkpoints, as the generated client read it.
type ctlCheckpointPage struct {
	resp    *http.Response
	body    []byte
	problem *coordinatorclient.Problem
	list    *coordinatorclient.CheckpointList
}

// checkpointPages collects the pages of a list of checkpoints that fetch reads, one
// request (named op) a page, each page's items kept as sent too (for -o json).
func (c *ctlRun) checkpointPages(ctx context.Context, op string, cursor *string, max int,
	fetch func(ctx context.Context, cursor *string, limit int) (ctlCheckpointPage, error)) (ctlPage[coordinatorclient.Checkpoint], error) {
	return ctlCollectFrom(ctx, cursor, max, func(ctx context.Context, cursor *string, limit int) (ctlPage[coordinatorclient.Checkpoint], error) {
		var page ctlCheckpointPage
		out, err := c.call(ctx, op, func(ctx context.Context) (ctlAnswer, error) {
			var err error
			if page, err = fetch(ctx, cursor, limit); err != nil {
				return ctlAnswer{}, err
			}
			return ctlAnswer{page.resp, page.body, page.problem, page.list != nil}, nil
		})
		if err != nil {
			return ctlPage[coordinatorclient.Checkpoint]{}, err
		}
		raw, err := ctlRawItems(out.body)
		if err != nil {
			return ctlPage[coordinatorclient.Checkpoint]{}, ctlNoAnswer{op: op, err: err}
		}
		return ctlPage[coordinatorclient.Checkpoint]{items: page.list.Items, raw: raw, next: page.list.NextCursor}, nil
	})
}
