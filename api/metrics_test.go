package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/metrics"
	"github.com/twophase/coordinator/store/pgtest"
	"github.com/twophase/coordinator/store/postgres"
)

// coordinatorWithMetrics serves the API with metrics on the PostgreSQL database of url.
func coordinatorWithMetrics(t *testing.T, url string, noJobLabel bool) *authBundle {
	t.Helper()
	var store coordinator.Store
	m := metrics.New(metrics.Options{Version: "test", Store: "postgres", NoJobLabel: noJobLabel,
		Stats: func(ctx context.Context) (*coordinator.Stats, error) { return store.Stats(ctx, !noJobLabel) }})
	store, err := postgres.Open(context.Background(), url, postgres.Options{ObserveCommit: m.StoreCommit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	svc := coordinator.NewService(store, nil, coordinator.WithObserver(m))
	srv := httptest.NewServer(NewHandler(svc, Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute, Metrics: m}))
	t.Cleanup(srv.Close)
	return &authBundle{url: srv.URL, store: store, svc: svc, secrets: map[string]string{}}
}

// scrape reads /metrics into its families, by name.
func scrape(t *testing.T, b *authBundle) map[string]*dto.MetricFamily {
	t.Helper()
	r := b.send(t, "", "GET", "/metrics", "")
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", r.status, r.header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(r.body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, r.body)
	}
	return families
}

// value is the value of the series of name whose labels include want (a counter's or a
// gauge's value, a histogram's count); -1 if there is none.
func value(families map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := families[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// After a scripted sequence of requests, every counter, histogram count and gauge says what
// happened; a second coordinator on the database reports the same gauges and none of the
// first one's counters.
func TestMetricsSayWhatHappened(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	a, other := coordinatorWithMetrics(t, url, false), coordinatorWithMetrics(t, url, false)
	step := func(method, path, body string, status int) {
		t.Helper()
		if r := a.send(t, "", method, path, body); r.status != status {
			t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.body, status)
		}
	}
	j := "/v1/jobs/orders"
	step("PUT", j, `{"participants":["a","b"]}`, 201)
	step("POST", j+"/participants/a/register", "", 200)
	step("POST", j+"/participants/b/register", "", 200)
	// 1: committed by its votes, one vote and one ack repeated.
	step("POST", j+"/checkpoints", "", 201)
	step("PUT", j+"/checkpoints/1/votes/a", `{"epoch":1,"vote":"prepared"}`, 200)
	step("PUT", j+"/checkpoints/1/votes/a", `{"epoch":1,"vote":"prepared"}`, 200)
	step("PUT", j+"/checkpoints/1/votes/b", `{"epoch":1,"vote":"prepared"}`, 200)
	step("PUT", j+"/checkpoints/1/acks/a", `{"epoch":1}`, 200)
	step("PUT", j+"/checkpoints/1/acks/a", `{"epoch":1}`, 200)
	step("PUT", j+"/checkpoints/1/acks/b", `{"epoch":1}`, 200)
	// 2: aborted by a vote; the other vote comes late.
	step("POST", j+"/checkpoints", "", 201)
	step("PUT", j+"/checkpoints/2/votes/a", `{"epoch":1,"vote":"abort","reason":"x"}`, 200)
	step("PUT", j+"/checkpoints/2/votes/b", `{"epoch":1,"vote":"prepared"}`, 409)
	// 3: aborted by a registration; the old epoch's vote is fenced.
	step("POST", j+"/checkpoints", "", 201)
	step("POST", j+"/participants/a/register", "", 200)
	step("PUT", j+"/checkpoints/3/votes/a", `{"epoch":1,"vote":"prepared"}`, 409)
	// 4: a vote, then a conflicting one; it stays preparing.
	step("POST", j+"/checkpoints", "", 201)
	step("PUT", j+"/checkpoints/4/votes/a", `{"epoch":2,"vote":"prepared"}`, 200)
	step("PUT", j+"/checkpoints/4/votes/a", `{"epoch":2,"vote":"abort"}`, 409)
	opened4, err := a.store.GetCheckpoint(ctx, "orders", 4)
	if err != nil {
		t.Fatal(err)
	}

	f := scrape(t, a)
	job := map[string]string{"job": "orders"}
	with := func(kv ...string) map[string]string {
		out := map[string]string{"job": "orders"}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"coordinator_checkpoints_opened_total", job, 4},
		{"coordinator_registrations_total", job, 3},
		{"coordinator_checkpoints_decided_total", with("decision", "commit", "cause", "all_prepared"), 1},
		{"coordinator_checkpoints_decided_total", with("decision", "abort", "cause", "abort_vote"), 1},
		{"coordinator_checkpoints_decided_total", with("decision", "abort", "cause", "registration"), 1},
		{"coordinator_checkpoints_decided_total", with("decision", "abort", "cause", "deadline"), -1},
		{"coordinator_votes_total", with("vote", "prepared", "result", "accepted"), 3},
		{"coordinator_votes_total", with("vote", "prepared", "result", "duplicate"), 1},
		{"coordinator_votes_total", with("vote", "prepared", "result", "late"), 1},
		{"coordinator_votes_total", with("vote", "prepared", "result", "fenced"), 1},
		{"coordinator_votes_total", with("vote", "abort", "result", "accepted"), 1},
		{"coordinator_votes_total", with("vote", "abort", "result", "conflict"), 1},
		{"coordinator_acks_total", with("result", "accepted"), 2},
		{"coordinator_acks_total", with("result", "duplicate"), 1},
		{"coordinator_checkpoint_decision_seconds", with("decision", "commit"), 1},
		{"coordinator_checkpoint_decision_seconds", with("decision", "abort"), 2},
		{"coordinator_checkpoint_completion_seconds", job, 1},
		{"coordinator_open_checkpoints", with("status", "preparing"), 1},
		{"coordinator_oldest_open_checkpoint_timestamp_seconds", with("status", "preparing"), float64(opened4.CreatedAt.UnixMicro()) / 1e6},
		{"coordinator_oldest_open_checkpoint_timestamp_seconds", with("status", "committing"), -1},
		{"coordinator_last_committed_checkpoint", job, 1},
		{"coordinator_http_requests_total", map[string]string{"route": "/v1/jobs/{job}/checkpoints/{id}/votes/{participant}", "method": "PUT", "code": "409"}, 3},
		{"coordinator_http_request_duration_seconds", map[string]string{"route": "/v1/jobs/{job}/checkpoints", "method": "POST"}, 4},
		{"coordinator_build_info", map[string]string{"version": "test", "store": "postgres"}, 1},
	} {
		if got := value(f, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if f["coordinator_store_commit_seconds"] == nil || value(f, "coordinator_store_commit_seconds", nil) < 10 {
		t.Errorf("coordinator_store_commit_seconds counts %v commits, want one per update at least", value(f, "coordinator_store_commit_seconds", nil))
	}
	if f["go_goroutines"] == nil || f["process_resident_memory_bytes"] == nil {
		t.Error("the Go runtime's and the process's metrics are missing")
	}
	// No label takes an id, an epoch or a path.
	for name, fam := range f {
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if strings.Contains(l.GetValue(), "/checkpoints/") && !strings.Contains(l.GetValue(), "{id}") {
					t.Errorf("%s has a label %s=%q: a path, not a template", name, l.GetName(), l.GetValue())
				}
			}
		}
	}

	// The other coordinator: the same gauges, none of the counters.
	g := scrape(t, other)
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"coordinator_open_checkpoints", with("status", "preparing")},
		{"coordinator_oldest_open_checkpoint_timestamp_seconds", with("status", "preparing")},
		{"coordinator_last_committed_checkpoint", job},
	} {
		if got, want := value(g, c.name, c.labels), value(f, c.name, c.labels); got != want {
			t.Errorf("the other coordinator's %s%v = %v, the first's %v", c.name, c.labels, got, want)
		}
	}
	if got := value(g, "coordinator_checkpoints_opened_total", job); got != -1 {
		t.Errorf("the other coordinator counts %v checkpoints opened, which it did not open", got)
	}
}

