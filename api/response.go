package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// writeJSON encodes body and writes it with status. HTML escaping is off: encoding/json
// would otherwise rewrite '<', '>' and '&' inside committables (json.RawMessage) as \u003c
// and so on, and committables are returned byte for byte as they were stored.
//
// Committables are written as they are stored, compact JSON, without encoding/json going
// over them again: it validates and compacts every json.RawMessage it encodes, which for
// large committables is most of the cost of an answer. They are swapped for placeholders
// before encoding and put back in place of them after (committablesOut).
func writeJSON(w http.ResponseWriter, contentType string, status int, body any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	var out committablesOut
	if err := enc.Encode(out.swap(body)); err != nil {
		return err
	}
	text := out.putBack(buf.Bytes())
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, err := w.Write(text)
	return err
}

// committablesOut holds the committables of an answer while placeholders stand in for
// them. A placeholder is the JSON string "\u0000" followed by its index: the answer's
// encoding holds it right after the key "committables":, where no string that
// encoding/json escaped can put those bytes (inside a string every quote is escaped).
type committablesOut struct {
	raws [][]byte
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

// putBack replaces the placeholders in encoded by the committables they stand for, in
// the order they were made (encoding/json writes fields and elements in order).
func (c *committablesOut) putBack(encoded []byte) []byte {
	if len(c.raws) == 0 {
		return encoded
	}
	size := len(encoded)
	for _, raw := range c.raws {
		size += len(raw)
	}
	out := make([]byte, 0, size)
	rest := encoded
	for i, raw := range c.raws {
		at := bytes.Index(rest, placeholderPrefix)
		want := strconv.Itoa(i)
		end := at + len(placeholderPrefix) + len(want)
		if at < 0 || end >= len(rest) || string(rest[at+len(placeholderPrefix):end]) != want || rest[end] != '"' {
			// Not where it must be: a bug here, never a client's doing. Fail loudly
			// rather than answer with a placeholder.
			panic(fmt.Sprintf("api: committables placeholder %d not found in the encoded answer", i))
		}
		valueAt := at + len(`"committables":`)
		out = append(out, rest[:valueAt]...)
		out = append(out, raw...)
		rest = rest[end+1:]
	}
	return append(out, rest...)
}

// jsonResponse is the success answer of every operation: a body of the generated models,
// written by writeJSON rather than by the generated Visit methods (which escape HTML, see
// writeJSON). It implements every operation's response interface.
type jsonResponse struct {
	status   int
	body     any
	location string
	// minimal says the answer applied Prefer: return=minimal.
	minimal bool
}

func (r jsonResponse) visit(w http.ResponseWriter) error {
	if r.location != "" {
		w.Header().Set("Location", r.location)
	}
	if r.minimal {
		w.Header().Set("Preference-Applied", "return=minimal")
	}
	if r.body == nil {
		w.WriteHeader(r.status)
		return nil
	}
	return writeJSON(w, "application/json", r.status, r.body)
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
func (r jsonResponse) VisitPutJobResponse(w http.ResponseWriter) error    { return r.visit(w) }
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
