// Package metrics is the coordinator's Prometheus instrumentation: the metrics of
// docs/protocol.md ("Metrics", names and labels included), on a registry of their own,
// with Go's runtime and the process's standard collectors. Counters and histograms count
// what this process did (it is the Service's coordinator.Observer, the API's request
// middleware and the store's commit hook); the gauges of open checkpoints, of the oldest
// open one and of the last committed one are facts of the database, read by one bounded
// query at most once a second (Store.Stats), so that every coordinator on a database
// reports the same values.
package metrics

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/twophase/coordinator/coordinator"
)

// Options configures New.
type Options struct {
	// Version and Store are the labels of coordinator_build_info.
	Version, Store string
	// NoJobLabel drops the job label from every metric, for fleets of very many jobs
	// (--metrics-job-label=false): each metric is then one series per the other labels.
	NoJobLabel bool
	// Stats reads the database's facts for the gauges; nil leaves them out.
	Stats func(ctx context.Context) (*coordinator.Stats, error)
	// StatsMaxAge is how long a read of Stats is reused; 0 means one second.
	StatsMaxAge time.Duration
	// Logger hears of failed Stats reads, at most once a minute.
	Logger *slog.Logger
}

// Metrics holds every metric of one coordinator process.
type Metrics struct {
	registry *prometheus.Registry
	jobLabel bool

	// The metrics with the job label (unless dropped), in compact series (jobseries.go),
	// found by key (Metrics.key) without hashing and checking the label values at every
	// update.
	opened, decided, votes, acks, registrations compactCounterVec
	decision, completion                        compactHistogramVec
	httpRequests                                *prometheus.CounterVec
	httpDuration                                *prometheus.HistogramVec
	storeCommit                                 prometheus.Histogram
	// The request counter and histogram of each route, method and status seen.
	requests  *seriesOf[requestKey, requestSeries]
	retention prometheus.Counter
	parked    prometheus.Counter
	load      load // load.go
}

var _ coordinator.Observer = (*Metrics)(nil)

// decisionBuckets span a checkpoint's life, from milliseconds (all votes at once) to its
// longest deadline, a day.
var decisionBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 86400}

