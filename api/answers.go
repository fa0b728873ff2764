package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/metrics"
)

// What answers in flight may hold. An answer is built whole in memory and held until its
// client has read it: a page of checkpoints carries their committables, a single
// checkpoint up to the per-checkpoint bound (--max-checkpoint-bytes). Three bounds keep
// clients that ask and do not read from growing the process without end:
//
//   - a page of checkpoints ends once its encoding reaches MaxPageBytes (it holds at least
//     one checkpoint, however large), and its next_cursor continues from there;
//   - the large answers (LargeAnswerBytes or more) held at once are counted against
//     Options.MaxAnswerBytes: past it, a read that may be refused (a page of checkpoints,
//     a single checkpoint) answers 503 unavailable with Retry-After, before its checkpoints
//     are read for a page; the answers of changes (votes, acks, decisions) and of a
//     participant's pending are counted but never refused, since the change is made, or the
//     participant must be served;
//   - a large answer must be read within Options.LargeAnswerWriteTimeout of when its writing
//     starts: past it, the connection is closed, and what the answer held is let go.

// MaxPageBytes bounds the encoding of a page of checkpoints (GET /v1/checkpoints, GET
// /v1/jobs/{job}/checkpoints): the page ends with the checkpoint that reaches it.
const MaxPageBytes = 1 << 20

// LargeAnswerBytes is the size from which an answer counts against
// Options.MaxAnswerBytes and is written with Options.LargeAnswerWriteTimeout. Smaller ones fit in
// the connection's buffers.
const LargeAnswerBytes = 64 << 10

// DefaultLargeAnswerWriteTimeout bounds the writing of a large answer when
// Options.LargeAnswerWriteTimeout is 0: a client that does not read it within that time is
// cut off.
const DefaultLargeAnswerWriteTimeout = 30 * time.Second

// DefaultMaxAnswerBytes is Options.MaxAnswerBytes's default in the coordinator command: a
// hundred pages of checkpoints, or eight checkpoints at the default per-checkpoint bound.
const DefaultMaxAnswerBytes = 128 << 20

// answerBudget counts the bytes large answers in flight hold, against max (0: no bound).
type answerBudget struct {
	max          int64
	writeTimeout time.Duration
	held         atomic.Int64
	metrics      *metrics.Metrics // nil: not counted
}

func newAnswerBudget(max int64, writeTimeout time.Duration, m *metrics.Metrics) *answerBudget {
	if writeTimeout <= 0 {
		writeTimeout = DefaultLargeAnswerWriteTimeout
	}
	b := &answerBudget{max: max, writeTimeout: writeTimeout, metrics: m}
	if m != nil {
		m.AnswerBytesInFlight(func() float64 { return float64(b.held.Load()) })
	}
	return b
}