// Without the job label, no series has one.
func TestMetricsWithoutJobLabel(t *testing.T) {
	t.Parallel()
	b := coordinatorWithMetrics(t, pgtest.URL(t), true)
	for _, job := range []string{"j1", "j2"} {
		b.send(t, "", "PUT", "/v1/jobs/"+job, `{"participants":["a"]}`)
		b.send(t, "", "POST", "/v1/jobs/"+job+"/checkpoints", "")
	}
	f := scrape(t, b)
	for name, fam := range f {
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if l.GetName() == "job" {
					t.Fatalf("%s has the job label (%s)", name, l.GetValue())
				}
			}
		}
	}
	if got := value(f, "coordinator_checkpoints_opened_total", nil); got != 2 {
		t.Errorf("checkpoints opened = %v, want 2", got)
	}
	if got := value(f, "coordinator_open_checkpoints", map[string]string{"status": "preparing"}); got != 2 {
		t.Errorf("open preparing = %v, want 2 (of both jobs)", got)
	}
	if got := value(f, "coordinator_open_checkpoints", map[string]string{"status": "committing"}); got != 0 {
		t.Errorf("open committing = %v, want 0", got)
	}
}

// A method HTTP does not define is counted as "other": whatever methods clients make up,
// the request series stay as many as the routes, methods and statuses the API has.
func TestMetricsMadeUpMethodsAreOther(t *testing.T) {
	t.Parallel()
	b := coordinatorWithMetrics(t, pgtest.URL(t), false)
	for _, method := range []string{"FOO1", "FOO2", "BREW"} {
		if r := b.send(t, "", method, "/v1/jobs", ""); r.status != http.StatusMethodNotAllowed {
			t.Fatalf("%s /v1/jobs: %d, want 405", method, r.status)
		}
	}
	b.send(t, "", "GET", "/v1/jobs", "")
	f := scrape(t, b)
	other := map[string]string{"route": "unmatched", "method": "other", "code": "405"}
	if got := value(f, "coordinator_http_requests_total", other); got != 3 {
		t.Errorf("requests %v = %v, want 3", other, got)
	}
	if got := value(f, "coordinator_http_request_duration_seconds", map[string]string{"route": "unmatched", "method": "other"}); got != 3 {
		t.Errorf("durations of method other = %v, want 3", got)
	}
	if got := value(f, "coordinator_http_requests_total", map[string]string{"route": "/v1/jobs", "method": "GET", "code": "200"}); got != 1 {
		t.Errorf("GET /v1/jobs counted %v times, want 1", got)
	}
	for _, name := range []string{"coordinator_http_requests_total", "coordinator_http_request_duration_seconds"} {
		for _, m := range f[name].Metric {
			for _, l := range m.Label {
				if l.GetName() == "method" && strings.HasPrefix(l.GetValue(), "FOO") || l.GetValue() == "BREW" {
					t.Errorf("%s has a series of the made-up method %s", name, l.GetValue())
				}
			}
		}
	}
}

