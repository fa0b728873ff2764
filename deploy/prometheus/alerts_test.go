// Package prometheus holds the coordinator's Prometheus alerting rules (alerts.yml) and
// their promtool unit tests (alerts_test.yml). The Go tests here run promtool on them and
// check that the rules use only the metrics, labels and label values of the coordinator's
// metrics contract, so that a renamed metric or label value fails `go test ./...`.
package prometheus

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"
)

const (
	rulesFile     = "alerts.yml"
	ruleTestsFile = "alerts_test.yml"
)

// contractMetric is one metric of the coordinator's contract: its labels, and for some of
// them the values the coordinator gives them (nil: any value).
type contractMetric struct {
	histogram bool
	labels    map[string][]string
}

var (
	decisions = []string{"commit", "abort"}
	causes    = []string{"all_prepared", "commit_request", "abort_vote", "abort_request",
		"deadline", "registration", "lower_aborted"}
	openStatuses = []string{"preparing", "committing"}
)

// contract is the coordinator's metrics contract. Every series also has the target labels
// job and instance; the coordinator's own job label is the same `job`.
var contract = map[string]contractMetric{
	"coordinator_build_info":               {labels: map[string][]string{"version": nil, "store": nil}},
	"coordinator_checkpoints_opened_total": {labels: map[string][]string{}},
	"coordinator_checkpoints_decided_total": {labels: map[string][]string{
		"decision": decisions, "cause": causes}},
	"coordinator_votes_total": {labels: map[string][]string{
		"vote":   {"prepared", "abort"},
		"result": {"accepted", "duplicate", "fenced", "late", "conflict", "not_registered"}}},
	"coordinator_acks_total": {labels: map[string][]string{
		"result": {"accepted", "duplicate", "fenced"}}},
	"coordinator_registrations_total": {labels: map[string][]string{}},
	"coordinator_checkpoint_decision_seconds": {histogram: true, labels: map[string][]string{
		"decision": decisions}},
	"coordinator_checkpoint_completion_seconds": {histogram: true, labels: map[string][]string{}},
	"coordinator_open_checkpoints":              {labels: map[string][]string{"status": openStatuses}},
	"coordinator_oldest_open_checkpoint_timestamp_seconds": {labels: map[string][]string{
		"status": openStatuses}},
	"coordinator_last_committed_checkpoint": {labels: map[string][]string{}},
	"coordinator_http_requests_total": {labels: map[string][]string{
		"route": nil, "method": nil, "code": nil}},
	"coordinator_http_request_duration_seconds": {histogram: true, labels: map[string][]string{
		"route": nil, "method": nil}},
	"coordinator_store_commit_seconds":                {histogram: true, labels: map[string][]string{}},
	"coordinator_retention_deleted_checkpoints_total": {labels: map[string][]string{}},
}

// otherMetrics are the series the rules may use that are not the coordinator's: the scrape
// target's up, and the blackbox exporter's probe of /readyz.
var otherMetrics = []string{"up", "probe_success"}

// promtool returns the path of promtool. Without it the test fails, unless -short.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if testing.Short() {
			t.Skip("promtool not found; skipped in -short mode")
		}
		t.Fatalf("promtool not found in PATH (%v): install it with Debian's prometheus package "+
			"(apt-get install --no-install-recommends prometheus), or run go test -short to skip this test", err)
	}
	return path
}

func TestAlertRulesWithPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", ruleTestsFile},
	} {
		cmd := exec.Command(bin, args...)
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = &out
		if err := cmd.Run(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return rules
}

// TestAlertRulesFollowContract checks every rule's expression against the metrics
// contract, and that every alert has what an operator needs.
func TestAlertRulesFollowContract(t *testing.T) {
	for _, r := range readRules(t) {
		name := r.Alert
		if name == "" {
			name = "record " + r.Record
		}
		if err := checkExpr(r.Expr); err != nil {
			t.Errorf("%s: %v\nexpr: %s", name, err, r.Expr)
		}
		if r.Alert == "" {
			continue
		}
		if r.For == "" {
			t.Errorf("%s: no for:", name)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", name, s)
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", name, a)
			}
		}
	}
}