// requestBuckets span a request, from a cached read to a long-poll of a minute.
var requestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// commitBuckets span a store commit: an fsync, a group of them, a slow disk.
var commitBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// New returns the metrics, registered.
func New(opts Options) *Metrics {
	m := &Metrics{registry: prometheus.NewRegistry(), jobLabel: !opts.NoJobLabel}
	job := func(labels ...string) []string {
		if m.jobLabel {
			return append([]string{"job"}, labels...)
		}
		return labels
	}
	m.opened = newCompactCounterVec(prometheus.CounterOpts{
		Name: "coordinator_checkpoints_opened_total", Help: "Checkpoints opened by this process.",
	}, job())
	m.decided = newCompactCounterVec(prometheus.CounterOpts{
		Name: "coordinator_checkpoints_decided_total", Help: "Checkpoints decided by this process, by decision and cause.",
	}, job("decision", "cause"))
	m.votes = newCompactCounterVec(prometheus.CounterOpts{
		Name: "coordinator_votes_total", Help: "Votes this process answered, by vote and result.",
	}, job("vote", "result"))
	m.acks = newCompactCounterVec(prometheus.CounterOpts{
		Name: "coordinator_acks_total", Help: "Acks this process answered, by result.",
	}, job("result"))
	m.registrations = newCompactCounterVec(prometheus.CounterOpts{
		Name: "coordinator_registrations_total", Help: "Participant registrations (new epochs) by this process.",
	}, job())
	m.decision = newCompactHistogramVec(prometheus.HistogramOpts{
		Name: "coordinator_checkpoint_decision_seconds", Help: "From a checkpoint's opening to its decision, by decision.",
		Buckets: decisionBuckets,
	}, job("decision"))
	m.completion = newCompactHistogramVec(prometheus.HistogramOpts{
		Name: "coordinator_checkpoint_completion_seconds", Help: "From a checkpoint's commit decision to its last ack.",
		Buckets: decisionBuckets,
	}, job())
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordinator_http_requests_total", Help: "HTTP requests answered, by route template, method and status code.",
	}, []string{"route", "method", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "coordinator_http_request_duration_seconds", Help: "HTTP request durations, by route template and method (long-polls included).",
		Buckets: requestBuckets,
	}, []string{"route", "method"})
	m.storeCommit = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "coordinator_store_commit_seconds", Help: "Store commits (a group commit is one), from its first statement to its commit.",
		Buckets: commitBuckets,
	})
	m.parked = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "coordinator_http_parked_requests_total",
		Help: "HTTP/1.1 long-polls this process parked (--park-after): set aside from the HTTP server until they answered.",
	})
	m.retention = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "coordinator_retention_deleted_checkpoints_total", Help: "Checkpoints this process deleted by retention.",
	})
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "coordinator_build_info", Help: "Always 1: the version of the build and the store it uses.",
		ConstLabels: prometheus.Labels{"version": opts.Version, "store": opts.Store},
	})
	build.Set(1)
	m.requests = newSeriesOf(func(k requestKey) requestSeries {
		return requestSeries{count: m.httpRequests.WithLabelValues(k.route, k.method, strconv.Itoa(k.status)),
			duration: m.httpDuration.WithLabelValues(k.route, k.method)}
	})
	m.registry.MustRegister(m.opened, m.decided, m.votes, m.acks, m.registrations, m.decision, m.completion,
		m.httpRequests, m.httpDuration, m.storeCommit, m.retention, m.parked, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.registerLoad()
	if opts.Stats != nil {
		age := opts.StatsMaxAge
		if age <= 0 {
			age = time.Second
		}
		logger := opts.Logger
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		m.registry.MustRegister(&statsCollector{read: opts.Stats, maxAge: age, jobLabel: m.jobLabel, logger: logger})
	}
	return m
}

// JobDeleted implements coordinator.JobDeletionObserver: the job's series of this process's
// counters and histograms are dropped, so that a deleted job leaves no series behind (the
// gauges read from the database lose it by themselves). A job created again under the name
// starts them from zero, as counters do after a restart.
func (m *Metrics) JobDeleted(job string) {
	if !m.jobLabel {
		return
	}
	gone := func(k [3]string) bool { return k[0] == job }
	for _, v := range []*seriesOf[[3]string, *counterSeries]{m.opened.seriesOf, m.decided.seriesOf, m.votes.seriesOf,
		m.acks.seriesOf, m.registrations.seriesOf} {
		v.drop(gone)
	}
	m.decision.drop(gone)
	m.completion.drop(gone)
}

var _ coordinator.JobDeletionObserver = (*Metrics)(nil)

// Changed implements coordinator.Observer: checkpoints opened, registrations, decisions and
// completions of one committed update.
func (m *Metrics) Changed(job string, now time.Time, mu *coordinator.Mutation) {
	if mu.Opened != nil {
		m.opened.get(m.key(job, "", "")).Inc()
	}
	if n := len(mu.Epochs); n > 0 {
		m.registrations.get(m.key(job, "", "")).Add(uint64(n))
	}
	seen := map[int64]bool{}
	for _, cp := range mu.Statuses {
		if seen[cp.ID] {
			continue
		}
		seen[cp.ID] = true
		// Decided in this update: its decision is timed now (a committed checkpoint that
		// was decided earlier only completes now).
		if cp.DecidedAt != nil && cp.DecidedAt.Equal(now) {
			decision := "abort"
			if cp.Status != coordinator.StatusAborted {
				decision = "commit"
			}
			m.decided.get(m.key(job, decision, string(cp.DecisionCause))).Inc()
			m.decision.get(m.key(job, decision, "")).Observe(cp.DecidedAt.Sub(cp.CreatedAt).Seconds())
		}
		if cp.Status == coordinator.StatusCommitted && cp.CompletedAt != nil && cp.DecidedAt != nil {
			m.completion.get(m.key(job, "", "")).Observe(cp.CompletedAt.Sub(*cp.DecidedAt).Seconds())
		}
	}
}

