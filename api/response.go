package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/twophase/coordinator/coordinator"
)

// writeJSON encodes body and writes it with status. HTML escaping is off: encoding/json
// would otherwise rewrite '<', '>' and '&' inside committables (json.RawMessage) as \u003c
// and so on, and committables are returned byte for byte as they were stored.
//
// Committables are written as they are stored, compact JSON, without encoding/json going
// over them again: it validates and compacts every json.RawMessage it encodes, which for
// large committables is most of the cost of an answer. They are swapped for placeholders
// before encoding and put back in place of them after (committablesOut).
//
// A large answer counts against what answers in flight may hold (holdAnswer); with shed,
// it is refused past that bound, and nothing is written.
func writeJSON(w http.ResponseWriter, contentType string, status int, body any) error {
	return writeJSONShed(w, contentType, status, body, false)
}

func writeJSONShed(w http.ResponseWriter, contentType string, status int, body any, shed bool) error {
	if pending, ok := body.(Pending); ok {
		// The answer of every long-poll on pending, encoded without encoding/json (encode.go).
		return writeAppended(w, contentType, status, shed, func(b []byte) ([]byte, error) { return appendPending(b, &pending), nil })
	}
	buf := encodeBuffers.Get().(*bytes.Buffer)
	defer putEncodeBuffer(buf)
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	var out committablesOut
	if err := enc.Encode(out.swap(body)); err != nil {
		return err
	}
	if err := holdAnswer(w, out.size(buf.Len()), shed); err != nil {
		return err
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	return out.write(w, buf.Bytes())
}

// writeAppended writes the answer appendBody appends to a buffer (encode.go), followed by
// a newline as encoding/json ends one; shed as writeJSON's.
func writeAppended(w http.ResponseWriter, contentType string, status int, shed bool, appendBody func([]byte) ([]byte, error)) error {
	buf := encodeBuffers.Get().(*bytes.Buffer)
	defer putEncodeBuffer(buf)
	buf.Reset()
	b, err := appendBody(buf.AvailableBuffer())
	if err != nil {
		return err
	}
	if err := holdAnswer(w, len(b)+1, shed); err != nil {
		return err
	}
	w.Header()["Content-Type"] = contentTypeValue(contentType)
	w.WriteHeader(status)
	b = append(b, '\n')
	_, err = w.Write(b)
	if len(b) > buf.Available() {
		buf.Grow(len(b)) // for the next answer: the pool keeps buffers as large as answers need
	}
	return err
}

// contentTypeValue is a Content-Type header's value, shared by every answer that has it:
// Header.Set would make a new one for each (net/http copies the header it writes, and
// nothing changes a value in place).
func contentTypeValue(contentType string) []string {
	switch contentType {
	case "application/json":
		return jsonContentType
	case "application/problem+json":
		return problemContentType
	}
	return []string{contentType}
}

var (
	jsonContentType    = []string{"application/json"}
	problemContentType = []string{"application/problem+json"}
)

// encodeBuffers holds the buffers answers are encoded into (committables excepted, so a
// few hundred bytes each): a ResponseWriter copies what it is given, so a buffer is free
// again once its answer is written.
var encodeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putEncodeBuffer returns buf to encodeBuffers, unless an unusual answer (a long list) made
// it large: the pool keeps only what ordinary answers need.
func putEncodeBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 64<<10 {
		encodeBuffers.Put(buf)
	}
}

// committablesOut holds the committables of an answer while placeholders stand in for
// them. A placeholder is the JSON string "\u0000" followed by its index: the answer's
// encoding holds it right after the key "committables":, where no string that
// encoding/json escaped can put those bytes (inside a string every quote is escaped).
type committablesOut struct {
	raws [][]byte
}

// size is the length of the answer whose encoding with placeholders is n bytes long.
func (c *committablesOut) size(n int) int {
	for _, raw := range c.raws {
		n += len(raw)
	}
	return n
}

// placeholderPrefix is how a placeholder's value begins, its key included.
var placeholderPrefix = []byte(`"committables":"\u0000`)

// swap returns body with the committables of every checkpoint and pending item in it
// replaced by placeholders, copying what it changes: body itself is left as it is. Bodies
// of other types are returned unchanged. Either way every committables value of an answer
// is swapped, or none is: a body type that holds committables and is not listed here is
// encoded by encoding/json alone, correctly, only slower.
func (c *committablesOut) swap(body any) any {
	switch b := body.(type) {
	case Checkpoint:
		return c.checkpoint(b)
	case *Checkpoint:
		if b != nil {
			cp := c.checkpoint(*b)
			return &cp
		}
	case CheckpointList:
		if b.Items == nil {
			return b
		}
		items := make([]Checkpoint, len(b.Items))
		for i, cp := range b.Items {
			items[i] = c.checkpoint(cp)
		}
		b.Items = items
		return b
	case Pending:
		b.Items = c.items(b.Items)
		return b
	case Registration:
		b.Pending = c.items(b.Pending)
		return b
	case Problem:
		if b.Checkpoint != nil {
			cp := c.checkpoint(*b.Checkpoint)
			b.Checkpoint = &cp
		}
		return b
	}
	return body
}

// placeholder records raw and returns the placeholder that stands for it. Every
// committables value of the answer is swapped, however small: then none of them is in
// the encoding when placeholders are looked for, and every other string in it was escaped
// by encoding/json, so a placeholder's bytes are found nowhere else.
func (c *committablesOut) placeholder(raw Committables) Committables {
	if len(raw) == 0 {
		raw = Committables("null") // as encoding/json writes an empty json.RawMessage
	}
	c.raws = append(c.raws, raw)
	return Committables(`"\u0000` + strconv.Itoa(len(c.raws)-1) + `"`)
}

