package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/e2e/sinks"
)

// Position is the source's committable: its read position, the next event it would send.
type Position struct {
	Next int64 `json:"next"`
}

// Source is a deterministic source of events 1..Total and a participant of the job whose
// committables are its read positions. On start, on every change of its sinks'
// connections and whenever a checkpoint whose barrier it sent is aborted, it rewinds: it
// aborts the job's preparing checkpoints, restores its position from the last committed
// checkpoint (cc.RestorePoint) and replays from there after a reset.
//
// Prepare(N) sends barrier N to every sink, after the events sent so far, and votes the
// position after them. Commit is a no-op (the coordinator keeps the positions); Abort of a
// checkpoint whose barrier went out in the current run of the stream triggers a rewind.
type Source struct {
	// Coordinator, Job and Name: the job and this participant. Required.
	Coordinator *cc.Coordinator
	Job, Name   string
	// Sinks are the participant names of the sinks; the source sends only while all are
	// connected. Required.
	Sinks []string
	// Total is how many events there are.
	Total int64
	// Rate bounds the events sent per second; 0 means no bound.
	Rate int
	// Listener accepts the sinks' connections. Required.
	Listener net.Listener
	// Logger; nil means no logging.
	Logger *slog.Logger

	mu      sync.Mutex
	conns   map[string]*sinkConn
	running bool            // sending: rewound, every sink connected
	gen     int64           // run of the stream; a rewind starts a new one
	next    int64           // next event to send
	barrier map[int64]int64 // checkpoint -> run its barrier went out in
	wake    chan struct{}   // rewind requests (buffered, 1)
	changed chan struct{}   // closed and replaced when running or connections change

	initOnce      sync.Once
	rewinds, sent atomic.Int64
}

func (s *Source) init() {
	s.initOnce.Do(func() {
		s.conns = map[string]*sinkConn{}
		s.barrier = map[int64]int64{}
		s.wake = make(chan struct{}, 1)
		s.changed = make(chan struct{})
	})
}

type sinkConn struct {
	name string
	conn net.Conn
	w    *bufio.Writer
	enc  *json.Encoder
}

var (
	_ cc.Participant[Position] = (*Source)(nil)
)

func (s *Source) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// Rewinds is how many rewinds the source completed.
func (s *Source) Rewinds() int64 { return s.rewinds.Load() }

// Sent is how many events the source sent, replays included.
func (s *Source) Sent() int64 { return s.sent.Load() }

// Run accepts sinks, rewinds and sends until ctx ends. Run the source's cc.Runner beside
// it.
func (s *Source) Run(ctx context.Context) error {
	s.init()
	s.requestRewind()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.Listener.Close() })
	defer stop()
	wg.Add(2)
	go func() { defer wg.Done(); s.rewinder(ctx) }()
	go func() { defer wg.Done(); s.sender(ctx) }()
	for {
		conn, err := s.Listener.Accept()
		if err != nil {
			if ctx.Err() != nil {
				s.mu.Lock()
				for _, c := range s.conns {
					c.conn.Close()
				}
				s.mu.Unlock()
				return ctx.Err()
			}
			return fmt.Errorf("accept: %w", err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.serve(ctx, conn) }()
	}
}

// notify wakes whoever waits for a change; mu must be held.
func (s *Source) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// requestRewind stops sending at once and asks the rewinder for a rewind.
func (s *Source) requestRewind() {
	s.mu.Lock()
	s.stopLocked()
	s.mu.Unlock()
}

