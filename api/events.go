package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// Event streams (GET /v1/jobs/{job}/events, GET /v1/events): Server-Sent Events that the
// process's coordinator.EventHub feeds. A stream is exempt from the request timeout (it
// lasts until the client or the coordinator ends it); each of its writes has its own
// deadline instead, so that a client that stops reading is cut off rather than buffered
// for.

// Stream timing.
const (
	streamKeepAlive    = 10 * time.Second // a comment when nothing else was sent for this long (at most 15 s)
	streamWriteTimeout = 10 * time.Second // a write not taken by then cuts the stream off
	streamRetry        = 1000             // the reconnection delay (ms) the stream suggests
)

// isStream reports whether r asks for an event stream.
func isStream(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	if r.URL.Path == "/v1/events" {
		return true
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/jobs/")
	return ok && strings.HasSuffix(rest, "/events") && strings.Count(rest, "/") == 1
}

func (s *server) StreamJobEvents(ctx context.Context, req StreamJobEventsRequestObject) (StreamJobEventsResponseObject, error) {
	return s.stream(ctx, req.Job, req.Params.LastEventID)
}

func (s *server) StreamEvents(ctx context.Context, req StreamEventsRequestObject) (StreamEventsResponseObject, error) {
	return s.stream(ctx, "", req.Params.LastEventID)
}

func (s *server) stream(ctx context.Context, job string, lastEventID *string) (*streamResponse, error) {
	if s.hub == nil {
		return nil, &coordinator.Error{Code: coordinator.CodeUnavailable, Message: "this coordinator's store records no events"}
	}
	var from *coordinator.EventPosition
	if lastEventID != nil && strings.TrimSpace(*lastEventID) != "" {
		pos, err := coordinator.ParseEventPosition(strings.TrimSpace(*lastEventID))
		if err != nil {
			return nil, invalid("Last-Event-ID", "%s", err.Error())
		}
		from = &pos
	}
	if job != "" {
		// Before the answer's head: a missing job is a 404, not an empty stream.
		if _, err := s.svc.GetJob(ctx, job); err != nil {
			return nil, err
		}
	}
	reach := reachOf(ctx)
	return &streamResponse{ctx: ctx, hub: s.hub, job: job, from: from, allow: reach.Matches, keepAlive: s.keepAlive}, nil
}

// streamResponse writes a stream as the answer of StreamJobEvents or StreamEvents.
type streamResponse struct {
	ctx   context.Context
	hub   *coordinator.EventHub
	job   string
	from  *coordinator.EventPosition
	allow func(job string) bool
	// keepAlive is how long the stream may send nothing before a comment.
	keepAlive time.Duration
}

func (r *streamResponse) VisitStreamJobEventsResponse(w http.ResponseWriter) error { return r.serve(w) }
func (r *streamResponse) VisitStreamEventsResponse(w http.ResponseWriter) error    { return r.serve(w) }

func (r *streamResponse) serve(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies that buffer answers (nginx) pass it through
	w.WriteHeader(http.StatusOK)
	sink := &sseSink{w: w, rc: http.NewResponseController(w)}
	// The server's read timeout would end the stream (net/http cancels a request whose
	// connection's read deadline passes); a stream lasts until either side ends it.
	_ = sink.rc.SetReadDeadline(time.Time{})
	if err := sink.write([]byte("retry: " + strconv.Itoa(streamRetry) + "\n\n")); err != nil {
		return nil
	}
	err := r.hub.Stream(r.ctx, r.job, r.from, r.allow, sink, r.keepAlive)
	if errors.Is(err, coordinator.ErrStreamBehind) {
		_ = sink.write([]byte(": the reader fell behind; reconnect with Last-Event-ID\n\n"))
	}
	return nil // what went wrong after the head is no answer any more: the stream ends
}

// sseSink writes Server-Sent Events.
type sseSink struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

func (s *sseSink) write(b []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseSink) Position(pos coordinator.EventPosition) error {
	return s.write([]byte("id: " + pos.String() + "\n\n"))
}

// Event adds e to what the next Flush sends.
func (s *sseSink) Event(e coordinator.HubEvent) error {
	b := append(s.buf, "id: "...)
	b = append(b, e.Pos.String()...)
	b = append(b, "\nevent: checkpoint\ndata: "...)
	b = append(b, e.Data...)
	b = append(b, "\n\n"...)
	s.buf = b
	if len(b) >= 64<<10 {
		return s.Flush()
	}
	return nil
}

// Flush writes the events added, in one write.
func (s *sseSink) Flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	err := s.write(s.buf)
	if cap(s.buf) > 256<<10 {
		s.buf = nil
	} else {
		s.buf = s.buf[:0]
	}
	return err
}

func (s *sseSink) Reset(pos coordinator.EventPosition, job *coordinator.Job) error {
	data := []byte("{}")
	if job != nil {
		var err error
		if data, err = json.Marshal(jobBody(job)); err != nil {
			return err
		}
	}
	return s.write([]byte("id: " + pos.String() + "\nevent: reset\ndata: " + string(data) + "\n\n"))
}

func (s *sseSink) KeepAlive() error { return s.write([]byte(": keep-alive\n\n")) }

// encodeCheckpoint is the full view of cp, as GET .../checkpoints/{id} answers it.
func encodeCheckpoint(cp *coordinator.Checkpoint) ([]byte, error) {
	return appendCheckpoint(nil, cp, false, "", false)
}