func (c *committablesOut) checkpoint(cp Checkpoint) Checkpoint {
	if cp.Participants == nil {
		return cp
	}
	ps := make([]CheckpointParticipant, len(cp.Participants))
	for i, p := range cp.Participants {
		p.Committables = c.placeholder(p.Committables)
		ps[i] = p
	}
	cp.Participants = ps
	return cp
}

func (c *committablesOut) items(items []PendingItem) []PendingItem {
	if items == nil {
		return nil
	}
	out := make([]PendingItem, len(items))
	for i, it := range items {
		it.Committables = c.placeholder(it.Committables)
		out[i] = it
	}
	return out
}

// write writes encoded to w with the placeholders replaced by the committables they stand
// for, in the order they were made (encoding/json writes fields and elements in order):
// the pieces between them, then each committables value as it is stored, without building
// the whole answer in memory once more. Every placeholder is found before anything is
// written.
func (c *committablesOut) write(w io.Writer, encoded []byte) error {
	rest := encoded
	for i := range c.raws {
		_, end := c.find(rest, i)
		rest = rest[end:]
	}
	rest = encoded
	for i, raw := range c.raws {
		valueAt, end := c.find(rest, i)
		if _, err := w.Write(rest[:valueAt]); err != nil {
			return err
		}
		if _, err := w.Write(raw); err != nil {
			return err
		}
		rest = rest[end:]
	}
	_, err := w.Write(rest)
	return err
}

// find finds placeholder i, the first in rest: where its value begins (after the
// key) and where it ends (after its closing quote).
func (c *committablesOut) find(rest []byte, i int) (valueAt, end int) {
	at := bytes.Index(rest, placeholderPrefix)
	var digits [20]byte
	want := strconv.AppendInt(digits[:0], int64(i), 10)
	end = at + len(placeholderPrefix) + len(want)
	if at < 0 || end >= len(rest) || !bytes.Equal(rest[at+len(placeholderPrefix):end], want) || rest[end] != '"' {
		// Not where it must be: a bug here, never a client's doing. Fail loudly rather
		// than answer with a placeholder.
		panic(fmt.Sprintf("api: committables placeholder %d not found in the encoded answer", i))
	}
	return at + len(`"committables":`), end + 1
}

// jsonResponse is the success answer of every operation: a body of the generated models,
// written by writeJSON rather than by the generated Visit methods (which escape HTML, see
// writeJSON), or a checkpoint, written from the domain value (appendCheckpoint). It
// implements every operation's response interface.
type jsonResponse struct {
	status   int
	body     any
	location string
	// checkpoint, when set, is the answer instead of body: checkpointBody's view of it, or
	// with minimal minimalBody's for participant.
	checkpoint  *coordinator.Checkpoint
	participant string
	// minimal says the answer applied Prefer: return=minimal.
	minimal bool
	// fromCaller says participant is the caller, answered on its own vote or ack: a minimal
	// answer then leaves its committables out (it sent them).
	fromCaller bool
	// shed says the answer is a read that may be refused when large answers in flight hold
	// their bound (answers.go).
	shed bool
}

func (r jsonResponse) visit(w http.ResponseWriter) error {
	if r.location != "" {
		w.Header().Set("Location", r.location)
	}
	if r.minimal {
		w.Header().Set("Preference-Applied", "return=minimal")
	}
	switch {
	case r.checkpoint != nil:
		return writeAppended(w, "application/json", r.status, r.shed, func(b []byte) ([]byte, error) {
			return appendCheckpoint(b, r.checkpoint, r.minimal, r.participant, r.fromCaller)
		})
	case r.body == nil:
		w.WriteHeader(r.status)
		return nil
	}
	return writeJSONShed(w, "application/json", r.status, r.body, r.shed)
}

func ok(body any) jsonResponse { return jsonResponse{status: http.StatusOK, body: body} }

func (r jsonResponse) VisitGetHealthzResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitGetReadyzResponse(w http.ResponseWriter) error  { return r.visit(w) }
func (r jsonResponse) VisitGetInfoResponse(w http.ResponseWriter) error    { return r.visit(w) }
func (r jsonResponse) VisitListOpenCheckpointsResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitListJobsResponse(w http.ResponseWriter) error  { return r.visit(w) }
func (r jsonResponse) VisitDeleteJobResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitGetJobResponse(w http.ResponseWriter) error    { return r.visit(w) }
func (r jsonResponse) VisitListParticipantsResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitPutJobResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitListCheckpointsResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitPrepareCheckpointResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitGetCheckpointResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitAbortCheckpointResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitPutAckResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitCommitCheckpointResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitPutVoteResponse(w http.ResponseWriter) error    { return r.visit(w) }
func (r jsonResponse) VisitGetPendingResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitRegisterParticipantResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitCreateTokenResponse(w http.ResponseWriter) error        { return r.visit(w) }
func (r jsonResponse) VisitListTokensResponse(w http.ResponseWriter) error         { return r.visit(w) }
func (r jsonResponse) VisitGetTokenResponse(w http.ResponseWriter) error           { return r.visit(w) }
func (r jsonResponse) VisitDeleteTokenResponse(w http.ResponseWriter) error        { return r.visit(w) }
func (r jsonResponse) VisitCompleteCheckpointResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitListAuditResponse(w http.ResponseWriter) error          { return r.visit(w) }
