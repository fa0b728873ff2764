package coordinator

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// EventHub reads the status changes of every job once per process, with the checkpoints
// they concern, encoded once, and keeps the most recent in a ring that every event stream
// of the process reads from: a hundred streams cost what one costs, and an idle process
// reads nothing (it reads only when a change of some job woke it, and only while a
// stream is open). A stream that asks for a position older than the ring reads the store
// itself until it catches up; one that falls behind the ring is cut off (its client
// resumes from its last id).
type EventHub struct {
	svc    *Service
	events EventStore
	encode func(*Checkpoint) ([]byte, error)

	mu      sync.Mutex
	streams int
	cancel  context.CancelFunc // stops the reader; nil while none runs
	stopped chan struct{}      // closed when the reader that ran last has stopped
	// ring holds the latest events, ring[0] numbered first; pos is the reader's position
	// (after every status change in the ring). bytes is what the ring's data weighs.
	ring    eventRing
	first   uint64
	bytes   int
	base    EventPosition // the position before ring[0]: what the ring holds comes after it
	pos     EventPosition
	started bool // pos is known
	// last is the status each open checkpoint was last shown with (a vote or an ack is
	// shown only with the status the streams showed last: else the status change, still to
	// be read, shows it). active counts the streams, for Note to read without the lock.
	last   map[CheckpointKey]Status
	active atomic.Int64
	// known are checkpoints as this process's requests last left them, so that the reader
	// shows a change made here without reading its checkpoint back (bounded: knownMax).
	known map[CheckpointKey]*Checkpoint
	// changed is closed (and replaced) when events are added or the reader fails; a vote
	// or an ack noted arms wakeArmed instead, which wakes the streams hubWakeEvery later,
	// so that a busy process wakes each stream at most that often, not at every request.
	changed   chan struct{}
	wakeArmed bool
	err       error // the reader's last failure, nil once it read again
}

// HubEvent is one event of the streams.
type HubEvent struct {
	// Pos is the position after the event: the status change's own, or for a change
	// without one (a vote, an ack), the position of the last status change before it.
	Pos EventPosition
	Job string
	// Status is the status change, "" for a vote or an ack.
	Status Status
	// Data is the checkpoint as it stood at the change (AsOf), encoded.
	Data []byte
}

// Limits of the hub's ring and reads.
const (
	hubRingEvents  = 4096
	hubRingBytes   = 16 << 20
	hubReadLimit   = 500
	hubReadSpacing = 20 * time.Millisecond // at most one read of the store per this, under load
	hubHeldRetry   = 20 * time.Millisecond
	hubWakeEvery   = 20 * time.Millisecond
	// streamEvery is the least time between two writes of one stream: what came meanwhile
	// goes in the next write, so that a hundred streams of a busy process cost a few
	// thousand writes a second, not one per event each.
	streamEvery  = 100 * time.Millisecond
	hubFailRetry = time.Second
	knownMax     = 10000
)

// ErrStreamBehind is returned to a stream that fell behind the hub's ring.
var ErrStreamBehind = errors.New("the stream's reader fell behind: reconnect with Last-Event-ID")

// NewEventHub returns the hub of svc's event streams, nil when its store records no
// events. encode writes a checkpoint as the streams send it.
func NewEventHub(svc *Service, encode func(*Checkpoint) ([]byte, error)) *EventHub {
	es, ok := svc.store.(EventStore)
	if !ok {
		return nil
	}
	return &EventHub{svc: svc, events: es, encode: encode, changed: make(chan struct{})}
}

// Closing is closed once the service ends its waits (shutdown): streams end then.
func (s *Service) Closing() <-chan struct{} { return s.closing }

// join counts a stream in and starts the reader if none runs; it returns the position
// the reader is at (after reading the head if it just started).
func (h *EventHub) join(ctx context.Context) (EventPosition, uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel == nil {
		if h.stopped != nil {
			h.mu.Unlock()
			<-h.stopped // the last reader, stopping, must not append behind the new one
			h.mu.Lock()
		}
		if h.cancel == nil {
			head, err := h.events.EventHead(ctx)
			if err != nil {
				return EventPosition{}, 0, err
			}
			h.first += uint64(h.ring.n) + 1 // streams of the reader before are behind
			h.last = map[CheckpointKey]Status{}
			h.known = map[CheckpointKey]*Checkpoint{}
			h.ring.reset()
			h.bytes, h.base, h.pos, h.started, h.err = 0, head, head, true, nil
			rctx, cancel := context.WithCancel(context.Background())
			h.cancel, h.stopped = cancel, make(chan struct{})
			go h.read(rctx, h.stopped)
		}
	}
	h.streams++
	h.active.Add(1)
	return h.pos, h.first + uint64(h.ring.n), nil
}

