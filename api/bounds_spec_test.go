package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/twophase/coordinator/coordinator"
)

// TestSpecBoundsEnforced is generated from openapi.yaml: every bounded parameter (path,
// query, header) and every bounded member of a JSON request body is sent just past each of
// its bounds (minimum, maximum, minLength, maxLength, minItems, maxItems, pattern, enum), to
// the real handler on both stores, and must answer 400 problem+json and change nothing. A
// bound the document states and the coordinator does not enforce fails here; a new
// operation with a body fails until validBodies has a valid body for it.
func TestSpecBoundsEnforced(t *testing.T) { onEachStore(t, testSpecBoundsEnforced) }

// validBodies are a valid request body of each operation that takes one: the base that one
// member at a time is taken past its bound.
var validBodies = map[string]string{
	"putJob":             `{"participants":["a","b"],"checkpoint_timeout_ms":60000,"max_concurrent_checkpoints":1,"auto_commit":true,"retention_ms":0}`,
	"prepareCheckpoint":  `{"timeout_ms":60000}`,
	"putVote":            `{"epoch":1,"vote":"prepared","committables":[]}`,
	"commitCheckpoint":   `{"reason":"ok"}`,
	"abortCheckpoint":    `{"reason":"ok"}`,
	"putAck":             `{"epoch":1}`,
	"completeCheckpoint": `{"reason":"ok"}`,
	"createToken":        `{"name":"t-new","scopes":["read"],"job":"*"}`,
}

// validPath fills a path's parameters with values that name what setupBounds made.
var validPath = map[string]string{"job": "orders", "participant": "a", "id": "1", "name": "t-read", "code": "fenced"}

