// Package writehealth remembers, for a store's readiness, the last write that failed for
// want of storage (a full disk, a read-only database), so that Ready can report a store
// that cannot write without writing itself.
//
// Ready does not write to find out (a write on every readiness check of every coordinator
// would cost a commit each time, and a tiny write may pass where a vote with its
// committables does not); it remembers what the writes met. It forgets a failure Hold after
// the last one, rather than at the next success, which may be a write that changed nothing
// (an idempotent repeat) and proves nothing: long enough for readiness probes to see the
// failure (Kubernetes' defaults need 3 failed probes 10 s apart), short enough that a store
// is ready again within half a minute of its storage being fixed, by itself, with no
// traffic and no restart. While writes keep failing, each one renews it.
package writehealth

import (
	"fmt"
	"sync"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// Hold is how long Check reports the last storage failure.
const Hold = 30 * time.Second

// Record remembers the last write that failed for want of storage. Set Classify before use.
type Record struct {
	// Classify is the store's: whether err is a storage failure, and what it was in words
	// (no statement, no value, no path: the words reach /readyz).
	Classify func(err error) (what string, ok bool)
	// Now is the clock; nil means time.Now. Tests move it.
	Now func() time.Time

	mu     sync.Mutex
	what   string
	cause  error
	failed time.Time
}

// Note records err, the outcome of a write, if it is a storage failure.
func (h *Record) Note(err error) {
	what, ok := h.Classify(err)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.what, h.cause, h.failed = what, err, h.clock()
}

// Check returns nil, or an unavailable error saying what the last storage failure was, if
// it was within Hold.
func (h *Record) Check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cause == nil {
		return nil
	}
	ago := h.clock().Sub(h.failed)
	if ago >= Hold {
		h.what, h.cause = "", nil
		return nil
	}
	return &coordinator.Error{
		Code: coordinator.CodeUnavailable,
		Message: fmt.Sprintf("the database cannot be written: a write failed %s ago (%s); ready again %s after the last such failure",
			ago.Round(time.Second), h.what, Hold),
		Err: h.cause,
	}
}

func (h *Record) clock() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}
