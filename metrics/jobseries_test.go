package metrics

import (
	"bytes"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// exposition is what registry c alone shows, in the text format.
func exposition(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

// TestCompactSeriesShowWhatClientGolangShows: the compact counters and histograms show the
// same text as client_golang's vectors given the same updates, observations on a bucket's
// bound, between bounds, past the last and below the first included.
func TestCompactSeriesShowWhatClientGolangShows(t *testing.T) {
	labels := []string{"job", "decision"}
	hopts := prometheus.HistogramOpts{Name: "x_seconds", Help: "X.", Buckets: decisionBuckets}
	ref, compact := prometheus.NewHistogramVec(hopts, labels), newCompactHistogramVec(hopts, labels)
	observations := map[[2]string][]float64{
		{"orders", "commit"}:   {0, 0.001, 0.0011, 0.0025, 0.3, 1, 86400, 86401, 1e9},
		{"orders", "abort"}:    {-1, 5},
		{"payments", "commit"}: {0.05, 0.05, 0.05, 30},
	}
	for k, vs := range observations {
		for _, v := range vs {
			ref.WithLabelValues(k[0], k[1]).Observe(v)
			compact.get([3]string{k[0], k[1], ""}).Observe(v)
		}
	}
	if want, got := exposition(t, ref), exposition(t, compact); got != want {
		t.Errorf("the compact histogram shows\n%s\nclient_golang's\n%s", got, want)
	}

	copts := prometheus.CounterOpts{Name: "x_total", Help: "X."}
	refC, compactC := prometheus.NewCounterVec(copts, []string{"job"}), newCompactCounterVec(copts, []string{"job"})
	for job, n := range map[string]uint64{"orders": 3, "payments": 1, "empty": 0} {
		refC.WithLabelValues(job).Add(float64(n))
		compactC.get([3]string{job, "", ""}).Add(n)
	}
	refC.WithLabelValues("orders").Inc()
	compactC.get([3]string{"orders", "", ""}).Inc()
	if want, got := exposition(t, refC), exposition(t, compactC); got != want {
		t.Errorf("the compact counter shows\n%s\nclient_golang's\n%s", got, want)
	}
}

// TestCompactSeriesMadeOnce: the updates of goroutines asking at once for a series that
// does not exist yet all count, round after round of new series.
func TestCompactSeriesMadeOnce(t *testing.T) {
	v := newCompactCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "X."}, []string{"job"})
	const goroutines, rounds = 8, 20000
	arrived := make([]sync.WaitGroup, rounds)
	starts := make([]chan struct{}, rounds)
	for i := range rounds {
		arrived[i].Add(goroutines)
		starts[i] = make(chan struct{})
	}
	key := func(i int) [3]string { return [3]string{strconv.Itoa(i), "", ""} }
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := range rounds {
				arrived[i].Done()
				<-starts[i]
				v.get(key(i)).Inc()
			}
		})
	}
	for i := range rounds {
		arrived[i].Wait() // every goroutine is about to ask for the new series at once
		close(starts[i])
	}
	wg.Wait()
	for i := range rounds {
		if got := v.get(key(i)).n.Load(); got != goroutines {
			t.Fatalf("series %d counted %d of the %d goroutines' updates", i, got, goroutines)
		}
	}
}