// acquire counts n more bytes, unless that would pass the bound and force is false.
func (b *answerBudget) acquire(n int64, force bool) bool {
	if force || b.max <= 0 {
		b.held.Add(n)
		return true
	}
	for {
		held := b.held.Load()
		if held+n > b.max {
			return false
		}
		if b.held.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

func (b *answerBudget) release(n int64) { b.held.Add(-n) }

// refusal is the refusal of a read while large answers in flight hold the bound.
func (b *answerBudget) refusal() error {
	if b.metrics != nil {
		b.metrics.Shed("answer_bytes")
	}
	return &requestError{code: codeUnavailable, detail: fmt.Sprintf(
		"answers in flight hold as much memory as this coordinator allows them (%d bytes, --max-answer-bytes), "+
			"most of them not yet read by their clients; retry after the Retry-After seconds", b.max)}
}

// hold makes w's request hold n bytes of the budget in all (more, or fewer, than it held),
// until it returns; shed says the request may be refused past the bound. An answer of
// LargeAnswerBytes or more gets its write deadline.
func (w *answerWriter) hold(n int64, shed bool) error {
	if w.budget == nil {
		return nil
	}
	switch d := n - w.held; {
	case d < 0:
		w.budget.release(-d)
	case d > 0:
		if !w.budget.acquire(d, !shed) {
			return w.budget.refusal()
		}
	}
	w.held = n
	return nil
}

// releaseHold gives back what the request held: its answer is written, or its client cut off.
func (w *answerWriter) releaseHold() {
	if w.held != 0 {
		w.budget.release(w.held)
		w.held = 0
	}
}

// holdAnswer is called before a large answer of n bytes is written on w: it counts it
// against the budget (refusing it past the bound when shed) and sets its write deadline.
func holdAnswer(w http.ResponseWriter, n int, shed bool) error {
	if n < LargeAnswerBytes {
		return nil
	}
	aw := answerWriterOf(w)
	if aw == nil || aw.budget == nil {
		return nil // a parked request's answer, written with its own deadline
	}
	if err := aw.hold(int64(n), shed); err != nil {
		return err
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(aw.budget.writeTimeout))
	return nil
}

// reserveAnswer counts n bytes against the budget for w's request before its answer is
// built (a page of checkpoints, before they are read), refusing past the bound.
func reserveAnswer(w http.ResponseWriter, n int) error {
	if aw := answerWriterOf(w); aw != nil {
		return aw.hold(int64(n), true)
	}
	return nil
}

// checkpointPage is the answer of a list of checkpoints: the page is read from the store
// once the answer's bytes are reserved, and ends at MaxPageBytes.
type checkpointPage struct {
	s     *server
	ctx   context.Context
	q     coordinator.CheckpointQuery
	limit int
	// cursor makes the next page's cursor from the page's last checkpoint.
	cursor func(cp *coordinator.Checkpoint) string
}

// firstBatch is how many checkpoints a page reads first; the next reads are sized by what
// those weighed, so that a page of small checkpoints takes two reads at most, and one of
// large ones reads few more than it holds.
const firstBatch = 16

func (p checkpointPage) VisitListCheckpointsResponse(w http.ResponseWriter) error { return p.visit(w) }
func (p checkpointPage) VisitListOpenCheckpointsResponse(w http.ResponseWriter) error {
	return p.visit(w)
}

func (p checkpointPage) visit(w http.ResponseWriter) error {
	if err := reserveAnswer(w, MaxPageBytes); err != nil {
		return err
	}
	ctx := p.ctx
	buf := encodeBuffers.Get().(*bytes.Buffer)
	defer putEncodeBuffer(buf)
	buf.Reset()
	b := append(buf.AvailableBuffer(), `{"items":[`...)
	start := len(b)
	q := p.q
	n, more := 0, true
	var last *coordinator.Checkpoint
	for more && n < p.limit && len(b)-start < MaxPageBytes {
		batch := firstBatch
		if n > 0 {
			// As many as the rest of the budget holds at the weight of those read, and one.
			avg := max((len(b)-start)/n, 1)
			batch = (MaxPageBytes-(len(b)-start))/avg + 1
		}
		q.Limit = min(batch, p.limit-n)
		cps, m, err := p.s.svc.ListCheckpoints(ctx, q)
		if err != nil {
			return err
		}
		more = m
		for i, cp := range cps {
			if n > 0 {
				b = append(b, ',')
			}
			if b, err = appendCheckpoint(b, cp, false, "", false); err != nil {
				return err
			}
			n++
			last = cp
			if len(b)-start >= MaxPageBytes {
				more = more || i < len(cps)-1
				break
			}
		}
		if last != nil {
			q.After = p.position(last)
		}
	}
	b = append(b, ']')
	if more && last != nil {
		b = append(b, `,"next_cursor":`...)
		b = appendString(b, p.cursor(last))
	}
	b = append(b, "}\n"...)
	if err := holdAnswer(w, len(b), true); err != nil {
		return err
	}
	if len(b) < LargeAnswerBytes {
		if aw := answerWriterOf(w); aw != nil {
			aw.releaseHold() // a small page is not counted
		}
	}
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(b)
	return err
}

// position is where the next read of the page continues after cp.
func (p checkpointPage) position(cp *coordinator.Checkpoint) int64 {
	if p.q.Job != "" {
		return cp.ID // newest first within a job
	}
	return cp.Seq // oldest first across jobs
}

// cursorOf is the next page's cursor after cp in a list of kind.
func cursorOf(kind string, job bool) func(cp *coordinator.Checkpoint) string {
	return func(cp *coordinator.Checkpoint) string {
		if job {
			return encodeCursor(kind, strconv.FormatInt(cp.ID, 10))
		}
		return encodeCursor(kind, strconv.FormatInt(cp.Seq, 10))
	}
}
