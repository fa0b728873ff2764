package api

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/twophase/coordinator/metrics"
)

// The long-poll slots (Options.MaxWaiters) are shared so that no caller can take them
// from the participants. A wait is a participant's own when it is a pending or a vote
// with wait_ms of the participant its token acts as (a participant token of that
// participant, or admin; any caller when authentication is off); every other wait (a
// checkpoint's, another's pending) is a read. Of a pool of max slots:
//
//   - reads hold at most max - max/2 of them: the other half is kept for participants'
//     own waits, which may use the whole pool;
//   - one token holds at most max/16 reads (at least one), and one participant of a
//     token at most max/16 own waits (at least four), so that one caller cannot take a
//     part of the pool from the others of its class (without authentication, reads are
//     not counted by token: there is none);
//   - a wait past any of these bounds gets 503 unavailable with Retry-After, its detail
//     saying which bound it met, and changes nothing.

// waiterKey is what a share of the pool is counted by: a token's reads (participant
// empty), or the own waits of one participant by one token.
type waiterKey struct {
	token, job, participant string
}

// waiterPool counts the long-polls held, by class and by waiterKey.
type waiterPool struct {
	max, readMax, readShare, ownShare int
	metrics                           *metrics.Metrics // nil: not counted

	mu        sync.Mutex
	own, read int
	by        map[waiterKey]int
}

func newWaiterPool(size int, m *metrics.Metrics) *waiterPool {
	p := &waiterPool{max: size, readMax: size - size/2, readShare: max(1, size/16), ownShare: max(4, size/16),
		metrics: m, by: map[waiterKey]int{}}
	if m != nil {
		m.WaitersHeld(func(participant bool) float64 {
			p.mu.Lock()
			defer p.mu.Unlock()
			if participant {
				return float64(p.own)
			}
			return float64(p.read)
		})
	}
	return p
}

// acquire takes a slot for a wait of key (own: a participant's own), or says why not: the
// reason label of coordinator_http_shed_requests_total and the problem's detail.
func (p *waiterPool) acquire(key waiterKey, own, counted bool) (reason, detail string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.own+p.read >= p.max:
		return "waiters", fmt.Sprintf("every long-poll slot of this coordinator is held (%d, --max-waiters)", p.max)
	case !own && p.read >= p.readMax:
		return "waiters_read_share", fmt.Sprintf("long-polls that are not a participant's own pending or vote hold "+
			"their part of this coordinator's slots (%d of %d, --max-waiters); the rest is kept for participants", p.readMax, p.max)
	case own && counted && p.by[key] >= p.ownShare:
		return "waiters_token_share", fmt.Sprintf("participant %s of job %s holds as many long-polls with this token "+
			"as one participant may (%d)", key.participant, key.job, p.ownShare)
	case !own && counted && p.by[key] >= p.readShare:
		return "waiters_token_share", fmt.Sprintf("this token holds as many long-polls that are not a participant's "+
			"own as one token may (%d of %d, --max-waiters)", p.readShare, p.max)
	}
	if own {
		p.own++
	} else {
		p.read++
	}
	if counted {
		p.by[key]++
	}
	return "", ""
}

func (p *waiterPool) release(key waiterKey, own, counted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if own {
		p.own--
	} else {
		p.read--
	}
	if counted {
		if n := p.by[key] - 1; n > 0 {
			p.by[key] = n
		} else {
			delete(p.by, key)
		}
	}
}

// waiterClass tells r's class and the key its share is counted by: own when it is a
// participant's own wait; counted false when no share bounds it (a read without a token).
func waiterClass(r *http.Request) (key waiterKey, own, counted bool) {
	job, participant := chi.URLParam(r, "job"), chi.URLParam(r, "participant")
	pr := principalOf(r.Context())
	// The routes with a participant in their path that may wait are pending and votes.
	if participant != "" && (pr == nil || pr.ActsAs(job, participant)) {
		key = waiterKey{job: job, participant: participant}
		if pr != nil {
			key.token = pr.Name()
		}
		return key, true, true
	}
	if pr == nil {
		return waiterKey{}, false, false
	}
	return waiterKey{token: pr.Name()}, false, true
}

// waiterLimit answers 503 unavailable, with Retry-After, to a request that may wait
// (mayWait) when the pool of size slots, or its class's or its caller's share of it, is
// held (waiterPool); size 0 means no bound. It runs after the input check, so that a
// request refused anyway is refused for what it is.
func waiterLimit(size int, m *metrics.Metrics, pw *problemWriter) MiddlewareFunc {
	var pool *waiterPool
	if size > 0 {
		pool = newWaiterPool(size, m)
	}
	// The generated router calls this for every request: the pool is made once, above.
	return func(next http.Handler) http.Handler {
		if pool == nil {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !mayWait(r) {
				next.ServeHTTP(w, r)
				return
			}
			key, own, counted := waiterClass(r)
			if reason, detail := pool.acquire(key, own, counted); reason != "" {
				if m != nil {
					m.Shed(reason)
				}
				pw.write(w, r, &requestError{code: codeUnavailable, detail: detail +
					"; retry after the Retry-After seconds, or ask without wait_ms; nothing was changed"})
				return
			}
			// A parked request keeps its slot until it is answered.
			defer afterAnswer(w, func() { pool.release(key, own, counted) })
			next.ServeHTTP(w, r)
		})
	}
}
