package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/twophase/coordinator/internal/cli"
)

// The repository's docker-compose.yml and Dockerfile, from this package's directory.
const (
	composeFile = "../../docker-compose.yml"
	dockerfile  = "../../Dockerfile"
)

// composeService is what the test reads of a service of docker-compose.yml.
type composeService struct {
	Image       string            `yaml:"image"`
	Build       yaml.Node         `yaml:"build"`
	Environment map[string]string `yaml:"environment"` // the mapping form: the file uses no other
	Volumes     []string          `yaml:"volumes"`
	Ports       []yaml.Node       `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeProject struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

func readCompose(t *testing.T) composeProject {
	t.Helper()
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var p composeProject
	if err := yaml.Unmarshal(b, &p); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return p
}

// interpolation is compose's ${NAME}, ${NAME:-default} and ${NAME-default}; $$ is a
// literal $, left to the container.
var interpolation = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// withDefaults is value as compose makes it with none of its variables set: each
// ${NAME:-default} is its default. It fails the test on a variable without one.
func withDefaults(t *testing.T, value string) string {
	t.Helper()
	return interpolation.ReplaceAllStringFunc(value, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sub := interpolation.FindStringSubmatch(m)
		if !strings.Contains(m, "-") {
			t.Errorf("%q: ${%s} has no default: the example does not start without it", value, sub[1])
		}
		return sub[2]
	})
}

// TestComposeFile checks docker-compose.yml, since no test runs Docker: a postgres:15
// with a named volume and a pg_isready healthcheck, and the coordinator built from the
// Dockerfile, configured with environment twins that serve knows, waiting for a healthy
// database, published on loopback only, with the image's healthcheck.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	p := readCompose(t)

	pg, ok := p.Services["postgres"]
	if !ok {
		t.Fatalf("%s: no postgres service", composeFile)
	}
	if pg.Image != "postgres:15" && !strings.HasPrefix(pg.Image, "postgres:15.") {
		t.Errorf("postgres image %q, want postgres:15", pg.Image)
	}
	if pg.Environment["POSTGRES_DB"] != "coordinator" {
		t.Errorf("POSTGRES_DB = %q, want the dedicated database coordinator", pg.Environment["POSTGRES_DB"])
	}
	if !slices.ContainsFunc(pg.Healthcheck.Test, func(s string) bool { return strings.Contains(s, "pg_isready") }) {
		t.Errorf("postgres healthcheck %q does not run pg_isready", pg.Healthcheck.Test)
	}
	namedVolume := false
	for _, v := range pg.Volumes {
		source, target, _ := strings.Cut(v, ":")
		if _, declared := p.Volumes[source]; declared && strings.HasPrefix(target, "/var/lib/postgresql/data") {
			namedVolume = true
		}
	}
	if !namedVolume {
		t.Errorf("postgres volumes %q: want a named volume (declared under volumes:) on /var/lib/postgresql/data", pg.Volumes)
	}

	co, ok := p.Services["coordinator"]
	if !ok {
		t.Fatalf("%s: no coordinator service", composeFile)
	}
	checkBuild(t, co.Build)

	// Its environment: twins that serve reads, with values that it takes.
	var cfg config
	twins := map[string]bool{}
	for _, env := range define("serve", &cfg).Envs {
		twins[env] = true
	}
	// The image's own environment first (COORDINATOR_LISTEN=:8080): the file's comes on top.
	environ := dockerfileEnv(t)
	for name, value := range co.Environment {
		if name == adminTokenEnv {
			// No token in the file: compose refuses to start without one, and says how
			// to make one.
			if !regexp.MustCompile(`^\$\{` + adminTokenEnv + `:\?[^}]*openssl rand[^}]*\}$`).MatchString(value) {
				t.Errorf("%s %q: want ${%s:?...} with a hint to make one with openssl rand, no literal token", name, value, name)
			}
			environ = append(environ, name+"="+strings.Repeat("t", 64))
			continue
		}
		if !twins[name] {
			t.Errorf("coordinator environment %s is no environment twin of a serve flag", name)
		}
		environ = append(environ, name+"="+withDefaults(t, value))
	}
	cfg, err := parseServe(t, nil, environ)
	if err != nil {
		t.Fatalf("coordinator environment %q: %v", environ, err)
	}
	if !cfg.authOn() {
		t.Errorf("the coordinator of the compose file runs without authentication: want %s", adminTokenEnv)
	}
	if cfg.databaseWait != 30*time.Second {
		t.Errorf("database wait %s, want COORDINATOR_DATABASE_WAIT=30s", cfg.databaseWait)
	}
	if !slices.Contains(cfg.apiAllowedHosts(), "coordinator") {
		t.Errorf("allowed hosts %q: want the service's name, coordinator, under which the project's other containers reach it",
			cfg.apiAllowedHosts())
	}
	u, err := url.Parse(cfg.databaseURL)
	if err != nil || u.Hostname() != "postgres" || u.Path != "/coordinator" {
		t.Errorf("COORDINATOR_DATABASE_URL %q: want the postgres service's database coordinator", cli.RedactURL(cfg.databaseURL))
	} else if u.User.Username() != withDefaults(t, pg.Environment["POSTGRES_USER"]) {
		t.Errorf("COORDINATOR_DATABASE_URL's user %q is not POSTGRES_USER %q", u.User.Username(), pg.Environment["POSTGRES_USER"])
	}

	// No secret in the file: the password is an example value, the default of a variable.
	passwordVar := regexp.MustCompile(`^\$\{POSTGRES_PASSWORD:-[^}]*\}$`)
	if !passwordVar.MatchString(pg.Environment["POSTGRES_PASSWORD"]) {
		t.Errorf("POSTGRES_PASSWORD %q: want ${POSTGRES_PASSWORD:-example}, no literal password", pg.Environment["POSTGRES_PASSWORD"])
	}
	raw := co.Environment["COORDINATOR_DATABASE_URL"]
	if at := strings.LastIndex(raw, "@"); at < 0 || !strings.Contains(raw[:at], ":"+pg.Environment["POSTGRES_PASSWORD"]) {
		t.Errorf("COORDINATOR_DATABASE_URL %q: want the password as %s", raw, pg.Environment["POSTGRES_PASSWORD"])
	}

	if dep, ok := co.DependsOn["postgres"]; !ok || dep.Condition != "service_healthy" {
		t.Errorf("coordinator depends_on %+v, want postgres with condition service_healthy", co.DependsOn)
	}
	if want := dockerfileHealthcheck(t); !slices.Equal(co.Healthcheck.Test, want) {
		t.Errorf("coordinator healthcheck %q, want the image's %q", co.Healthcheck.Test, want)
	}
	published := false
	for _, port := range co.Ports {
		if _, container := publishedPort(t, "coordinator", port); container == "8080" {
			published = true
		}
	}
	if !published {
		t.Errorf("coordinator does not publish its port 8080 (COORDINATOR_LISTEN of the image)")
	}

	// Every published port of every service binds loopback, never 0.0.0.0.
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if hostIP, _ := publishedPort(t, name, port); !net.ParseIP(hostIP).IsLoopback() {
				t.Errorf("service %s publishes %s on %q, want 127.0.0.1 (no host IP binds 0.0.0.0)", name, port.Value, hostIP)
			}
		}
	}
}

// checkBuild checks that the coordinator is built from the repository's Dockerfile:
// build: . or build: {context: ., dockerfile: Dockerfile}.
func checkBuild(t *testing.T, build yaml.Node) {
	t.Helper()
	var dir, file string
	switch build.Kind {
	case yaml.ScalarNode:
		dir, file = build.Value, "Dockerfile"
	case yaml.MappingNode:
		var b struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		}
		if err := build.Decode(&b); err != nil {
			t.Fatalf("coordinator build: %v", err)
		}
		dir, file = b.Context, b.Dockerfile
		if file == "" {
			file = "Dockerfile"
		}
	default:
		t.Fatalf("coordinator has no build: want build: . (the Dockerfile)")
	}
	if strings.TrimSuffix(dir, "/") != "." || file != "Dockerfile" {
		t.Errorf("coordinator built from context %q, file %q; want . and Dockerfile", dir, file)
	}
}

// publishedPort returns the host IP ("" if none, which binds 0.0.0.0) and the container
// port of a ports entry, in the short syntax ("127.0.0.1:8080:8080", "8080:8080", "8080")
// or the long one (host_ip, target).
func publishedPort(t *testing.T, service string, port yaml.Node) (hostIP, container string) {
	t.Helper()
	switch port.Kind {
	case yaml.ScalarNode:
		spec, _, _ := strings.Cut(port.Value, "/") // protocol
		if strings.HasPrefix(spec, "[") {          // [::1]:8080:8080
			end := strings.Index(spec, "]")
			hostIP, spec = spec[1:end], strings.TrimPrefix(spec[end+1:], ":")
			parts := strings.Split(spec, ":")
			return hostIP, parts[len(parts)-1]
		}
		parts := strings.Split(spec, ":")
		if len(parts) == 3 {
			hostIP = parts[0]
		}
		return hostIP, parts[len(parts)-1]
	case yaml.MappingNode:
		var p struct {
			HostIP string `yaml:"host_ip"`
			Target string `yaml:"target"`
		}
		if err := port.Decode(&p); err != nil {
			t.Fatalf("service %s ports: %v", service, err)
		}
		return p.HostIP, p.Target
	}
	t.Fatalf("service %s: a ports entry that is neither a string nor a mapping", service)
	return "", ""
}

// dockerfileHealthcheck is the exec form of the Dockerfile's HEALTHCHECK CMD.
func dockerfileHealthcheck(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "HEALTHCHECK ")
		if !ok {
			continue
		}
		i := strings.Index(rest, "CMD ")
		if i < 0 {
			t.Fatalf("Dockerfile: HEALTHCHECK without CMD: %q", line)
		}
		var cmd []string
		if err := json.Unmarshal([]byte(rest[i+len("CMD "):]), &cmd); err != nil {
			t.Fatalf("Dockerfile: HEALTHCHECK CMD is not the exec form: %q", line)
		}
		return append([]string{"CMD"}, cmd...)
	}
	t.Fatal("Dockerfile: no HEALTHCHECK")
	return nil
}

// dockerfileEnv is the environment the Dockerfile's ENV instructions set, NAME=value.
func dockerfileEnv(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "ENV "); ok {
			line, in = rest, true
		}
		if !in {
			continue
		}
		cont := strings.HasSuffix(line, "\\")
		for _, kv := range strings.Fields(strings.TrimSuffix(line, "\\")) {
			if strings.Contains(kv, "=") {
				env = append(env, kv)
			}
		}
		in = cont
	}
	if len(env) == 0 {
		t.Fatalf("%s sets no ENV", dockerfile)
	}
	return env
}
