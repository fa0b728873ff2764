package api

import (
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// The contract's ProblemCode enum lists exactly the codes that the coordinator answers, so
// that typed clients can switch on every one of them.
func TestProblemCodeEnumIsTheProblemTable(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile("../openapi.yaml")
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	ref := doc.Components.Schemas["ProblemCode"]
	if ref == nil || ref.Value == nil {
		t.Fatal("openapi.yaml has no schema ProblemCode")
	}
	var inSpec []string
	for _, v := range ref.Value.Enum {
		inSpec = append(inSpec, v.(string))
	}
	var answered []string
	for _, k := range problemTable {
		answered = append(answered, k.code)
	}
	slices.Sort(inSpec)
	slices.Sort(answered)
	if !slices.Equal(inSpec, answered) {
		t.Errorf("ProblemCode enum = %v\nthe codes the coordinator answers = %v", inSpec, answered)
	}
	if p := doc.Components.Schemas["Problem"].Value.Properties["code"]; p == nil || p.Ref != "#/components/schemas/ProblemCode" {
		t.Errorf("Problem.code is not a ProblemCode")
	}
}

// Each operation lists the error statuses it can answer, each with the problem schema, so
// that a client generated from the contract has a type for each: every operation 400 (a
// query parameter it does not declare) and 403 (a browser's cross-site request); those under
// /v1 also 401 and 503 (authentication, the database); those that name a job, checkpoint or
// token 404 (but the PUT that creates a job); those that name a checkpoint 410; those that take a body 413 and 415.
func TestEveryOperationListsItsErrorStatuses(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile("../openapi.yaml")
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			want := []string{"400", "403"}
			if strings.HasPrefix(path, "/v1/") {
				want = append(want, "401")
				if path != "/v1/info" {
					want = append(want, "503")
				}
			}
			creates := method == "PUT" && path == "/v1/jobs/{job}"
			if !creates && (strings.Contains(path, "{job}") || strings.Contains(path, "{name}") || strings.Contains(path, "{code}")) {
				want = append(want, "404")
			}
			if strings.Contains(path, "{id}") {
				want = append(want, "410")
			}
			if op.RequestBody != nil {
				want = append(want, "413", "415")
			}
			for _, status := range want {
				r := op.Responses.Value(status)
				if r == nil || r.Value == nil {
					t.Errorf("%s %s does not list %s", method, path, status)
					continue
				}
				mt := r.Value.Content.Get("application/problem+json")
				if mt == nil || mt.Schema == nil || mt.Schema.Ref != "#/components/schemas/Problem" {
					t.Errorf("%s %s: %s is not a problem document", method, path, status)
				}
			}
			if op.Responses.Default() == nil {
				t.Errorf("%s %s has no default problem response (500, 421 and the rest)", method, path)
			}
		}
	}
}