// TestEveryAlertIsTested checks that alerts_test.yml has, for every alert, a case where it
// fires and one where it does not, and tests no alert that does not exist.
func TestEveryAlertIsTested(t *testing.T) {
	data, err := os.ReadFile(ruleTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name          string `yaml:"name"`
			AlertRuleTest []struct {
				AlertName string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", ruleTestsFile, err)
	}
	if !slices.Contains(f.RuleFiles, rulesFile) {
		t.Errorf("%s: rule_files %v does not load %s", ruleTestsFile, f.RuleFiles, rulesFile)
	}
	fires := map[string]bool{}
	silent := map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				silent[a.AlertName] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, r := range readRules(t) {
		if r.Alert == "" {
			continue
		}
		alerts[r.Alert] = true
		if !fires[r.Alert] {
			t.Errorf("%s: no test case where it fires", r.Alert)
		}
		if !silent[r.Alert] {
			t.Errorf("%s: no test case where it does not fire", r.Alert)
		}
	}
	for name := range fires {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not have", ruleTestsFile, name, rulesFile)
		}
	}
	for name := range silent {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not have", ruleTestsFile, name, rulesFile)
		}
	}
}

func TestCheckExpr(t *testing.T) {
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{`time() - max by (job) (coordinator_oldest_open_checkpoint_timestamp_seconds{status="committing"}) > 10 * 60`, true},
		{`sum(rate(coordinator_votes_total{result="fenced", job=~"orders|payments"}[5m] offset 1h)) by (job) > 0`, true},
		{`histogram_quantile(0.99, sum by (le) (rate(coordinator_store_commit_seconds_bucket[5m]))) > 1`, true},
		{`rate(coordinator_http_requests_total{route="/v1/jobs/{job}", code=~"5.."}[5m:1m])`, true},
		{`absent(up{job="coordinator"}) or probe_success == 0`, true},
		{`sum by (job) (rate(coordinator_vote_total[5m]))`, false},                     // renamed metric
		{`coordinator_votes_total{result="zombie"}`, false},                            // unknown value
		{`coordinator_acks_total{result="late"}`, false},                               // a vote's value, not an ack's
		{`coordinator_open_checkpoints{state="preparing"}`, false},                     // unknown label
		{`coordinator_build_info_bucket`, false},                                       // not a histogram
		{`{__name__=~"coordinator_(votes|acks)_total"}`, false},                        // name selector
		{`max(coordinator_last_committed_checkpoint) unless node_time_seconds`, false}, // another metric
	} {
		err := checkExpr(tc.expr)
		if (err == nil) != tc.ok {
			t.Errorf("checkExpr(%s) = %v, want ok %v", tc.expr, err, tc.ok)
		}
	}
}

