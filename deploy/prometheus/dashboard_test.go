package prometheus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The Grafana dashboard of the coordinator's metrics (deploy/grafana/coordinator.json). The
// tests here check its queries against the same metrics contract as the alerting rules.
const dashboardFile = "../grafana/coordinator.json"

// The dashboard's template variables: the data source of every panel, the coordinator jobs
// (multi-select, so always matched with =~) and the scrape job's name.
const (
	datasourceRef = "${datasource}"
	jobMatcher    = `job=~"$job"`
	scrapeMatcher = `job="$scrape_job"`
)

// dashboardVars are what the variables of the dashboard's queries stand for when they are
// checked: a value of the right shape. A variable not listed here fails the test.
var dashboardVars = map[string]string{
	"job":               ".+",
	"scrape_job":        "coordinator",
	"__rate_interval":   "5m",
	"__interval":        "1m",
	"__range":           "1h",
	"__range_s":         "3600",
	"__interval_ms":     "60000",
	"__scrape_interval": "15s",
}

// dbGauges are the gauges read from the shared database: every coordinator on it reports
// the same values, so a query takes their max (by job), never their sum.
var dbGauges = []string{
	"coordinator_open_checkpoints",
	"coordinator_oldest_open_checkpoint_timestamp_seconds",
	"coordinator_last_committed_checkpoint",
}

// instanceMetrics are the series that are not about one coordinator job. With the scrape
// configuration's honor_labels: true they carry the scrape job's name in job
// (job="coordinator"), so the dashboard selects them by $scrape_job, never by $job (which
// would match none of them). Every other metric of the contract is per job.
var instanceMetrics = []string{
	"coordinator_build_info",
	"coordinator_http_requests_total",
	"coordinator_http_request_duration_seconds",
	"coordinator_store_commit_seconds",
	"coordinator_retention_deleted_checkpoints_total",
	"up",
}

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []templateVar `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int     `json:"id"`
	Type       string  `json:"type"`
	Title      string  `json:"title"`
	Datasource *dsRef  `json:"datasource"`
	GridPos    gridPos `json:"gridPos"`
	Targets    []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *dsRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type gridPos struct{ H, W, X, Y int }

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type templateVar struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *dsRef          `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(data) {
		t.Fatalf("%s is not valid JSON", dashboardFile)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if len(d.Panels) == 0 {
		t.Fatalf("%s has no panels", dashboardFile)
	}
	return d
}

// allPanels returns the dashboard's panels, those of collapsed rows included.
func allPanels(d dashboard) []panel {
	var ps []panel
	for _, p := range d.Panels {
		ps = append(ps, p)
		ps = append(ps, p.Panels...)
	}
	return ps
}

type dashboardQuery struct {
	panel string // title and refId, for messages
	expr  string
}

// dashboardQueries returns the expression of every target of every panel.
func dashboardQueries(d dashboard) []dashboardQuery {
	var qs []dashboardQuery
	for _, p := range allPanels(d) {
		for _, tg := range p.Targets {
			qs = append(qs, dashboardQuery{fmt.Sprintf("panel %d %q, query %s", p.ID, p.Title, tg.RefID), tg.Expr})
		}
	}
	return qs
}

func TestDashboardPanels(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q, uid %q: want both", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want 36 or later (data sources referenced by uid)", d.SchemaVersion)
	}
	ids := map[int]string{}
	for _, p := range allPanels(d) {
		name := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if strings.TrimSpace(p.Title) == "" {
			t.Errorf("%s: no title", name)
		}
		if p.ID <= 0 {
			t.Errorf("%s: no id", name)
		} else if other, dup := ids[p.ID]; dup {
			t.Errorf("%s: id also used by %q", name, other)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Type == "" {
			t.Errorf("%s: no type", name)
		}
		if p.Datasource == nil || p.Datasource.UID != datasourceRef {
			t.Errorf("%s: datasource %+v, want uid %s (the data source variable)", name, p.Datasource, datasourceRef)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no targets", name)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s, query %s: no expr", name, tg.RefID)
			}
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: refId %q missing or repeated", name, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource != nil && tg.Datasource.UID != datasourceRef {
				t.Errorf("%s, query %s: datasource uid %q, want %s", name, tg.RefID, tg.Datasource.UID, datasourceRef)
			}
		}
	}
	// The layout: every top-level panel within the 24 columns, none overlapping another.
	for i, p := range d.Panels {
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %d %q: gridPos %+v out of the grid", p.ID, p.Title, g)
		}
		for _, q := range d.Panels[:i] {
			h := q.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panel %d %q overlaps panel %d %q", p.ID, p.Title, q.ID, q.Title)
			}
		}
	}
}