// leave counts a stream out, stopping the reader after the last.
func (h *EventHub) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.streams--
	h.active.Add(-1)
	if h.streams == 0 && h.cancel != nil {
		h.cancel()
		h.cancel = nil
	}
}

// since returns the events from number n on, the number after them, the channel closed at
// the next change, and ErrStreamBehind if n fell out of the ring.
func (h *EventHub) since(n uint64, match func(job string) bool) ([]HubEvent, uint64, <-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n < h.first {
		return nil, n, nil, ErrStreamBehind
	}
	end := h.first + uint64(h.ring.n)
	if n > end {
		n = end
	}
	return h.ring.copyFrom(int(n-h.first), match), end, h.changed, h.err
}

// firstAfter returns the number of the first event of the ring at or after pos, and
// whether the ring holds every status change after pos (pos is not before its base).
func (h *EventHub) firstAfter(pos EventPosition) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pos.Less(h.base) {
		return h.first, false
	}
	for i := range h.ring.n {
		if !h.ring.at(i).Pos.Less(pos) {
			return h.first + uint64(i), true
		}
	}
	return h.first + uint64(h.ring.n), true
}

// add appends e to the ring, dropping the oldest events beyond its bounds; h.mu is held.
func (h *EventHub) add(e HubEvent) {
	for h.ring.n > 0 && (h.ring.n >= hubRingEvents || h.bytes+len(e.Data) > hubRingBytes) {
		old := h.ring.dropFirst()
		h.bytes -= len(old.Data)
		h.base = old.Pos
		h.first++
	}
	h.ring.push(e)
	h.bytes += len(e.Data)
}

// eventRing is a fixed array of hubRingEvents events used as a circle: no event is
// copied when the oldest is dropped.
type eventRing struct {
	buf      []HubEvent
	start, n int
}

func (r *eventRing) at(i int) *HubEvent { return &r.buf[(r.start+i)%len(r.buf)] }

func (r *eventRing) push(e HubEvent) {
	if r.buf == nil {
		r.buf = make([]HubEvent, hubRingEvents)
	}
	r.buf[(r.start+r.n)%len(r.buf)] = e
	r.n++
}

func (r *eventRing) dropFirst() HubEvent {
	e := r.buf[r.start]
	r.buf[r.start] = HubEvent{}
	r.start = (r.start + 1) % len(r.buf)
	r.n--
	return e
}

func (r *eventRing) reset() {
	clear(r.buf)
	r.start, r.n = 0, 0
}

// copyFrom returns a copy of the events of the jobs match accepts from the i-th oldest on.
func (r *eventRing) copyFrom(i int, match func(job string) bool) []HubEvent {
	var out []HubEvent
	for ; i < r.n; i++ {
		if e := r.at(i); match(e.Job) {
			out = append(out, *e)
		}
	}
	return out
}

func (h *EventHub) publish(add []HubEvent, pos EventPosition, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range add {
		h.add(e)
		switch key := (CheckpointKey{e.Job, e.Pos.Checkpoint}); e.Status {
		case "":
		case StatusCommitted:
			delete(h.last, key)
			delete(h.known, key)
		default:
			h.last[key] = e.Status
		}
	}
	if len(h.last) > 100000 {
		clear(h.last) // aborted ones, never completed: their acks are not shown live then
	}
	h.pos, h.err = pos, err
	close(h.changed)
	h.changed = make(chan struct{})
}

