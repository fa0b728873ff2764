// Package cli is the command-line plumbing every command of the coordinator binary shares
// (serve and migrate in cmd/coordinator, bench and seed in internal/loadtest): flags with
// environment twins, the exit statuses, and keeping database passwords out of messages.
package cli

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Exit statuses of every command.
const (
	ExitOK      = 0
	ExitFailure = 1 // a runtime failure: database unreachable, port taken, ...
	ExitUsage   = 2 // invalid flags or settings
)

// Settings is a flag.FlagSet whose flags may each have an environment twin.
type Settings struct {
	FS    *flag.FlagSet
	Envs  map[string]string // flag name -> environment variable
	Order []string          // flag names, in the order help lists them
}

// NewSettings returns an empty Settings for the command name. Its flag set prints
// nothing: the command prints errors and usage itself, once.
func NewSettings(name string) *Settings {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &Settings{FS: fs, Envs: map[string]string{}}
}

// Twin gives the flag name the environment twin env, and lists it in help.
func (s *Settings) Twin(name, env string) {
	s.Envs[name] = env
	s.Order = append(s.Order, name)
}

// FlagOnly lists the flag name in help: a flag without an environment twin.
func (s *Settings) FlagOnly(name string) {
	s.Order = append(s.Order, name)
}

// Parse sets the flags from args, then every flag not given in args from its environment
// twin in environ, so that a flag wins over its twin. It returns the arguments left after
// the flags. flag.ErrHelp means help was asked for.
func (s *Settings) Parse(args []string, environ []string) ([]string, error) {
	if err := s.FS.Parse(args); err != nil {
		return nil, err
	}
	rest := s.FS.Args()
	// Flags may also follow the first positional argument ("migrate up --database-url ...").
	if len(rest) > 1 {
		if err := s.FS.Parse(rest[1:]); err != nil {
			return nil, err
		}
		rest = append([]string{rest[0]}, s.FS.Args()...)
	}
	given := map[string]bool{}
	s.FS.Visit(func(f *flag.Flag) { given[f.Name] = true })
	env := map[string]string{}
	for _, kv := range environ {
		if name, value, ok := strings.Cut(kv, "="); ok {
			env[name] = value
		}
	}
	names := make([]string, 0, len(s.Envs))
	for name := range s.Envs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		value, ok := env[s.Envs[name]]
		if given[name] || !ok {
			continue
		}
		if err := s.FS.Set(name, value); err != nil {
			return nil, fmt.Errorf("invalid value %q for %s (twin of --%s): %v", value, s.Envs[name], name, err)
		}
	}
	return rest, nil
}

// RedactURL hides the password of a database URL, in its user part and in a password
// query parameter, so that the URL can be logged.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// URLPassword returns the password a database URL carries, if any, so that it can be
// scrubbed from error messages of libraries that repeat the URL.
func URLPassword(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if p, ok := u.User.Password(); ok {
		return p
	}
	return u.Query().Get("password")
}

// Scrub replaces every occurrence of secret in s, escaped or not.
func Scrub(s, secret string) string {
	if secret == "" {
		return s
	}
	s = strings.ReplaceAll(s, secret, "xxxxx")
	if esc := url.QueryEscape(secret); esc != secret {
		s = strings.ReplaceAll(s, esc, "xxxxx")
	}
	if esc := url.PathEscape(secret); esc != secret {
		s = strings.ReplaceAll(s, esc, "xxxxx")
	}
	return s
}

// DurationVar defines a time.Duration flag, as flag.DurationVar does, whose refusal of a
// value says what a duration looks like ("5" is refused with "needs a unit, such as 5s"),
// where the flag package says only "parse error". Its environment twin says the same.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, numErr := strconv.ParseFloat(strings.TrimSpace(s), 64); numErr == nil {
			return fmt.Errorf("a duration needs a unit: %ss, %sms, %sm (units ns, us, ms, s, m, h)", s, s, s)
		}
		return fmt.Errorf("not a duration: want a number with a unit, such as 5s, 500ms, 2m or 1h30m")
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) Get() any { return time.Duration(*d) }

func (d *durationValue) String() string { return time.Duration(*d).String() }

// UnquoteUsage is flag.UnquoteUsage, which names the placeholder of a DurationVar flag
// "duration" as it does for the flag package's own.
func UnquoteUsage(f *flag.Flag) (name, usage string) {
	name, usage = flag.UnquoteUsage(f)
	if _, ok := f.Value.(*durationValue); ok && name == "value" {
		name = "duration"
	}
	return name, usage
}