func testSpecBoundsEnforced(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile("../openapi.yaml")
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	// Served as the binary serves: long-polls on pending may be parked.
	store := testStore(t)
	ts := store.(coordinator.TokenStore)
	auth := coordinator.NewAuthenticator(ts, testAdminToken, nil)
	if err := auth.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := newParkServerOn(t, store, Options{Auth: auth, Tokens: coordinator.NewTokens(ts)})
	admin := "Bearer " + testAdminToken
	send := func(method, path string, header http.Header, body string) (int, string, []byte) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, b.url+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		req.Header.Set("Authorization", admin)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), got
	}
	// What there is to change: a job with a registered participant, an open checkpoint, a
	// token. state reads all of it back, to show that a refused request changed nothing.
	for _, step := range []struct{ method, path, body string }{
		{"PUT", "/v1/jobs/orders", `{"participants":["a","b"]}`},
		{"POST", "/v1/jobs/orders/participants/a/register", ""},
		{"POST", "/v1/jobs/orders/checkpoints", ""},
		{"POST", "/v1/tokens", `{"name":"t-read","scopes":["read"],"job":"*"}`},
	} {
		if code, _, got := send(step.method, step.path, nil, step.body); code/100 != 2 {
			t.Fatalf("set-up %s %s: %d %s", step.method, step.path, code, got)
		}
	}
	state := func() string {
		var out []string
		for _, p := range []string{"/v1/jobs", "/v1/jobs/orders", "/v1/jobs/orders/checkpoints", "/v1/tokens", "/v1/audit",
			"/v1/jobs/orders/participants/a/pending"} {
			code, _, got := send("GET", p, nil, "")
			out = append(out, fmt.Sprintf("%s %d %s", p, code, got))
		}
		return strings.Join(out, "\n")
	}
	before := state()

	checked := 0
	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, template := range paths {
		item := doc.Paths.Value(template)
		for method, op := range item.Operations() {
			params := slices.Concat(item.Parameters, op.Parameters)
			// Each bounded parameter, past each bound, the others valid.
			for _, ref := range params {
				p := ref.Value
				if p.Schema == nil {
					continue
				}
				bounds := pastBounds(p.Schema.Value)
				if s := p.Schema.Value; s.Type != nil && s.Type.Is("array") && s.Items != nil {
					// A list in a query parameter: each item past its bounds.
					bounds = pastBounds(s.Items.Value)
				}
				for _, bad := range bounds {
					path, query, header := fillPath(template), url.Values{}, http.Header{}
					switch p.In {
					case "path":
						path = strings.Replace(fillPath(template, p.Name), "{"+p.Name+"}", url.PathEscape(bad.text), 1)
					case "query":
						query.Set(p.Name, bad.text)
					case "header":
						header.Set(p.Name, bad.text)
					default:
						continue
					}
					if len(query) > 0 {
						path += "?" + query.Encode()
					}
					body := validBodies[op.OperationID]
					code, ct, got := send(method, path, header, body)
					checked++
					if code != http.StatusBadRequest || ct != "application/problem+json" {
						t.Errorf("%s %s (%s %s %s): %d %s %s; want 400 problem+json", method, path, p.In, p.Name, bad.why, code, ct, got)
					}
				}
			}
			// Each bounded member of the body, past each bound, the others valid.
			if op.RequestBody == nil {
				continue
			}
			media := op.RequestBody.Value.Content.Get("application/json")
			if media == nil || media.Schema == nil {
				continue
			}
			base, ok := validBodies[op.OperationID]
			if !ok {
				t.Errorf("%s %s takes a JSON body: add a valid one to validBodies", method, template)
				continue
			}
			for name, prop := range media.Schema.Value.Properties {
				for _, bad := range pastBounds(prop.Value) {
					var body map[string]any
					if err := json.Unmarshal([]byte(base), &body); err != nil {
						t.Fatal(err)
					}
					body[name] = bad.value
					raw, _ := json.Marshal(body)
					path := fillPath(template)
					code, ct, got := send(method, path, nil, string(raw))
					checked++
					if code != http.StatusBadRequest || ct != "application/problem+json" {
						t.Errorf("%s %s with %s %s (%s): %d %s %s; want 400 problem+json", method, path, name, bad.why, raw, code, ct, got)
					}
				}
			}
		}
	}
	if checked < 40 {
		t.Fatalf("only %d bounds checked: is the document read?", checked)
	}
	if after := state(); after != before {
		t.Errorf("refused requests changed the state:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// fillPath fills a path template's parameters with valid values, all but skip.
func fillPath(template string, skip ...string) string {
	path := template
	for name, v := range validPath {
		if !slices.Contains(skip, name) {
			path = strings.ReplaceAll(path, "{"+name+"}", v)
		}
	}
	return path
}

// outOfBound is one value just past one of a schema's bounds: as text (for a parameter)
// and as a JSON value (for a body member).
type outOfBound struct {
	why   string
	text  string
	value any
}

// pastBounds lists, for each bound of s, a value just past it.
func pastBounds(s *openapi3.Schema) []outOfBound {
	if s == nil {
		return nil
	}
	var out []outOfBound
	typ := ""
	if s.Type != nil && len(*s.Type) > 0 {
		typ = (*s.Type)[0]
	}
	switch typ {
	case "integer", "number":
		if s.Min != nil {
			n := int64(*s.Min) - 1
			out = append(out, outOfBound{"below minimum", strconv.FormatInt(n, 10), n})
		}
		if s.Max != nil {
			n := int64(*s.Max) + 1
			out = append(out, outOfBound{"above maximum", strconv.FormatInt(n, 10), n})
		}
	case "string":
		if s.MinLength > 1 {
			out = append(out, outOfBound{"below minLength", strings.Repeat("a", int(s.MinLength)-1), strings.Repeat("a", int(s.MinLength)-1)})
		} else if s.MinLength == 1 {
			out = append(out, outOfBound{"empty", "", ""})
		}
		if s.MaxLength != nil {
			long := strings.Repeat("a", int(*s.MaxLength)+1)
			out = append(out, outOfBound{"above maxLength", long, long})
		}
		if s.Pattern != "" {
			for _, bad := range []string{"-starts-with-dash", "has space", "é"} {
				if !matchesPattern(s.Pattern, bad) {
					out = append(out, outOfBound{"not matching " + s.Pattern, bad, bad})
					break
				}
			}
		}
		if len(s.Enum) > 0 {
			out = append(out, outOfBound{"not in enum", "nope", "nope"})
		}
	case "array":
		item := any("a")
		if s.Items != nil && s.Items.Value != nil && s.Items.Value.Type != nil && s.Items.Value.Type.Is("integer") {
			item = 1
		}
		if s.MinItems > 0 {
			items := make([]any, s.MinItems-1)
			for i := range items {
				items[i] = item
			}
			out = append(out, outOfBound{"below minItems", "", items})
		}
		if s.MaxItems != nil {
			items := make([]any, *s.MaxItems+1)
			for i := range items {
				items[i] = fmt.Sprintf("p%d", i)
			}
			out = append(out, outOfBound{"above maxItems", "", items})
		}
		if s.Items != nil {
			for _, bad := range pastBounds(s.Items.Value) {
				out = append(out, outOfBound{"an item " + bad.why, "", []any{bad.value}})
			}
		}
	}
	return out
}

func matchesPattern(pattern, s string) bool {
	re, err := regexp.Compile(pattern)
	return err == nil && re.MatchString(s)
}