// checkExpr checks that a PromQL expression selects only metrics of the contract (or
// otherMetrics), with their labels and label values. It is a tokenizer, not a parser: it
// knows enough of PromQL to find every selector of the expressions a rule file holds.
func checkExpr(expr string) error {
	toks, err := tokenize(expr)
	if err != nil {
		return err
	}
	var errs []error
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		next := func() token {
			if i+1 < len(toks) {
				return toks[i+1]
			}
			return token{}
		}
		switch {
		case tk.kind == tokPunct && tk.text == "{":
			errs = append(errs, errors.New("a selector without a metric name"))
			i = skipPast(toks, i, "}")
		case tk.kind != tokIdent:
		case slices.Contains(keywords, strings.ToLower(tk.text)):
		case slices.Contains(groupings, tk.text) && next().text == "(":
			i = skipPast(toks, i, ")")
		case next().text == "(":
			// a function, or an aggregation with its grouping after its argument
		case slices.Contains(aggregations, tk.text) && (next().text == "by" || next().text == "without"):
			// an aggregation with its grouping first
		default:
			var matchers []matcher
			if next().text == "{" {
				matchers, i, err = parseMatchers(toks, i+1)
				if err != nil {
					errs = append(errs, err)
					continue
				}
			}
			if err := checkSelector(tk.text, matchers); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

var (
	keywords     = []string{"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
	groupings    = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	aggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
		"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)

type matcher struct{ label, op, value string }

func checkSelector(name string, matchers []matcher) error {
	if slices.Contains(otherMetrics, name) {
		return nil
	}
	m, ok := contract[name]
	extra := ""
	if !ok {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, found := strings.CutSuffix(name, suffix)
			if found && contract[base].histogram {
				m, ok = contract[base], true
				if suffix == "_bucket" {
					extra = "le"
				}
			}
		}
	}
	if !ok {
		return fmt.Errorf("metric %s is not in the coordinator's metrics contract", name)
	}
	var errs []error
	for _, mt := range matchers {
		if mt.label == "__name__" {
			errs = append(errs, fmt.Errorf("%s: a __name__ matcher", name))
			continue
		}
		if mt.label == "job" || mt.label == "instance" || mt.label == extra {
			continue
		}
		values, known := m.labels[mt.label]
		if !known {
			errs = append(errs, fmt.Errorf("%s has no label %s", name, mt.label))
			continue
		}
		if values != nil && (mt.op == "=" || mt.op == "!=") && !slices.Contains(values, mt.value) {
			errs = append(errs, fmt.Errorf("%s: %s is never %q (it is one of %v)", name, mt.label, mt.value, values))
		}
	}
	return errors.Join(errs...)
}

// parseMatchers parses the matchers of the selector whose "{" is toks[open], and returns
// them with the index of its "}".
func parseMatchers(toks []token, open int) ([]matcher, int, error) {
	var ms []matcher
	i := open + 1
	for i < len(toks) && toks[i].text != "}" {
		if i+2 >= len(toks) || toks[i].kind != tokIdent || toks[i+1].kind != tokPunct || toks[i+2].kind != tokString {
			return nil, skipPast(toks, open, "}"), errors.New("a label matcher that is not label op \"value\"")
		}
		ms = append(ms, matcher{label: toks[i].text, op: toks[i+1].text, value: toks[i+2].text})
		i += 3
		if i < len(toks) && toks[i].text == "," {
			i++
		}
	}
	return ms, i, nil
}

// skipPast returns the index of the first token text after toks[i].
func skipPast(toks []token, i int, text string) int {
	for i < len(toks) && toks[i].text != text {
		i++
	}
	return i
}

type tokenKind int

const (
	tokIdent tokenKind = iota + 1
	tokNumber
	tokString
	tokPunct
)

type token struct {
	kind tokenKind
	text string // a string's value without quotes (escapes kept)
}

// tokenize splits a PromQL expression into identifiers, numbers (durations included),
// strings and punctuation; comments and range or subquery brackets are dropped.
func tokenize(s string) ([]token, error) {
	var toks []token
	rs := []rune(s)
	isIdent := func(r rune, first bool) bool {
		return r == '_' || r == ':' || unicode.IsLetter(r) || (!first && unicode.IsDigit(r))
	}
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '#':
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
		case r == '[':
			for i < len(rs) && rs[i] != ']' {
				i++
			}
			if i == len(rs) {
				return nil, errors.New("an unclosed [")
			}
			i++
		case r == '"' || r == '\'' || r == '`':
			j := i + 1
			for j < len(rs) && rs[j] != r {
				if rs[j] == '\\' && r != '`' {
					j++
				}
				j++
			}
			if j >= len(rs) {
				return nil, errors.New("an unclosed string")
			}
			toks = append(toks, token{tokString, string(rs[i+1 : j])})
			i = j + 1
		case unicode.IsDigit(r) || (r == '.' && i+1 < len(rs) && unicode.IsDigit(rs[i+1])):
			j := i
			for j < len(rs) && (unicode.IsDigit(rs[j]) || unicode.IsLetter(rs[j]) || rs[j] == '.' || rs[j] == '_') {
				j++
			}
			toks = append(toks, token{tokNumber, string(rs[i:j])})
			i = j
		case isIdent(r, true):
			j := i
			for j < len(rs) && isIdent(rs[j], false) {
				j++
			}
			toks = append(toks, token{tokIdent, string(rs[i:j])})
			i = j
		default:
			j := i + 1
			if j < len(rs) && strings.Contains("=~!<>", string(r)) && strings.Contains("=~", string(rs[j])) {
				j++
			}
			toks = append(toks, token{tokPunct, string(rs[i:j])})
			i = j
		}
	}
	return toks, nil
}