// read is the hub's reader: it reads what changed each time a change of any job wakes it,
// while streams are open.
func (h *EventHub) read(ctx context.Context, stopped chan struct{}) {
	defer close(stopped)
	h.mu.Lock()
	pos := h.pos
	h.mu.Unlock()
	var lastRead time.Time
	for ctx.Err() == nil {
		sub := h.events.SubscribeEverything()
		if wait := hubReadSpacing - time.Since(lastRead); wait > 0 {
			sleep(ctx, wait)
		}
		lastRead = time.Now()
		page, err := h.events.Events(ctx, "", pos, hubReadLimit)
		if err != nil {
			sub.Cancel()
			if ctx.Err() != nil {
				return
			}
			h.publish(nil, pos, err)
			sleep(ctx, hubFailRetry)
			continue
		}
		var add []HubEvent
		if page.Reset {
			// The reader fell behind retention (a process stopped for long): start again
			// from the head; streams following it are cut off as behind.
			head, err := h.events.EventHead(ctx)
			if err == nil {
				h.mu.Lock()
				h.first += uint64(h.ring.n) + 1
				h.ring.reset()
				h.bytes, h.base = 0, head
				h.mu.Unlock()
				pos = head
			}
		}
		cps := map[CheckpointKey]*Checkpoint{}
		for _, e := range page.Events {
			key := CheckpointKey{e.Job, e.Checkpoint}
			cp, ok := cps[key]
			if !ok {
				h.mu.Lock()
				cp = h.known[key]
				h.mu.Unlock()
				if cp == nil || StatusRank(cp.Status) < e.Rank {
					cp, err = h.svc.store.GetCheckpoint(ctx, e.Job, e.Checkpoint)
					if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrGone) {
						break // read the rest again
					}
					err = nil
				}
				cps[key] = cp
			}
			ev := HubEvent{Pos: e.EventPosition, Job: e.Job, Status: e.Status}
			shown := &Checkpoint{Job: e.Job, ID: e.Checkpoint, Status: e.Status} // deleted since
			if cp != nil {
				shown = cp
			}
			if ev.Data, err = h.shown(ctx, e, shown); err != nil {
				break
			}
			pos = e.EventPosition
			add = append(add, ev)
		}
		if err != nil {
			sub.Cancel()
			h.publish(add, pos, err)
			sleep(ctx, hubFailRetry)
			continue
		}
		h.publish(add, pos, nil)
		if len(page.Events) == hubReadLimit {
			sub.Cancel()
			continue
		}
		var retry <-chan time.Time
		if page.Held {
			retry = time.After(hubHeldRetry)
		}
		select {
		case <-ctx.Done():
			sub.Cancel()
			return
		case <-retry:
			sub.Cancel()
		case <-sub.Done():
		}
	}
}

// Note shows cp, as a vote, an ack or an operator's completion through this process left
// it, to the streams, if they showed its status last. It costs nothing while no stream
// is open.
func (h *EventHub) Note(cp *Checkpoint) {
	if h == nil || h.active.Load() == 0 || cp == nil {
		return
	}
	key := CheckpointKey{cp.Job, cp.ID}
	h.mu.Lock()
	if h.known != nil {
		if old := h.known[key]; old == nil || StatusRank(old.Status) <= StatusRank(cp.Status) {
			if len(h.known) >= knownMax && old == nil {
				clear(h.known)
			}
			h.known[key] = cp
		}
	}
	shown, ok := h.last[key]
	h.mu.Unlock()
	if !ok || shown != cp.Status {
		return
	}
	data, err := h.encode(cp)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last[key] != cp.Status || h.cancel == nil {
		return
	}
	h.add(HubEvent{Pos: h.pos, Job: cp.Job, Data: data})
	if !h.wakeArmed {
		h.wakeArmed = true
		time.AfterFunc(hubWakeEvery, h.wake)
	}
}

// wake wakes the streams waiting for events.
func (h *EventHub) wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakeArmed = false
	close(h.changed)
	h.changed = make(chan struct{})
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// CheckpointKey names a checkpoint.
type CheckpointKey struct {
	Job string
	ID  int64
}

// StreamSink is where a stream writes: its events, and a keep-alive when nothing happened
// for a while.
type StreamSink interface {
	// Position tells the stream's starting position, before any event.
	Position(pos EventPosition) error
	// Event sends one event: a checkpoint (Status set or not), id pos.
	Event(e HubEvent) error
	// Flush sends what Event wrote; Event may hold it until then.
	Flush() error
	// Reset tells the client that its position was older than what retention kept, at pos.
	Reset(pos EventPosition, job *Job) error
	KeepAlive() error
}

