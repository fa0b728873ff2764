// Command coordinator serves the two-phase-commit checkpoint coordinator over HTTP/JSON,
// and migrates its database schema.
//
//	coordinator [serve] [flags]
//	coordinator migrate up|down|version [flags]
//	coordinator bench [flags]
//	coordinator seed --database-url URL --checkpoints N [flags]
//	coordinator healthcheck [--url http://127.0.0.1:8080/readyz]
//	coordinator version
//
// Run "coordinator --help" for every flag and its environment twin.
//
// This package is the service: its flags, wiring, signals and shutdown, migrate, version,
// and healthcheck for its container. The bench and seed commands are tools, in
// internal/loadtest; what every command shares (flags with environment twins, exit
// statuses, keeping passwords out of messages) is internal/cli.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/twophase/coordinator/internal/cli"
	"github.com/twophase/coordinator/internal/loadtest"
)

// defaultGCPercent is the garbage collector's target unless GOGC is set. The process's live
// heap is a few MiB while it allocates tens of MiB a second under load (request and
// response buffers, JSON), so Go's default (100) collects many times a second; 400 trades
// a few more MiB of memory for most of that CPU. GOGC and GOMEMLIMIT still rule.
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills at once (the default behaviour).
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses, the same for every command.
const (
	exitOK      = cli.ExitOK
	exitFailure = cli.ExitFailure // a runtime failure: database unreachable, port taken, ...
	exitUsage   = cli.ExitUsage   // invalid flags or settings
)

// usageErr marks an error in the command line or the settings: it exits with exitUsage.
type usageErr struct{ error }

func (e usageErr) Unwrap() error { return e.error }

// usageError wraps err so that it exits with exitUsage.
func usageError(err error) error {
	return usageErr{err}
}

// run is the whole program: it parses args and environ, runs the command until ctx ends
// (SIGTERM or SIGINT in main) and returns the exit status. Help goes to stdout; logs and
// errors go to stderr.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	command := "serve"
	if len(args) > 0 {
		switch args[0] {
		case "bench":
			return loadtest.Bench(ctx, args[1:], environ, stdout, stderr)
		case "fleet":
			return loadtest.Fleet(ctx, args[1:], environ, stdout, stderr)
		case "seed":
			return loadtest.Seed(ctx, args[1:], environ, stdout, stderr)
		case "serve", "migrate", "token":
			command, args = args[0], args[1:]
		case "help":
			usage(stdout, "serve")
			return exitOK
		case "healthcheck":
			return healthcheckCommand(ctx, args[1:], environ, stdout, stderr)
		case "ctl":
			return ctlCommand(ctx, args[1:], environ, stdout, stderr)
		case "version", "--version", "-version":
			return versionCommand(args[1:], stdout, stderr)
		}
	}

	var cfg config
	s := define(command, &cfg)
	rest, err := s.Parse(args, environ)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout, command)
		return exitOK
	}
	if err == nil && command == "token" {
		// coordinator token revoke NAME --database-url ...: flags after the positional
		// arguments too.
		rest, err = interspersed(s.FS, rest)
	}
	if err == nil && command == "serve" {
		err = cfg.loadAdminToken(environ)
	}
	if err == nil {
		err = cfg.validate(command)
	}
	if err == nil {
		err = checkArgs(command, rest)
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordinator %s: %v\nRun 'coordinator --help' for usage.\n", command, err)
		return exitUsage
	}

	logger := newLogger(cfg, stderr)
	if unknown := unknownEnv(environ); len(unknown) > 0 {
		logger.Warn("ignoring unknown environment variables", "names", unknown)
	}

	switch command {
	case "migrate":
		err = migrateCommand(rest[0], cfg, stdout)
	case "token":
		err = tokenCommand(ctx, rest, cfg, logger, stdout)
	default:
		applyMemoryLimit(cfg, environ, logger)
		err = serve(ctx, cfg, logger)
	}
	if err == nil {
		return exitOK
	}
	msg := cli.Scrub(err.Error(), cli.URLPassword(cfg.databaseURL))
	if errors.As(err, new(usageErr)) {
		fmt.Fprintf(stderr, "coordinator %s: %s\nRun 'coordinator --help' for usage.\n", command, msg)
		return exitUsage
	}
	logger.Error("coordinator "+command+" failed", "error", msg)
	return exitFailure
}

// checkArgs checks the positional arguments left after the flags.
func checkArgs(command string, rest []string) error {
	if command == "token" {
		return checkTokenArgs(rest)
	}
	if command == "migrate" {
		if len(rest) != 1 {
			return fmt.Errorf("migrate needs exactly one of up, down or version, got %q", rest)
		}
		switch rest[0] {
		case "up", "down", "version":
			return nil
		}
		return fmt.Errorf("migrate needs up, down or version, not %q", rest[0])
	}
	if len(rest) > 0 {
		return fmt.Errorf("unexpected argument %q (commands: %s)", rest[0], strings.Join(commandNames, ", "))
	}
	return nil
}

// commandNames are the binary's commands, as an unexpected argument's refusal lists them.
var commandNames = []string{"serve", "migrate", "token", "ctl", "healthcheck", "bench", "fleet", "seed", "version", "help"}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	if cfg.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// interspersed parses the flags that follow positional arguments in rest, and returns the
// positional arguments alone.
func interspersed(fs *flag.FlagSet, rest []string) ([]string, error) {
	var positional []string
	for len(rest) > 0 {
		if strings.HasPrefix(rest[0], "-") && rest[0] != "-" {
			if err := fs.Parse(rest); err != nil {
				return nil, err
			}
			rest = fs.Args()
			continue
		}
		positional, rest = append(positional, rest[0]), rest[1:]
	}
	return positional, nil
}
