package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/twophase/coordinator/internal/cli"
)

const usageHeader = `coordinator: a two-phase-commit checkpoint coordinator over HTTP/JSON.

Usage:
  coordinator [serve] [flags]                serve the API (the default command)
  coordinator migrate up|down|version [flags]
                                             up: apply pending schema migrations
                                             down: revert every migration (DROPS ALL COORDINATOR DATA)
                                             version: print the schema version
  coordinator bench [flags]                  drive a running coordinator as participants do, and
                                             measure (see coordinator bench --help)
  coordinator seed --checkpoints N [flags]   add N committed checkpoints to a PostgreSQL database
                                             with SQL, for scale tests (see coordinator seed --help)
  coordinator token create --name N --scopes S [--job J] [--participant P] [--expires-in D]
  coordinator token list | token revoke NAME
                                             manage access tokens on the database directly (to
                                             bootstrap, or while the API is down); create prints
                                             the secret once, on stdout
  coordinator healthcheck [--url URL]        exit 0 if a running coordinator's /readyz answers 200,
                                             1 otherwise: a container's HEALTHCHECK
  coordinator ctl COMMAND [flags]            operate a running coordinator through its API: list
                                             and show checkpoints, find stuck ones, abort, commit,
                                             complete, read the audit (see coordinator ctl --help)
  coordinator version, coordinator --version
                                             print the build's version and its Go release
  coordinator help                           this text
`

const usageStores = `
Stores:
  --database-url postgres://...   PostgreSQL. Any number of coordinator processes may serve
                                  one database at once (rule 8 of docs/protocol.md).
  no --database-url               the embedded store: a SQLite database in --data-dir, as
                                  durable (a 2xx means on disk). It does not support several
                                  coordinator processes on one data directory (a second one
                                  exits at once, naming the first): rule 8 needs PostgreSQL.

Every flag has an environment twin; a flag on the command line wins over its twin.
Exit status: 0 after a clean shutdown (SIGTERM, SIGINT), 1 on a runtime failure,
2 on invalid flags or settings.
`

// usage writes the help of command ("serve" or "migrate") to w.
func usage(w io.Writer, command string) {
	var cfg config
	s := define(command, &cfg)
	fmt.Fprint(w, usageHeader)
	if command == "migrate" || command == "token" {
		fmt.Fprintf(w, "\nFlags of %s:\n", command)
	} else {
		fmt.Fprint(w, "\nFlags of serve:\n")
	}
	for _, name := range s.Order {
		f := s.FS.Lookup(name)
		placeholder, text := cli.UnquoteUsage(f)
		head := "--" + f.Name
		if placeholder != "" {
			head += " " + placeholder
		}
		def := f.DefValue
		switch {
		case f.Name == "database-url":
			def = "none: the embedded store"
		case f.Name == "log-level":
			def = strings.ToLower(def)
		case def == "":
			def = `""`
		}
		fmt.Fprintf(w, "  %-28s env %s (default %s)\n", head, s.Envs[f.Name], def)
		fmt.Fprintf(w, "        %s\n", text)
	}
	fmt.Fprint(w, usageStores)
}
