package metrics

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The per-job metrics (a handful of counters and two histograms for every job) are kept in
// compact series of their own rather than in client_golang's vectors: a client_golang
// histogram series holds two sets of buckets, its label pairs as protobuf messages and the
// state of native histograms, about 2 KiB, and a counter series a few hundred bytes, so a
// coordinator of 1,024 jobs held some 6 MiB of them, live all the time, which under a
// memory limit is headroom taken from the collector. Here a counter series is one word
// and a histogram series its bucket counts, sum and count; they are turned into
// client_golang's constant metrics only when scraped, with the same names, labels, help,
// buckets and values.

// counterSeries is one series of a compactCounterVec: an integer count.
type counterSeries struct{ n atomic.Uint64 }

// Inc adds one.
func (c *counterSeries) Inc() { c.n.Add(1) }

// Add adds n.
func (c *counterSeries) Add(n uint64) { c.n.Add(n) }

// histogramSeries is one series of a compactHistogramVec: as client_golang's histogram, an
// observation counts in the first bucket whose upper bound is at least its value (none:
// only in +Inf, the count).
type histogramSeries struct {
	mu     sync.Mutex
	bounds []float64 // the vector's, shared
	counts []uint64  // per bucket, not cumulative
	count  uint64
	sum    float64
}

// Observe counts v.
func (h *histogramSeries) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.mu.Lock()
	if i < len(h.counts) {
		h.counts[i]++
	}
	h.count++
	h.sum += v
	h.mu.Unlock()
}

// compactVec keeps the series of one metric by key: up to three label values, of which the
// first n are the metric's (the rest empty).
type compactVec[S any] struct {
	*seriesOf[[3]string, *S]
	desc *prometheus.Desc
	n    int
}

func newCompactVec[S any](desc *prometheus.Desc, n int, create func() *S) *compactVec[S] {
	return &compactVec[S]{seriesOf: newSeriesOf(func([3]string) *S { return create() }), desc: desc, n: n}
}

// Describe implements prometheus.Collector.
func (v *compactVec[S]) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// eachSeries calls fn with every series and its label values, under the read lock.
func (v *compactVec[S]) eachSeries(fn func(labels []string, s *S)) {
	v.each(func(k [3]string, s *S) { fn(k[:v.n], s) })
}

// compactCounterVec is a counter with labels, as prometheus.CounterVec shows it.
type compactCounterVec struct{ *compactVec[counterSeries] }

func newCompactCounterVec(opts prometheus.CounterOpts, labels []string) compactCounterVec {
	desc := prometheus.NewDesc(opts.Name, opts.Help, labels, nil)
	return compactCounterVec{newCompactVec(desc, len(labels), func() *counterSeries { return new(counterSeries) })}
}

// Collect implements prometheus.Collector.
func (v compactCounterVec) Collect(ch chan<- prometheus.Metric) {
	v.eachSeries(func(labels []string, s *counterSeries) {
		m, err := prometheus.NewConstMetric(v.desc, prometheus.CounterValue, float64(s.n.Load()), labels...)
		ch <- validMetric(v.desc, m, err)
	})
}

// compactHistogramVec is a histogram with labels, as prometheus.HistogramVec shows it.
type compactHistogramVec struct{ *compactVec[histogramSeries] }

func newCompactHistogramVec(opts prometheus.HistogramOpts, labels []string) compactHistogramVec {
	desc := prometheus.NewDesc(opts.Name, opts.Help, labels, nil)
	bounds := opts.Buckets
	if n := len(bounds); n > 0 && math.IsInf(bounds[n-1], +1) {
		bounds = bounds[:n-1] // +Inf is the count
	}
	return compactHistogramVec{newCompactVec(desc, len(labels), func() *histogramSeries {
		return &histogramSeries{bounds: bounds, counts: make([]uint64, len(bounds))}
	})}
}

// Collect implements prometheus.Collector.
func (v compactHistogramVec) Collect(ch chan<- prometheus.Metric) {
	v.eachSeries(func(labels []string, s *histogramSeries) {
		buckets := make(map[float64]uint64, len(s.bounds))
		s.mu.Lock()
		var cumulative uint64
		for i, b := range s.bounds {
			cumulative += s.counts[i]
			buckets[b] = cumulative
		}
		count, sum := s.count, s.sum
		s.mu.Unlock()
		m, err := prometheus.NewConstHistogram(v.desc, count, sum, buckets, labels...)
		ch <- validMetric(v.desc, m, err)
	})
}

// validMetric is m, or when making it failed, a metric of desc that fails the scrape's
// gathering with err (label values that are not valid UTF-8, which the API never lets
// into a job's name).
func validMetric(desc *prometheus.Desc, m prometheus.Metric, err error) prometheus.Metric {
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}
