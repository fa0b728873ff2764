package api

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestUnknownQueryParameters(t *testing.T) { onEachStore(t, testUnknownQueryParameters) }

// testUnknownQueryParameters: a query parameter that the operation does not declare is
// refused with 400 naming it, and changes nothing; the declared ones still work.
func testUnknownQueryParameters(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a"]}`, "a")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	for _, c := range []struct {
		method, path, body string
		field, message     string // the field error wanted
	}{
		{"GET", "/v1/jobs/j/participants/a/pending?wait=1000", "", "wait", "which takes wait_ms"},
		{"GET", "/v1/jobs?limt=5", "", "limt", "which takes limit, cursor"},
		{"HEAD", "/v1/jobs?limt=5", "", "limt", ""},
		{"GET", "/v1/jobs?Limit=5", "", "Limit", `did you mean "limit"?`},
		{"GET", "/v1/checkpoints?state=aborted", "", "state", "which takes status, job, older_than_ms, limit, cursor"},
		{"GET", "/v1/jobs/j/checkpoints?limit=1&job=j", "", "job", "which takes status, limit, cursor"},
		{"GET", "/v1/jobs/j/checkpoints/1?wait=100", "", "wait", "which takes participant, wait_ms"},
		{"GET", "/v1/jobs/j?verbose", "", "verbose", "which takes none"},
		{"GET", "/healthz?probe=1", "", "probe", "which takes none"},
		{"GET", "/readyz?x=", "", "x", "which takes none"},
		{"GET", "/problems/fenced?lang=en", "", "lang", "which takes none"},
		{"GET", "/v1/jobs?=5", "", "query", "without a name"},
		// A header parameter is not a query parameter.
		{"POST", "/v1/jobs/j/checkpoints?Idempotency-Key=k", "", "Idempotency-Key", "which takes none"},
		{"PUT", votePathOf("j", 1, "a") + "?force=true", `{"epoch":1,"vote":"prepared"}`, "force", "which takes wait_ms"},
		{"PUT", ackPathOf("j", 1, "a") + "?epoch=1", `{"epoch":1}`, "epoch", "which takes none"},
		{"POST", "/v1/jobs/j/checkpoints/1/abort?reason=x", "", "reason", "which takes none"},
		{"POST", "/v1/jobs/j/checkpoints/1/commit?now=1", "", "now", "which takes none"},
		{"POST", "/v1/jobs/j/participants/a/register?epoch=2", "", "epoch", "which takes none"},
		{"PUT", "/v1/jobs/j?dry_run=1", `{"participants":["a","b"]}`, "dry_run", "which takes none"},
		{"DELETE", "/v1/jobs/j?force=1", "", "force", "which takes none"},
	} {
		var a answer
		if c.body != "" {
			a = b.json(t, c.method, c.path, c.body)
		} else {
			a = b.call(t, c.method, c.path, "", "")
		}
		if c.method == "HEAD" {
			if a.status != http.StatusBadRequest || len(a.body) != 0 {
				t.Errorf("HEAD %s: %d with %d body bytes, want 400 without a body", c.path, a.status, len(a.body))
			}
			continue
		}
		p := a.problem(t, http.StatusBadRequest, "invalid_request")
		if p.Errors == nil || len(*p.Errors) != 1 {
			t.Fatalf("%s %s: errors %+v, want one", c.method, c.path, p.Errors)
		}
		got := (*p.Errors)[0]
		if got.Field != c.field || !strings.Contains(got.Message, c.message) || !strings.Contains(*p.Detail, c.field) {
			t.Errorf("%s %s: %q: %q (detail %q), want %q: ...%s...", c.method, c.path, got.Field, got.Message, *p.Detail, c.field, c.message)
		}
	}
	p := b.call(t, "GET", "/v1/jobs?b=1&a=2&limit=3", "", "").problem(t, http.StatusBadRequest, "invalid_request")
	if p.Errors == nil || len(*p.Errors) != 2 || (*p.Errors)[0].Field != "a" || (*p.Errors)[1].Field != "b" {
		t.Errorf("two unknown parameters: %+v, want a and b, in order", p.Errors)
	}
	b.call(t, "GET", "/v1/jobs?limit=%zz", "", "").problem(t, http.StatusBadRequest, "invalid_request")
	b.call(t, "GET", "/v1/jobs?limit=1;cursor=x", "", "").problem(t, http.StatusBadRequest, "invalid_request")

	// Nothing was changed by the refused writes.
	cp := b.checkpoint(t, "j", 1)
	if cp.Status != "preparing" || cp.Participants[0].Vote != nil {
		t.Fatalf("after refused requests: %+v", cp)
	}
	var job Job
	b.call(t, "GET", "/v1/jobs/j", "", "").ok(t, 200, &job)
	if len(job.Participants) != 1 || job.Epochs["a"] != 1 {
		t.Fatalf("after refused requests: %+v", job)
	}

	// The declared parameters are accepted, with GET and HEAD alike.
	for _, path := range []string{"/v1/jobs?limit=5&cursor=", "/v1/checkpoints?status=preparing&limit=1",
		"/v1/jobs/j/checkpoints?status=preparing,aborted&limit=2", "/v1/jobs/j/checkpoints/1?wait_ms=0", "/healthz"} {
		b.call(t, "GET", path, "", "").ok(t, 200, nil)
		if a := b.call(t, "HEAD", path, "", ""); a.status != http.StatusOK {
			t.Errorf("HEAD %s: %d", path, a.status)
		}
	}
}

// TestQueryParamsMatchSpec checks queryParams against openapi.yaml: every operation's
// query parameters, path-level ones included, are exactly those the table gives it.
func TestQueryParamsMatchSpec(t *testing.T) {
	t.Parallel()
	type parameter struct {
		Ref  string `yaml:"$ref"`
		Name string `yaml:"name"`
		In   string `yaml:"in"`
	}
	var spec struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Parameters map[string]parameter `yaml:"parameters"`
		} `yaml:"components"`
	}
	text, err := os.ReadFile("../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(text, &spec); err != nil {
		t.Fatal(err)
	}
	queryOf := func(node yaml.Node) []string {
		if node.Kind == 0 { // no parameters
			return nil
		}
		var params []parameter
		if err := node.Decode(&params); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range params {
			if p.Ref != "" {
				name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/")
				if !ok {
					t.Fatalf("parameter reference %q", p.Ref)
				}
				p = spec.Components.Parameters[name]
			}
			if p.In == "query" {
				names = append(names, p.Name)
			}
		}
		return names
	}
	operations := 0
	for path, item := range spec.Paths {
		shared := queryOf(item["parameters"])
		for method, op := range item {
			if method == "parameters" {
				continue
			}
			operations++
			var fields struct {
				Parameters yaml.Node `yaml:"parameters"`
			}
			if err := op.Decode(&fields); err != nil {
				t.Fatal(err)
			}
			want := append(slices.Clone(shared), queryOf(fields.Parameters)...)
			route := strings.ToUpper(method) + " " + path
			if got := queryNames[route]; !slices.Equal(got, want) {
				t.Errorf("%s: the table gives query parameters %q, openapi.yaml %q", route, got, want)
			}
		}
	}
	if operations != 29 {
		t.Errorf("openapi.yaml has %d operations, want 29 (as TestRequestBodiesCoverRoutes)", operations)
	}
	for route := range queryParams {
		method, path, _ := strings.Cut(route, " ")
		if _, ok := spec.Paths[path][strings.ToLower(method)]; !ok {
			t.Errorf("queryParams has %q, which is no operation of openapi.yaml", route)
		}
	}
}