// Voted implements coordinator.Observer.
func (m *Metrics) Voted(job string, kind coordinator.VoteKind, result string) {
	m.votes.get(m.key(job, string(kind), result)).Inc()
}

// Acked implements coordinator.Observer.
func (m *Metrics) Acked(job string, result string) {
	m.acks.get(m.key(job, result, "")).Inc()
}

// StoreCommit observes one store commit's duration.
func (m *Metrics) StoreCommit(d time.Duration) { m.storeCommit.Observe(d.Seconds()) }

// RetentionDeleted counts checkpoints deleted by retention.
func (m *Metrics) RetentionDeleted(n int) { m.retention.Add(float64(n)) }

// Parked counts a long-poll set aside from the HTTP server (api.Options.Park).
func (m *Metrics) Parked() { m.parked.Inc() }

// Request observes one HTTP request: its route template ("" for no route), method and
// status. A method HTTP does not define is counted as "other": clients choose the method,
// and one series per made-up method would grow without bound.
func (m *Metrics) Request(route, method string, status int, d time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	if !knownMethods[method] {
		method = "other"
	}
	series := m.requests.get(requestKey{route: route, method: method, status: status})
	series.count.Inc()
	series.duration.Observe(d.Seconds())
}

// knownMethods are the methods of RFC 9110 and PATCH (RFC 5789), the method label's values
// besides "other".
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodConnect: true,
	http.MethodOptions: true, http.MethodTrace: true,
}

// requestKey names a request's series: its route template, method label and status.
type requestKey struct {
	route, method string
	status        int
}

// requestSeries are the request counter and duration histogram of one requestKey.
type requestSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// WriteText writes every metric in the Prometheus text format (version 0.0.4) and
// returns its content type. An error of a collector (the database's statistics) leaves
// its metrics out; the rest is written.
func (m *Metrics) WriteText(w io.Writer) (string, error) {
	families, gatherErr := m.registry.Gather()
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	enc := expfmt.NewEncoder(w, format)
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return string(format), err
		}
	}
	_ = gatherErr // logged by the collector that failed
	return string(format), nil
}

// ContentType is the content type WriteText writes.
func ContentType() string { return string(expfmt.NewFormat(expfmt.TypeTextPlain)) }

// statsCollector reports the database's facts, read at most once per maxAge.
type statsCollector struct {
	read     func(ctx context.Context) (*coordinator.Stats, error)
	maxAge   time.Duration
	jobLabel bool
	logger   *slog.Logger

	mu       sync.Mutex
	readAt   time.Time
	last     *coordinator.Stats
	warnedAt time.Time
}

var (
	openDesc = func(job bool) *prometheus.Desc {
		return prometheus.NewDesc("coordinator_open_checkpoints",
			"Checkpoints open in the database, by status (every coordinator on it reports the same).", jobLabels(job, "status"), nil)
	}
	oldestDesc = func(job bool) *prometheus.Desc {
		return prometheus.NewDesc("coordinator_oldest_open_checkpoint_timestamp_seconds",
			"When the oldest open checkpoint of the status opened, in Unix seconds; absent when none is open.", jobLabels(job, "status"), nil)
	}
	lastCommittedDesc = func(job bool) *prometheus.Desc {
		return prometheus.NewDesc("coordinator_last_committed_checkpoint",
			"The id of the job's last checkpoint decided commit.", jobLabels(job), nil)
	}
)

func jobLabels(job bool, rest ...string) []string {
	if job {
		return append([]string{"job"}, rest...)
	}
	return rest
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- openDesc(c.jobLabel)
	ch <- oldestDesc(c.jobLabel)
	ch <- lastCommittedDesc(c.jobLabel)
}