// A deleted job leaves no series: its counters and histograms go with it at once, and the
// gauges read from the database within a second. Another job's stay.
func TestMetricsOfADeletedJobGo(t *testing.T) {
	t.Parallel()
	b := coordinatorWithMetrics(t, pgtest.URL(t), false)
	for _, job := range []string{"gone", "kept"} {
		b.send(t, "", "PUT", "/v1/jobs/"+job, `{"participants":["a"]}`)
		b.send(t, "", "POST", "/v1/jobs/"+job+"/participants/a/register", "")
		b.send(t, "", "POST", "/v1/jobs/"+job+"/checkpoints", "")
		b.send(t, "", "PUT", "/v1/jobs/"+job+"/checkpoints/1/votes/a", `{"epoch":1,"vote":"prepared"}`)
		b.send(t, "", "PUT", "/v1/jobs/"+job+"/checkpoints/1/acks/a", `{"epoch":1}`)
	}
	seriesOf := func(f map[string]*dto.MetricFamily, job string) []string {
		var names []string
		for name, fam := range f {
			for _, m := range fam.Metric {
				for _, l := range m.Label {
					if l.GetName() == "job" && l.GetValue() == job {
						names = append(names, name)
					}
				}
			}
		}
		return names
	}
	if got := seriesOf(scrape(t, b), "gone"); len(got) < 8 {
		t.Fatalf("before the deletion, job gone has series of %v; want its counters, histograms and gauges", got)
	}
	if r := b.send(t, "", "DELETE", "/v1/jobs/gone", ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	time.Sleep(1100 * time.Millisecond) // the gauges are read from the database at most once a second
	f := scrape(t, b)
	if got := seriesOf(f, "gone"); len(got) != 0 {
		t.Errorf("after the deletion, job gone still has series of %v", got)
	}
	if got := value(f, "coordinator_checkpoints_opened_total", map[string]string{"job": "kept"}); got != 1 {
		t.Errorf("job kept: checkpoints opened %v, want 1", got)
	}
}

// A scraper that asks for gzip gets the metrics compressed; one that does not, plain.
func TestMetricsCompressed(t *testing.T) {
	t.Parallel()
	b := coordinatorWithMetrics(t, pgtest.URL(t), false)
	b.send(t, "", "PUT", "/v1/jobs/j", `{"participants":["a"]}`)
	// A transport that leaves Accept-Encoding and the body as they are.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	get := func(acceptEncoding string) (*http.Response, []byte) {
		req, err := http.NewRequest("GET", b.url+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	plainResp, plain := get("")
	if plainResp.Header.Get("Content-Encoding") != "" || !bytes.Contains(plain, []byte("coordinator_build_info")) {
		t.Fatalf("without Accept-Encoding: Content-Encoding %q, %d bytes", plainResp.Header.Get("Content-Encoding"), len(plain))
	}
	for _, ae := range []string{"gzip", "deflate, gzip;q=0.8", "identity, *"} {
		resp, body := get(ae)
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("Accept-Encoding %q: Content-Encoding %q", ae, resp.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("Accept-Encoding %q: %v", ae, err)
		}
		text, err := io.ReadAll(zr)
		if err != nil || !bytes.Contains(text, []byte("coordinator_build_info")) || len(body) >= len(text)/3 {
			t.Fatalf("Accept-Encoding %q: %d bytes compressed, %d plain (%v); want a third or less", ae, len(body), len(text), err)
		}
	}
	for _, ae := range []string{"gzip;q=0", "br", "identity"} {
		if resp, _ := get(ae); resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want none", ae, resp.Header.Get("Content-Encoding"))
		}
	}
}
