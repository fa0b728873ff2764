package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/internal/cli"
)

// tokenFlags are the token command's own flags.
type tokenFlags struct {
	name        string
	scopes      string // comma-separated
	job         string
	participant string
	expiresIn   time.Duration
	output      string // table or json
}

func defineToken(fs *flag.FlagSet, t *tokenFlags) {
	fs.StringVar(&t.name, "name", "", "create: the token's `name` (as decided_by and the audit show it)")
	fs.StringVar(&t.scopes, "scopes", "", "create: comma-separated `scopes`: read, participant, trigger, operator, admin")
	fs.StringVar(&t.job, "job", "*", "create: the `pattern` of the jobs the scopes apply to: a job's name, a prefix ending in *, or *")
	fs.StringVar(&t.participant, "participant", "", "create: with the participant scope, the `participant` the token acts as")
	cli.DurationVar(fs, &t.expiresIn, "expires-in", 0, "create: how long (`duration`) the token is accepted, e.g. 720h; 0: until revoked")
	fs.StringVar(&t.output, "o", "table", "list and create: output `format`, table or json")
}

func checkTokenArgs(rest []string) error {
	if len(rest) == 0 {
		return errors.New("token needs create, list or revoke NAME")
	}
	switch rest[0] {
	case "create", "list":
		if len(rest) != 1 {
			return fmt.Errorf("token %s takes flags only, not %q", rest[0], rest[1:])
		}
	case "revoke":
		if len(rest) != 2 {
			return errors.New("token revoke needs the token's name: coordinator token revoke NAME")
		}
	default:
		return fmt.Errorf("token needs create, list or revoke, not %q", rest[0])
	}
	return nil
}

// tokenCommand runs `coordinator token create|list|revoke` on the store of cfg (its
// migrations applied first, so that it can bootstrap a new database).
func tokenCommand(ctx context.Context, rest []string, cfg config, logger *slog.Logger, stdout io.Writer) error {
	t := cfg.token
	if t.output != "table" && t.output != "json" {
		return usageError(fmt.Errorf("-o must be table or json, not %q", t.output))
	}
	cfg.migrate = true
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if logger.Enabled(ctx, slog.LevelDebug) {
		quiet = logger
	}
	store, _, err := openStore(ctx, cfg, quiet, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	tokenStore, ok := store.(coordinator.TokenStore)
	if !ok {
		return fmt.Errorf("the store %T keeps no tokens", store)
	}
	tokens := coordinator.NewTokens(tokenStore)
	switch rest[0] {
	case "create":
		return createToken(ctx, tokens, t, stdout)
	case "list":
		return listTokens(ctx, tokens, t.output, stdout)
	default:
		if err := tokens.Revoke(ctx, rest[1]); err != nil {
			return tokenError(err)
		}
		fmt.Fprintf(stdout, "revoked token %s: every coordinator on the database refuses it within a second\n", rest[1])
		return nil
	}
}

func createToken(ctx context.Context, tokens *coordinator.Tokens, t tokenFlags, stdout io.Writer) error {
	req := coordinator.Token{Name: t.name, Job: coordinator.JobPattern(t.job), Participant: t.participant}
	for _, s := range strings.Split(t.scopes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			req.Scopes = append(req.Scopes, coordinator.Scope(s))
		}
	}
	if t.expiresIn < 0 {
		return usageError(fmt.Errorf("--expires-in must not be negative, not %s", t.expiresIn))
	}
	if t.expiresIn > 0 {
		at := time.Now().Add(t.expiresIn).UTC()
		req.ExpiresAt = &at
	}
	created, secret, err := tokens.Create(ctx, req)
	if err != nil {
		return tokenError(err)
	}
	if t.output == "json" {
		out := tokenJSON(created)
		out.Token = secret
		return json.NewEncoder(stdout).Encode(out)
	}
	// The secret alone on stdout, so that TOKEN=$(coordinator token create ...) works.
	fmt.Fprintln(stdout, secret)
	return nil
}

func listTokens(ctx context.Context, tokens *coordinator.Tokens, output string, stdout io.Writer) error {
	var all []*coordinator.Token
	after := ""
	for {
		page, more, err := tokens.List(ctx, after, coordinator.MaxPageSize)
		if err != nil {
			return tokenError(err)
		}
		all = append(all, page...)
		if !more || len(page) == 0 {
			break
		}
		after = page[len(page)-1].Name
	}
	if output == "json" {
		items := make([]tokenView, len(all))
		for i, t := range all {
			items[i] = tokenJSON(t)
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"items": items})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCOPES\tJOB\tPARTICIPANT\tCREATED\tEXPIRES")
	for _, t := range all {
		expires := "never"
		if t.ExpiresAt != nil {
			expires = t.ExpiresAt.Format(time.RFC3339)
		}
		scopes := make([]string, len(t.Scopes))
		for i, s := range t.Scopes {
			scopes[i] = string(s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, strings.Join(scopes, ","), t.Job, dash(t.Participant),
			t.CreatedAt.Format(time.RFC3339), expires)
	}
	return tw.Flush()
}

// tokenView is a token as the API shows it (openapi.yaml, Token and TokenCreated).
type tokenView struct {
	Name        string              `json:"name"`
	Scopes      []coordinator.Scope `json:"scopes"`
	Job         string              `json:"job"`
	Participant *string             `json:"participant"`
	CreatedAt   time.Time           `json:"created_at"`
	ExpiresAt   *time.Time          `json:"expires_at"`
	Token       string              `json:"token,omitempty"`
}

func tokenJSON(t *coordinator.Token) tokenView {
	v := tokenView{Name: t.Name, Scopes: t.Scopes, Job: string(t.Job), CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt}
	if t.Participant != "" {
		v.Participant = &t.Participant
	}
	return v
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tokenError makes a refusal of the token's request (bad flags, a name taken, no such
// token) a usage error, exit status 2; other failures stay runtime failures.
func tokenError(err error) error {
	var e *coordinator.Error
	if errors.As(err, &e) && e.Code != coordinator.CodeUnavailable {
		return usageError(err)
	}
	return err
}