// statsTimeout bounds a read of the statistics, so that a scrape answers in time when
// the database does not.
const statsTimeout = 2 * time.Second

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	if st == nil {
		return
	}
	open, oldest, last := openDesc(c.jobLabel), oldestDesc(c.jobLabel), lastCommittedDesc(c.jobLabel)
	if !c.jobLabel {
		// One series per status: counts add up, the oldest is the oldest of all, and the
		// last committed is not a fact of any one job (it is left out).
		counts := map[coordinator.Status]int64{}
		oldests := map[coordinator.Status]time.Time{}
		for _, o := range st.Open {
			counts[o.Status] += o.Count
			if t, ok := oldests[o.Status]; !ok || o.Oldest.Before(t) {
				oldests[o.Status] = o.Oldest
			}
		}
		for _, status := range []coordinator.Status{coordinator.StatusPreparing, coordinator.StatusCommitting} {
			ch <- prometheus.MustNewConstMetric(open, prometheus.GaugeValue, float64(counts[status]), string(status))
			if t, ok := oldests[status]; ok {
				ch <- prometheus.MustNewConstMetric(oldest, prometheus.GaugeValue, seconds(t), string(status))
			}
		}
		return
	}
	for _, o := range st.Open {
		ch <- prometheus.MustNewConstMetric(open, prometheus.GaugeValue, float64(o.Count), o.Job, string(o.Status))
		ch <- prometheus.MustNewConstMetric(oldest, prometheus.GaugeValue, seconds(o.Oldest), o.Job, string(o.Status))
	}
	for job, id := range st.LastCommitted {
		ch <- prometheus.MustNewConstMetric(last, prometheus.GaugeValue, float64(id), job)
	}
}

func seconds(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

// stats returns the statistics, read again when the last read is older than maxAge; nil
// when they cannot be read (the failure is logged, at most once a minute).
func (c *statsCollector) stats() *coordinator.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && time.Since(c.readAt) < c.maxAge {
		return c.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	st, err := c.read(ctx)
	if err != nil {
		if time.Since(c.warnedAt) > time.Minute {
			c.warnedAt = time.Now()
			c.logger.Warn("metrics: the database's statistics cannot be read; the gauges of open and committed checkpoints are left out", "error", err)
		}
		return nil
	}
	c.last, c.readAt = st, time.Now()
	return st
}

// key is the key of job's series with the other label values a and b ("" where the
// vector has fewer): the label values in order, the job's first unless it is dropped.
func (m *Metrics) key(job, a, b string) [3]string {
	if m.jobLabel {
		return [3]string{job, a, b}
	}
	return [3]string{a, b, ""}
}

// seriesOf keeps series by their key, each made by create the first time it is asked for
// (once: two callers asking at once get the same): the hot paths find their series without
// client_golang hashing and checking the label values at every call.
type seriesOf[K comparable, M any] struct {
	create func(K) M
	mu     sync.RWMutex
	m      map[K]M
}

func newSeriesOf[K comparable, M any](create func(K) M) *seriesOf[K, M] {
	return &seriesOf[K, M]{create: create, m: map[K]M{}}
}

func (s *seriesOf[K, M]) get(k K) M {
	s.mu.RLock()
	v, ok := s.m[k]
	s.mu.RUnlock()
	if ok {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok = s.m[k]; !ok {
		v = s.create(k)
		s.m[k] = v
	}
	return v
}

// drop deletes the series whose key gone reports.
func (s *seriesOf[K, M]) drop(gone func(K) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.m {
		if gone(k) {
			delete(s.m, k)
		}
	}
}

// each calls fn with every series and its key, under the read lock.
func (s *seriesOf[K, M]) each(fn func(k K, v M)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, v := range s.m {
		fn(k, v)
	}
}
