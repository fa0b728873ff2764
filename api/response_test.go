package api

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/twophase/coordinator/coordinator"
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

// anyString draws the strings an answer may carry: plain names, and the ones encoding/json
// escapes (quotes, backslashes, control characters, HTML characters, line separators,
// invalid UTF-8, other Unicode).
func anyString(t *rapid.T, label string) string {
	return rapid.OneOf(
		rapid.SampledFrom([]string{"", "sink-0", "a\"b", `back\slash`, "tab\tnew\nline", "\x00\x1f", "<&>", "\u2028\u2029", "é€😀", "\xff\xfe", "bad \xc3"}),
		rapid.String(),
		rapid.StringMatching(`[a-zA-Z0-9._:-]{1,40}`),
	).Draw(t, label)
}

func anyTime(t *rapid.T, label string) time.Time {
	sec := rapid.Int64Range(-62135596800, 253402300799).Draw(t, label+" s") // years 1 to 9999
	nsec := rapid.SampledFrom([]int64{0, 1, 100, 120000000, 999999999, rapid.Int64Range(0, 999999999).Draw(t, label+" ns")}).Draw(t, label+" n")
	at := time.Unix(sec, nsec).UTC()
	if rapid.IntRange(0, 9).Draw(t, label+" zone") == 0 {
		at = at.In(time.FixedZone("x", rapid.IntRange(-14*3600, 14*3600).Draw(t, label+" offset")))
	}
	return at
}

func optional[T any](t *rapid.T, label string, draw func(*rapid.T, string) T) *T {
	if rapid.Bool().Draw(t, label+" set") {
		v := draw(t, label)
		return &v
	}
	return nil
}

// The answers writeJSON encodes itself (a checkpoint, full or minimal; pending work) are
// byte for byte what encoding/json writes for the same value, for every field set or not,
// whatever its strings and times hold.
func TestAnswersEncodedAsEncodingJSONWould(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cp := &coordinator.Checkpoint{
			Job: anyString(t, "job"), ID: rapid.Int64().Draw(t, "id"), Status: coordinator.Status(anyString(t, "status")),
			AutoCommit: rapid.Bool().Draw(t, "auto"), CreatedAt: anyTime(t, "created"), Deadline: anyTime(t, "deadline"),
			DecidedAt: optional(t, "decided", anyTime), CompletedAt: optional(t, "completed", anyTime),
			AbortReason: anyString(t, "reason"), DecidedBy: anyString(t, "by"), DecisionCause: coordinator.Cause(anyString(t, "cause")),
		}
		votes := []coordinator.VoteKind{"", coordinator.VotePrepared, coordinator.VoteAbort}
		for range rapid.IntRange(0, 4).Draw(t, "participants") {
			p := coordinator.ParticipantState{Name: anyString(t, "name"), Epoch: rapid.Int64().Draw(t, "epoch"),
				Vote: rapid.SampledFrom(votes).Draw(t, "vote"), Reason: anyString(t, "vote reason"),
				VotedAt: optional(t, "voted", anyTime), AckedAt: optional(t, "acked", anyTime), AckedBy: anyString(t, "acked by")}
			if rapid.Bool().Draw(t, "has committables") {
				p.Committables = json.RawMessage(committablesGen().Draw(t, "committables"))
			}
			cp.Participants = append(cp.Participants, p)
		}
		participant := anyString(t, "asker")
		if len(cp.Participants) > 0 && rapid.Bool().Draw(t, "asker is one") {
			participant = cp.Participants[rapid.IntRange(0, len(cp.Participants)-1).Draw(t, "asker i")].Name
		}
		for _, minimal := range []bool{false, true} {
			model := checkpointBody(cp)
			if minimal {
				model = minimalBody(cp, participant)
			}
			want, wantErr := encodingJSON(model)
			got, err := appendCheckpoint(nil, cp, minimal, participant, false)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("appendCheckpoint (minimal %v): error %v; encoding/json's: %v", minimal, err, wantErr)
			}
			if err == nil && !bytes.Equal(append(got, '\n'), want) {
				t.Fatalf("appendCheckpoint (minimal %v) wrote\n%q\nencoding/json writes for the model\n%q", minimal, got, want)
			}
			// The answer to the participant's own vote or ack: minimal, it is the same but
			// for its entries' committables; full, the same.
			fromCaller, err := appendCheckpoint(nil, cp, minimal, participant, true)
			if err != nil {
				continue
			}
			if minimal {
				for _, p := range cp.Participants {
					if p.Name == participant {
						got = bytes.Replace(got, []byte(`,"committables":`+string(committables(p.Committables))), nil, 1)
					}
				}
			}
			if !bytes.Equal(fromCaller, got) {
				t.Fatalf("appendCheckpoint (minimal %v) to the caller wrote\n%q\nwant\n%q", minimal, fromCaller, got)
			}
		}

		pending := Pending{Job: anyString(t, "pjob"), Participant: anyString(t, "participant"), Epoch: rapid.Int64().Draw(t, "pepoch")}
		if rapid.Bool().Draw(t, "items set") {
			pending.Items = []PendingItem{}
			for range rapid.IntRange(0, 3).Draw(t, "items") {
				it := PendingItem{Action: PendingAction(anyString(t, "action")), Checkpoint: rapid.Int64().Draw(t, "item id"),
					Status: CheckpointStatus(anyString(t, "item status"))}
				if rapid.Bool().Draw(t, "item committables") {
					it.Committables = committablesGen().Draw(t, "committables")
				}
				pending.Items = append(pending.Items, it)
			}
		}
		want, err := encodingJSON(pending)
		if err != nil {
			t.Fatal(err)
		}
		if got := append(appendPending(nil, &pending), '\n'); !bytes.Equal(got, want) {
			t.Fatalf("appendPending wrote\n%q\nencoding/json writes\n%q", got, want)
		}
	})
}

// encodingJSON is body as encoding/json writes it, HTML escaping off.
func encodingJSON(body any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(body)
	return buf.Bytes(), err
}

// A time encoding/json refuses (a year past 9999) is refused here too: the answer is an
// error, never a malformed body.
func TestAnswerWithAnUnencodableTimeIsAnError(t *testing.T) {
	t.Parallel()
	cp := &coordinator.Checkpoint{Job: "j", ID: 1, CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := json.Marshal(checkpointBody(cp)); err == nil {
		t.Fatal("encoding/json encodes the year 10000; the test's premise is wrong")
	}
	if _, err := appendCheckpoint(nil, cp, false, "", false); err == nil {
		t.Fatal("appendCheckpoint encoded the year 10000; want an error")
	}
	w := httptest.NewRecorder()
	if err := (jsonResponse{status: 200, checkpoint: cp}).visit(w); err == nil {
		t.Fatalf("the answer was %d %q; want an error", w.Code, w.Body.String())
	}
}