// TestDashboardFollowsContract checks every query of the dashboard against the metrics
// contract, the gauges' aggregation, and which job each metric is selected by.
func TestDashboardFollowsContract(t *testing.T) {
	for _, q := range dashboardQueries(readDashboard(t)) {
		expr, err := expandVars(q.expr)
		if err != nil {
			t.Errorf("%s: %v\nexpr: %s", q.panel, err, q.expr)
			continue
		}
		if err := checkExpr(expr); err != nil {
			t.Errorf("%s: %v\nexpr: %s", q.panel, err, q.expr)
		}
		if err := checkGaugeAggregation(expr); err != nil {
			t.Errorf("%s: %v\nexpr: %s", q.panel, err, q.expr)
		}
		if err := checkJobSelection(q.expr); err != nil {
			t.Errorf("%s: %v\nexpr: %s", q.panel, err, q.expr)
		}
	}
}

func TestDashboardVariables(t *testing.T) {
	vars := map[string]templateVar{}
	for _, v := range readDashboard(t).Templating.List {
		vars[v.Name] = v
	}
	ds, ok := vars["datasource"]
	if !ok || ds.Type != "datasource" || string(ds.Query) != `"prometheus"` {
		t.Errorf("variable datasource: %+v, want a datasource variable of query prometheus", ds)
	}
	job, ok := vars["job"]
	if !ok {
		t.Fatal("no variable job")
	}
	if job.Type != "query" || !job.Multi || !job.IncludeAll {
		t.Errorf("variable job: type %q, multi %v, includeAll %v; want a query, multi-select with All", job.Type, job.Multi, job.IncludeAll)
	}
	if job.Datasource == nil || job.Datasource.UID != datasourceRef {
		t.Errorf("variable job: datasource %+v, want uid %s", job.Datasource, datasourceRef)
	}
	// The query is a string in older models, an object with the string in query in newer.
	var query string
	if json.Unmarshal(job.Query, &query) != nil {
		var q struct{ Query string }
		if err := json.Unmarshal(job.Query, &q); err != nil {
			t.Fatalf("variable job: query %s: %v", job.Query, err)
		}
		query = q.Query
	}
	for _, s := range []string{query, job.Definition} {
		m := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`).FindStringSubmatch(strings.TrimSpace(s))
		if m == nil || m[2] != "job" {
			t.Errorf("variable job: query %q, want label_values(<a per-job metric>, job)", s)
			continue
		}
		if err := checkExpr(m[1]); err != nil {
			t.Errorf("variable job: %v", err)
		}
		sel := strings.TrimSpace(m[1])
		if i := strings.IndexByte(sel, '{'); i >= 0 {
			sel = sel[:i]
		}
		if name, ok := metricOf(sel); !ok || slices.Contains(instanceMetrics, name) {
			t.Errorf("variable job: %s is not a per-job metric", m[1])
		}
	}
	if _, ok := vars["scrape_job"]; !ok {
		t.Error("no variable scrape_job")
	}
}

// TestDashboardWithPromtool has promtool parse every query of the dashboard, as the
// expressions of recording rules (promtool has no other offline check of an expression).
func TestDashboardWithPromtool(t *testing.T) {
	bin := promtool(t)
	type recording struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []recording
	var names []string
	for i, q := range dashboardQueries(readDashboard(t)) {
		expr, err := expandVars(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.panel, err)
			continue
		}
		rules = append(rules, recording{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: expr})
		names = append(names, q.panel)
	}
	data, err := yaml.Marshal(map[string]any{
		"groups": []any{map[string]any{"name": "dashboard", "rules": rules}},
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard_rules.yml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "check", "rules", file)
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		var legend strings.Builder
		for i, n := range names {
			fmt.Fprintf(&legend, "dashboard:query_%d is %s\n", i, n)
		}
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out.String(), legend.String())
	}
}

func TestDashboardCheckers(t *testing.T) {
	for _, tc := range []struct {
		expr            string
		gaugeOK, jobsOK bool
	}{
		{`max by (job, status) (coordinator_open_checkpoints{job=~"$job"})`, true, true},
		{`time() - max by (job, status) (coordinator_oldest_open_checkpoint_timestamp_seconds{job=~"$job"})`, true, true},
		{`max(coordinator_last_committed_checkpoint{job=~"$job"}) by (job)`, true, true},
		{`sum(max by (job) (coordinator_open_checkpoints{job=~"$job"}))`, true, true}, // a total of the jobs
		{`sum(coordinator_open_checkpoints{job=~"$job"})`, false, true},
		{`sum by (job, status) (coordinator_open_checkpoints{job=~"$job"})`, false, true},
		{`sum(coordinator_last_committed_checkpoint{job=~"$job"}) by (job)`, false, true},
		{`sum without (instance) (coordinator_open_checkpoints{job=~"$job"})`, false, true},
		{`time() - sum by (job) (clamp_min(coordinator_oldest_open_checkpoint_timestamp_seconds{job=~"$job"}, 0))`, false, true},
		{`coordinator_open_checkpoints{job=~"$job"}`, false, true}, // one series per coordinator
		{`sum by (job) (rate(coordinator_votes_total{job=~"$job", result="fenced"}[$__rate_interval]))`, true, true},
		{`sum by (job) (rate(coordinator_votes_total[$__rate_interval]))`, true, false},             // all jobs, whatever $job
		{`sum by (job) (rate(coordinator_votes_total{job="$job"}[$__rate_interval]))`, true, false}, // = with a multi-select
		{`sum(rate(coordinator_http_requests_total{job=~"$job"}[5m]))`, true, false},                // matches nothing
		{`sum(rate(coordinator_http_requests_total{job="$scrape_job"}[5m]))`, true, true},
		{`up`, true, false},
		{`up{job="$scrape_job"}`, true, true},
	} {
		expr, err := expandVars(tc.expr)
		if err != nil {
			t.Fatalf("expandVars(%s): %v", tc.expr, err)
		}
		if err := checkExpr(expr); err != nil {
			t.Errorf("checkExpr(%s) = %v", expr, err)
		}
		if err := checkGaugeAggregation(expr); (err == nil) != tc.gaugeOK {
			t.Errorf("checkGaugeAggregation(%s) = %v, want ok %v", tc.expr, err, tc.gaugeOK)
		}
		if err := checkJobSelection(tc.expr); (err == nil) != tc.jobsOK {
			t.Errorf("checkJobSelection(%s) = %v, want ok %v", tc.expr, err, tc.jobsOK)
		}
	}
	if _, err := expandVars(`rate(coordinator_acks_total{job=~"$jobs"}[5m])`); err == nil {
		t.Error("expandVars accepted an unknown variable $jobs")
	}
	if got, err := expandVars(`rate(x{job=~"${job}", a="[[job]]"}[$__rate_interval])`); err != nil || got != `rate(x{job=~".+", a=".+"}[5m])` {
		t.Errorf("expandVars = %q, %v", got, err)
	}
	for _, name := range append(slices.Clone(dbGauges), instanceMetrics...) {
		if _, ok := contract[name]; !ok && !slices.Contains(otherMetrics, name) {
			t.Errorf("%s is not a metric of the contract", name)
		}
	}
}

var varRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// expandVars replaces the Grafana variables of a query ($v, ${v}, ${v:fmt}, [[v]]) with
// values of their shape (dashboardVars), so that the query can be checked as PromQL.
func expandVars(expr string) (string, error) {
	var errs []error
	out := varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := dashboardVars[name]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown variable %s", ref))
			return ref
		}
		return v
	})
	return out, errors.Join(errs...)
}

// checkGaugeAggregation checks that the innermost aggregation around every selector of a
// database gauge (dbGauges) is max: every coordinator reports the same value, so a sum would
// count it once per coordinator, and no aggregation would show one series per coordinator.
// An aggregation of that max (a sum over jobs of the max by job) is fine.
func checkGaugeAggregation(expr string) error {
	toks, err := tokenize(expr)
	if err != nil {
		return err
	}
	var errs []error
	for i, tk := range toks {
		if tk.kind != tokIdent || !slices.Contains(dbGauges, tk.text) || (i+1 < len(toks) && toks[i+1].text == "(") {
			continue
		}
		switch agg := enclosingAggregation(toks, i); agg {
		case "max":
		case "":
			errs = append(errs, fmt.Errorf("%s is not aggregated: take max by (job), every coordinator reports it", tk.text))
		default:
			errs = append(errs, fmt.Errorf("%s is aggregated with %s: take max by (job), every coordinator reports the same value", tk.text, agg))
		}
	}
	return errors.Join(errs...)
}

// enclosingAggregation returns the innermost aggregation operator whose argument holds
// toks[i], or "" for none. It looks through functions and parentheses.
func enclosingAggregation(toks []token, i int) string {
	isPunct := func(j int, s string) bool { return toks[j].kind == tokPunct && toks[j].text == s }
	isAgg := func(j int) bool {
		return j >= 0 && toks[j].kind == tokIdent && slices.Contains(aggregations, toks[j].text)
	}
	depth := 0
	for j := i - 1; j >= 0; j-- {
		switch {
		case isPunct(j, ")"):
			depth++
		case isPunct(j, "(") && depth > 0:
			depth--
		case isPunct(j, "("):
			// an enclosing parenthesis: agg(...), agg by (...) (...), a function's or a group's
			if isAgg(j - 1) {
				return toks[j-1].text
			}
			if j > 0 && isPunct(j-1, ")") {
				k := j - 1
				for d := 0; k >= 0; k-- {
					if isPunct(k, ")") {
						d++
					} else if isPunct(k, "(") {
						if d--; d == 0 {
							break
						}
					}
				}
				if k >= 2 && (toks[k-1].text == "by" || toks[k-1].text == "without") && isAgg(k-2) {
					return toks[k-2].text
				}
			}
		}
	}
	return ""
}

// checkJobSelection checks which job the selectors of a query (before expandVars) select:
// per-job metrics by the job variable, job=~"$job" (a multi-select, so =~), and the others
// (instanceMetrics) by the scrape job, job="$scrape_job", since with honor_labels: true
// they carry the scrape job's name and would match no coordinator job.
func checkJobSelection(expr string) error {
	toks, err := tokenize(expr)
	if err != nil {
		return err
	}
	var errs []error
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		if tk.kind != tokIdent || (i+1 < len(toks) && toks[i+1].text == "(") {
			continue
		}
		name, ok := metricOf(tk.text)
		if !ok {
			continue
		}
		var job []string
		if i+1 < len(toks) && toks[i+1].text == "{" {
			var ms []matcher
			ms, i, err = parseMatchers(toks, i+1)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, m := range ms {
				if m.label == "job" {
					job = append(job, m.label+m.op+`"`+m.value+`"`)
				}
			}
		}
		want := jobMatcher
		if slices.Contains(instanceMetrics, name) {
			want = scrapeMatcher
		}
		if !slices.Equal(job, []string{want}) {
			errs = append(errs, fmt.Errorf("%s is selected by %v, want {%s}", tk.text, job, want))
		}
	}
	return errors.Join(errs...)
}

// metricOf returns the contract metric (or other metric) a series name belongs to: the
// name itself, or a histogram's without its _bucket, _sum or _count.
func metricOf(name string) (string, bool) {
	if slices.Contains(otherMetrics, name) {
		return name, true
	}
	if _, ok := contract[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, found := strings.CutSuffix(name, suffix); found && contract[base].histogram {
			return base, true
		}
	}
	return "", false
}