func (s *Source) stopLocked() {
	if s.running {
		s.running = false
		s.notify()
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// serve reads a sink's hello, makes it the sink's connection, and waits for it to close.
func (s *Source) serve(ctx context.Context, conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	dec := json.NewDecoder(conn)
	var hello frame
	if err := dec.Decode(&hello); err != nil || hello.Hello == "" {
		conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	w := bufio.NewWriterSize(conn, 64<<10)
	c := &sinkConn{name: hello.Hello, conn: conn, w: w, enc: json.NewEncoder(w)}
	s.mu.Lock()
	if old := s.conns[c.name]; old != nil {
		old.conn.Close()
	}
	s.conns[c.name] = c
	s.stopLocked() // a sink (re)joined: it missed what the others hold
	s.notify()
	s.mu.Unlock()
	s.log().Info("sink connected", "sink", c.name)
	// Sinks send nothing after the hello: a read returns when the connection ends.
	var discard frame
	_ = dec.Decode(&discard)
	s.drop(c)
}

// drop forgets c if it is still its sink's connection, and rewinds.
func (s *Source) drop(c *sinkConn) {
	c.conn.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[c.name] == c {
		delete(s.conns, c.name)
		s.log().Info("sink disconnected", "sink", c.name)
		s.stopLocked()
		s.notify()
	}
}

func (s *Source) allConnectedLocked() bool {
	for _, name := range s.Sinks {
		if s.conns[name] == nil {
			return false
		}
	}
	return true
}

// sendLocked writes f to every sink (flushing when flush), dropping and rewinding on a
// failed write. mu must be held; it reports whether every write succeeded.
func (s *Source) sendLocked(f frame, flush bool) bool {
	ok := true
	for _, name := range s.Sinks {
		c := s.conns[name]
		if c == nil {
			ok = false
			continue
		}
		_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		err := c.enc.Encode(f)
		if err == nil && flush {
			err = c.w.Flush()
		}
		if err != nil {
			c.conn.Close()
			delete(s.conns, name)
			ok = false
		}
	}
	if !ok {
		s.stopLocked()
		s.notify()
	}
	return ok
}

// sender sends events while running, in batches, at most Rate per second.
func (s *Source) sender(ctx context.Context) {
	const batch = 20
	for ctx.Err() == nil {
		s.mu.Lock()
		if !s.running || s.next > s.Total {
			changed := s.changed
			s.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-changed:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		n := 0
		for ; n < batch && s.next <= s.Total; n++ {
			e := sinks.MakeEvent(s.next)
			if !s.sendLocked(frame{Seq: e.Seq, Payload: e.Payload}, n == batch-1 || s.next == s.Total) {
				break
			}
			s.next++
			s.sent.Add(1)
		}
		s.mu.Unlock()
		if s.Rate > 0 {
			_ = sleep(ctx, time.Duration(n)*time.Second/time.Duration(s.Rate))
		}
	}
}

// rewinder performs the requested rewinds, one at a time.
func (s *Source) rewinder(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		if err := s.rewind(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log().Warn("rewind failed, trying again", "error", err)
			_ = sleep(ctx, 100*time.Millisecond)
			s.requestRewind()
		}
	}
}

func (s *Source) rewind(ctx context.Context) error {
	s.mu.Lock()
	s.running = false
	s.gen++
	gen := s.gen
	s.notify()
	s.mu.Unlock()
	// Every checkpoint that may hold a barrier of the old run is decided now: committed
	// ones stand, the others are aborted (and their sinks roll them back).
	open, err := s.Coordinator.Checkpoints(ctx, s.Job, cc.Preparing)
	if err != nil {
		return err
	}
	for i := len(open) - 1; i >= 0; i-- { // oldest first; an abort cascades upwards anyway
		_, err := s.Coordinator.Abort(ctx, s.Job, open[i].Id, "source "+s.Name+" rewinds")
		if err != nil && !errors.Is(err, cc.ErrAlreadyDecided) {
			return err
		}
	}
	id, pos, err := cc.RestorePoint[Position](ctx, s.Coordinator, s.Job, s.Name)
	if err != nil {
		return err
	}
	next := int64(1)
	if len(pos) > 0 {
		next = pos[0].Next
	}
	// Wait for every sink, then reset them all and start the new run.
	for {
		s.mu.Lock()
		if s.gen != gen || len(s.wake) > 0 {
			s.mu.Unlock()
			return nil // overtaken by another request: that rewind starts over
		}
		if s.allConnectedLocked() {
			g := gen
			if s.sendLocked(frame{Reset: &g}, true) {
				s.next = next
				s.running = true
				s.notify()
				s.mu.Unlock()
				s.rewinds.Add(1)
				s.log().Info("rewound", "restore_checkpoint", id, "next", next, "run", gen)
				return nil
			}
			s.mu.Unlock()
			return nil // a sink went away during the reset: a rewind is requested
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Prepare sends barrier checkpoint to every sink once the stream runs and the checkpoint
// is still preparing, and returns the position after the events sent before it.
func (s *Source) Prepare(ctx context.Context, checkpoint int64) ([]Position, error) {
	s.init()
	for {
		s.mu.Lock()
		running, gen, changed := s.running, s.gen, s.changed
		s.mu.Unlock()
		if !running {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("barrier %d: stream not running: %w", checkpoint, context.Cause(ctx))
			case <-changed:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		// A rewind aborts what is preparing; a barrier for a checkpoint it aborted would
		// make the sinks prepare events that cannot commit, and rewind again.
		cp, err := s.Coordinator.Checkpoint(ctx, s.Job, checkpoint, 0)
		if err != nil {
			return nil, err
		}
		if cp.Status != cc.Preparing {
			return nil, fmt.Errorf("checkpoint %d is %s", checkpoint, cp.Status)
		}
		s.mu.Lock()
		if !s.running || s.gen != gen {
			s.mu.Unlock()
			continue
		}
		if !s.sendLocked(frame{Barrier: checkpoint}, true) {
			s.mu.Unlock()
			return nil, fmt.Errorf("barrier %d: a sink went away", checkpoint)
		}
		s.barrier[checkpoint] = gen
		next := s.next
		s.mu.Unlock()
		return []Position{{Next: next}}, nil
	}
}

// Commit has nothing to do: the committed position lives in the coordinator.
func (s *Source) Commit(ctx context.Context, checkpoint int64, _ []Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.barrier {
		if id <= checkpoint {
			delete(s.barrier, id)
		}
	}
	return nil
}

// Abort rewinds if checkpoint's barrier went out in the current run: the sinks roll its
// events back, so they must be sent again.
func (s *Source) Abort(ctx context.Context, checkpoint int64, _ []Position) error {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen, ok := s.barrier[checkpoint]; ok {
		delete(s.barrier, checkpoint)
		if gen == s.gen {
			s.log().Info("checkpoint aborted after its barrier: rewinding", "checkpoint", checkpoint)
			s.stopLocked()
		}
	}
	return nil
}
