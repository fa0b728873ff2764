package api

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// plainJSON is what writeJSON wrote before it put committables in place itself: the body
// through encoding/json, HTML escaping off.
func plainJSON(t *rapid.T, body any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(body); err != nil {
		t.Fatalf("encode: %v", err)
	}
	return buf.Bytes()
}

// committablesGen makes stored committables: compact JSON arrays, small and large, with
// strings that look like placeholders, HTML characters and line separators.
func committablesGen() *rapid.Generator[Committables] {
	return rapid.Custom(func(t *rapid.T) Committables {
		strs := []string{"a", "<&>", `"committables":"\u0000`, "\u0000", "\u2028", strings.Repeat("x", 300), `\"`, "é"}
		n := rapid.IntRange(0, 6).Draw(t, "n")
		values := make([]any, n)
		for i := range values {
			switch rapid.IntRange(0, 3).Draw(t, "kind") {
			case 0:
				values[i] = rapid.SampledFrom(strs).Draw(t, "s")
			case 1:
				values[i] = map[string]any{"committables": rapid.SampledFrom(strs).Draw(t, "s"), "n": i}
			case 2:
				values[i] = []any{i, nil, true, rapid.SampledFrom(strs).Draw(t, "s")}
			default:
				values[i] = rapid.Float64().Draw(t, "f")
			}
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(values); err != nil {
			t.Fatalf("encode committables: %v", err)
		}
		return Committables(bytes.TrimSpace(buf.Bytes()))
	})
}

func checkpointGen() *rapid.Generator[Checkpoint] {
	return rapid.Custom(func(t *rapid.T) Checkpoint {
		reason := rapid.SampledFrom([]string{"", `"committables":"\u0000`, "\x00x", "disk full"}).Draw(t, "reason")
		cp := Checkpoint{Job: "j", Id: rapid.Int64Range(1, 1000).Draw(t, "id"), Status: Preparing,
			CreatedAt: time.Unix(1700000000, 0).UTC(), Deadline: time.Unix(1700000010, 0).UTC()}
		if reason != "" {
			cp.AbortReason = &reason
		}
		for i := range rapid.IntRange(0, 5).Draw(t, "participants") {
			p := CheckpointParticipant{Name: "p-" + string(rune('a'+i)), Committables: committablesGen().Draw(t, "committables")}
			if reason != "" {
				p.Reason = &reason
			}
			cp.Participants = append(cp.Participants, p)
		}
		return cp
	})
}

// Every answer writeJSON puts committables into is byte for byte what encoding/json
// writes, whatever the committables hold (placeholder look-alikes included), and the body
// given to it is left as it was.
func TestWriteJSONPutsCommittablesBackExactly(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cp := checkpointGen().Draw(t, "checkpoint")
		cp2 := checkpointGen().Draw(t, "checkpoint2")
		items := []PendingItem{
			{Action: PendingActionCommit, Checkpoint: 1, Committables: committablesGen().Draw(t, "item"), Status: Committing},
			{Action: PendingActionVote, Checkpoint: 2, Status: Preparing}, // no committables: null
		}
		detail := rapid.SampledFrom([]string{"x", `"committables":"\u00000"`}).Draw(t, "detail")
		bodies := []any{
			cp, &cp,
			CheckpointList{Items: []Checkpoint{cp, cp2}},
			Pending{Job: "j", Participant: "p", Epoch: 1, Items: items},
			Registration{Job: "j", Participant: "p", Epoch: 1, Pending: items},
			Problem{Code: "already_decided", Detail: &detail, Checkpoint: &cp2},
			JobList{},
		}
		for _, body := range bodies {
			want := plainJSON(t, body)
			w := httptest.NewRecorder()
			if err := writeJSON(w, "application/json", 200, body); err != nil {
				t.Fatalf("writeJSON(%T): %v", body, err)
			}
			if got := w.Body.Bytes(); !bytes.Equal(got, want) {
				t.Fatalf("writeJSON(%T) wrote\n%s\nwant\n%s", body, got, want)
			}
			if again := plainJSON(t, body); !bytes.Equal(again, want) {
				t.Fatalf("writeJSON(%T) changed the body it was given:\n%s\nthen\n%s", body, want, again)
			}
		}
	})
}
