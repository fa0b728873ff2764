package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The load the API sheds: requests refused with 503 to keep what one caller can take from
// everyone bounded (the memory answers in flight hold, the long-poll slots), and the gauges
// of what is held against those bounds.

// ShedReasons are the values of coordinator_http_shed_requests_total's reason label.
var ShedReasons = []string{"answer_bytes", "waiters", "waiters_read_share", "waiters_token_share"}

// load holds the metrics of shed load; the gauges read what the API registers with
// AnswerBytesInFlight and WaitersHeld.
type load struct {
	shed        *prometheus.CounterVec
	answerBytes atomic.Pointer[func() float64]
	waiters     atomic.Pointer[func(participant bool) float64]
}

func (m *Metrics) registerLoad() {
	m.load.shed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordinator_http_shed_requests_total",
		Help: "Requests refused with 503 to bound what one caller can take: answer_bytes (large answers in flight hold " +
			"--max-answer-bytes), waiters (--max-waiters long-polls are held), waiters_read_share (the part of the pool " +
			"reads may hold is held), waiters_token_share (the token, or the participant, holds its share).",
	}, []string{"reason"})
	for _, r := range ShedReasons {
		m.load.shed.WithLabelValues(r)
	}
	answerBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "coordinator_http_answer_bytes_in_flight",
		Help: "Bytes held by large answers (64 KiB or more) being built or written, counted against --max-answer-bytes.",
	}, func() float64 {
		if f := m.load.answerBytes.Load(); f != nil {
			return (*f)()
		}
		return 0
	})
	waiters := func(participant bool, class string) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "coordinator_http_waiters",
			Help:        "Long-polls held against --max-waiters, by class: participant (a participant's own pending or vote), read (any other).",
			ConstLabels: prometheus.Labels{"class": class},
		}, func() float64 {
			if f := m.load.waiters.Load(); f != nil {
				return (*f)(participant)
			}
			return 0
		})
	}
	m.registry.MustRegister(m.load.shed, answerBytes, waiters(true, "participant"), waiters(false, "read"))
}

// Shed counts a request refused with 503 for reason, one of ShedReasons.
func (m *Metrics) Shed(reason string) { m.load.shed.WithLabelValues(reason).Inc() }

// AnswerBytesInFlight sets what coordinator_http_answer_bytes_in_flight reads.
func (m *Metrics) AnswerBytesInFlight(fn func() float64) { m.load.answerBytes.Store(&fn) }

// WaitersHeld sets what coordinator_http_waiters reads, by class.
func (m *Metrics) WaitersHeld(fn func(participant bool) float64) { m.load.waiters.Store(&fn) }