// Stream sends job's events (every job allow accepts, when job is "") after from (nil:
// from now) to sink, until ctx ends, the service shuts down, or sink fails. An idle stream
// reads nothing: a job's stream stays open if the job is deleted (one created again under
// its name goes on with it, as its checkpoint ids do).
func (h *EventHub) Stream(ctx context.Context, job string, from *EventPosition, allow func(job string) bool, sink StreamSink, keepAlive time.Duration) error {
	if job != "" {
		if _, err := h.svc.GetJob(ctx, job); err != nil {
			return err
		}
	}
	start, n, err := h.join(ctx)
	if err != nil {
		return err
	}
	defer h.leave()
	pos := start
	if from != nil {
		pos = *from
	}
	if job != "" {
		pos.Job = job
	}
	if from == nil {
		if err := sink.Position(pos); err != nil {
			return err
		}
	} else {
		// Catch up from the store until the ring holds what comes next.
		for {
			if _, inRing := h.firstAfter(pos); inRing {
				break
			}
			page, err := h.events.Events(ctx, job, pos, hubReadLimit)
			if err != nil {
				return err
			}
			if page.Reset {
				var j *Job
				if job != "" {
					if j, err = h.svc.GetJob(ctx, job); err != nil {
						return err
					}
				}
				h.mu.Lock()
				pos = h.base
				h.mu.Unlock()
				if job != "" {
					pos.Job = job
				}
				if err := sink.Reset(pos, j); err != nil {
					return err
				}
				break
			}
			for _, e := range page.Events {
				if job == "" && !allow(e.Job) {
					pos = e.EventPosition
					continue
				}
				data, err := h.shown(ctx, e, nil)
				if err != nil {
					return err
				}
				if err := sink.Event(HubEvent{Pos: e.EventPosition, Job: e.Job, Status: e.Status, Data: data}); err != nil {
					return err
				}
				pos = e.EventPosition
			}
			if err := sink.Flush(); err != nil {
				return err
			}
			if len(page.Events) == 0 {
				sleep(ctx, hubHeldRetry) // held back, or the ring's base not yet committed here
				if ctx.Err() != nil {
					return nil
				}
			}
		}
		n, _ = h.firstAfter(pos)
	}
	match := allow
	if job != "" {
		match = func(j string) bool { return j == job }
	}
	ticker := time.NewTicker(keepAlive)
	defer ticker.Stop()
	for {
		events, next, changed, err := h.since(n, match)
		if errors.Is(err, ErrStreamBehind) {
			return err
		}
		for _, e := range events {
			out := e
			if e.Status != "" {
				if !pos.Less(e.Pos) {
					continue // sent while catching up
				}
				pos = e.Pos
				if job != "" {
					pos.Job = job
				}
			} else if e.Pos.Less(start) && from != nil {
				continue // a vote before the stream's catching up ended
			}
			out.Pos = pos
			if err := sink.Event(out); err != nil {
				return err
			}
		}
		if len(events) > 0 {
			if err := sink.Flush(); err != nil {
				return err
			}
			sleep(ctx, streamEvery)
		}
		n = next
		select {
		case <-ctx.Done():
			return nil
		case <-h.svc.closing:
			return nil
		case <-ticker.C:
			if err := sink.KeepAlive(); err != nil {
				return err
			}
		case <-changed:
		}
	}
}

// shown encodes the checkpoint of e as it stood at e (cp, if not nil, is it as it stands
// now; else it is read). One deleted since shows its job, id and status.
func (h *EventHub) shown(ctx context.Context, e StatusEvent, cp *Checkpoint) ([]byte, error) {
	if cp == nil {
		var err error
		cp, err = h.svc.store.GetCheckpoint(ctx, e.Job, e.Checkpoint)
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrGone) {
			return nil, err
		}
	}
	shown := &Checkpoint{Job: e.Job, ID: e.Checkpoint, Status: e.Status}
	if cp != nil && StatusRank(cp.Status) >= e.Rank && (cp.Status == e.Status || e.Status != StatusAborted) {
		shown = AsOf(cp, e.Status)
	}
	return h.encode(shown)
}
