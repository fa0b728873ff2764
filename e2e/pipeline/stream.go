// Package pipeline is an exactly-once pipeline for end-to-end tests: a deterministic
// source that streams events to sinks over unix sockets with Flink-style checkpoint
// barriers, all of them participants of one job of the coordinator.
//
// The wire protocol is JSON, one object per line. A sink connects to the source's socket
// and sends {"hello": "<its participant name>"}. The source then sends frames:
//
//	{"reset": G}                      drop everything received and not yet prepared
//	{"seq": 17, "payload": "..."}     an event
//	{"barrier": N}                    the events since the previous barrier belong to checkpoint N
//
// A sink's Prepare(N) waits for barrier N and takes every event before it that no earlier
// checkpoint took (see Inbox). The source rewinds (see Source) whenever a sink connects or
// disconnects and whenever a checkpoint whose barrier it sent is aborted: it aborts the
// job's preparing checkpoints, reads its position in the last committed checkpoint, sends
// a reset to every sink and replays from there. So the events of every committed
// checkpoint form, in every sink, exactly the range between two consecutive committed
// source positions.
package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/twophase/coordinator/e2e/sinks"
)

// frame is one line of the wire protocol.
type frame struct {
	Hello   string `json:"hello,omitempty"`
	Reset   *int64 `json:"reset,omitempty"`
	Seq     int64  `json:"seq,omitempty"`
	Payload string `json:"payload,omitempty"`
	Barrier int64  `json:"barrier,omitempty"`
}

// segment is the events a sink received between two barriers, the second being
// checkpoint's.
type segment struct {
	checkpoint int64
	events     []sinks.Event
}

// Inbox is a sink's end of the stream: it connects to the source (again and again, as the
// source restarts) and implements sinks.Input. Events received after the last barrier are
// dropped when the connection breaks or a reset arrives: the source replays them.
type Inbox struct {
	// Socket is the source's unix socket. Required.
	Socket string
	// Name is sent in the hello: the sink's participant name. Required.
	Name string
	// Logger; nil means no logging.
	Logger *slog.Logger

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	open    []sinks.Event
	sealed  []segment
	resets  int
}

func (in *Inbox) log() *slog.Logger {
	if in.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return in.Logger
}

// notify wakes the waiters; mu must be held.
func (in *Inbox) notify() {
	if in.changed != nil {
		close(in.changed)
	}
	in.changed = make(chan struct{})
}

func (in *Inbox) reset() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.open, in.sealed = nil, nil
	in.resets++
	in.notify()
}

// Run connects to the source and receives until ctx ends, reconnecting after every break.
func (in *Inbox) Run(ctx context.Context) error {
	in.mu.Lock()
	if in.changed == nil {
		in.changed = make(chan struct{})
	}
	in.mu.Unlock()
	var d net.Dialer
	for ctx.Err() == nil {
		conn, err := d.DialContext(ctx, "unix", in.Socket)
		if err != nil {
			_ = sleep(ctx, 20*time.Millisecond)
			continue
		}
		err = in.receive(ctx, conn)
		in.reset()
		if ctx.Err() == nil {
			in.log().Info("stream broken, reconnecting", "error", err)
		}
	}
	return ctx.Err()
}

func (in *Inbox) receive(ctx context.Context, conn net.Conn) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := json.NewEncoder(conn).Encode(frame{Hello: in.Name}); err != nil {
		return err
	}
	dec := json.NewDecoder(bufio.NewReaderSize(conn, 64<<10))
	for {
		var f frame
		if err := dec.Decode(&f); err != nil {
			return err
		}
		in.mu.Lock()
		switch {
		case f.Reset != nil:
			in.open, in.sealed = nil, nil
			in.resets++
		case f.Barrier > 0:
			in.sealed = append(in.sealed, segment{checkpoint: f.Barrier, events: in.open})
			in.open = nil
		case f.Seq > 0:
			in.open = append(in.open, sinks.Event{Seq: f.Seq, Payload: f.Payload})
		}
		in.notify()
		in.mu.Unlock()
	}
}

// Take waits for checkpoint's barrier and returns the events of every segment up to it
// that no earlier Take returned. If a barrier of a higher checkpoint arrives first,
// checkpoint's barrier will never come (barriers go out in checkpoint order): Take fails,
// and the events stay for the higher checkpoint.
func (in *Inbox) Take(ctx context.Context, checkpoint int64) ([]sinks.Event, error) {
	for {
		in.mu.Lock()
		if in.changed == nil {
			in.changed = make(chan struct{})
		}
		i := slices.IndexFunc(in.sealed, func(s segment) bool { return s.checkpoint >= checkpoint })
		if i >= 0 {
			if in.sealed[i].checkpoint != checkpoint {
				in.mu.Unlock()
				return nil, fmt.Errorf("barrier %d arrived before barrier %d", in.sealed[i].checkpoint, checkpoint)
			}
			var events []sinks.Event
			for _, s := range in.sealed[:i+1] {
				events = append(events, s.events...)
			}
			in.sealed = slices.Delete(in.sealed, 0, i+1)
			in.mu.Unlock()
			return events, nil
		}
		changed := in.changed
		in.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for barrier %d: %w", checkpoint, context.Cause(ctx))
		case <-changed:
		}
	}
}

// Resets is how many times the inbox dropped what it held (resets and broken streams).
func (in *Inbox) Resets() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.resets
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
