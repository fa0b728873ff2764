package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestMinimalAnswers(t *testing.T) { onEachStore(t, testMinimalAnswers) }

// Prefer: return=minimal answers a vote, an ack and a read of a checkpoint with one
// participant's entry and the counts; without it, the full view.
func testMinimalAnswers(t *testing.T) {
	b := setup(t)
	b.json(t, "PUT", "/v1/jobs/j", `{"participants":["a","b","c"]}`).ok(t, 201, nil)
	for _, p := range []string{"a", "b", "c"} {
		b.call(t, "POST", "/v1/jobs/j/participants/"+p+"/register", "", "").ok(t, 200, nil)
	}
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	minimal := func(a answer) Checkpoint {
		t.Helper()
		var cp Checkpoint
		if err := json.Unmarshal(a.body, &cp); err != nil || a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
		if a.header.Get("Preference-Applied") != "return=minimal" {
			t.Fatalf("no Preference-Applied: return=minimal in %v", a.header)
		}
		return cp
	}
	cp := minimal(b.json(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/a", `{"epoch":1,"vote":"prepared","committables":[{"t":"a"}]}`,
		"Prefer", "return=minimal"))
	if len(cp.Participants) != 1 || cp.Participants[0].Name != "a" || cp.Votes == nil || *cp.Votes != (VoteCounts{Prepared: 1, Missing: 2}) ||
		cp.Acks == nil || *cp.Acks != (AckCounts{}) {
		t.Fatalf("minimal vote answer: %+v, votes %+v, acks %+v", cp.Participants, cp.Votes, cp.Acks)
	}
	// Without the preference: every participant, no counts.
	full := b.json(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/b", `{"epoch":1,"vote":"prepared"}`)
	var cpFull Checkpoint
	if err := json.Unmarshal(full.body, &cpFull); err != nil || len(cpFull.Participants) != 3 || cpFull.Votes != nil ||
		full.header.Get("Preference-Applied") != "" {
		t.Fatalf("full answer: %s", full.body)
	}
	cp = minimal(b.json(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/c", `{"epoch":1,"vote":"prepared"}`, "Prefer", `respond-async, return="minimal"`))
	if cp.Status != Committing || *cp.Votes != (VoteCounts{Prepared: 3}) || *cp.Acks != (AckCounts{Missing: 3}) {
		t.Fatalf("the deciding vote's minimal answer: %s, votes %+v, acks %+v", cp.Status, cp.Votes, cp.Acks)
	}
	cp = minimal(b.json(t, "PUT", "/v1/jobs/j/checkpoints/1/acks/a", `{"epoch":1}`, "Prefer", "return=minimal"))
	if len(cp.Participants) != 1 || cp.Participants[0].AckedAt == nil || *cp.Acks != (AckCounts{Done: 1, Missing: 2}) {
		t.Fatalf("minimal ack answer: %+v, acks %+v", cp.Participants, cp.Acks)
	}
	// A read keeps the entry of ?participant=, and none without it.
	cp = minimal(b.call(t, "GET", "/v1/jobs/j/checkpoints/1?participant=b", "", "", "Prefer", "return=minimal"))
	if len(cp.Participants) != 1 || cp.Participants[0].Name != "b" || string(cp.Participants[0].Committables) != "[]" {
		t.Fatalf("minimal read for b: %+v", cp.Participants)
	}
	cp = minimal(b.call(t, "GET", "/v1/jobs/j/checkpoints/1", "", "", "Prefer", "return=minimal"))
	if len(cp.Participants) != 0 || cp.Votes == nil {
		t.Fatalf("minimal read without a participant: %+v", cp.Participants)
	}
	// A refusal carries the checkpoint as minimal as the answer would have been.
	r := b.json(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/a", `{"epoch":1,"vote":"abort"}`, "Prefer", "return=minimal")
	var p Problem
	if err := json.Unmarshal(r.body, &p); err != nil || r.status != 409 || p.Checkpoint == nil || len(p.Checkpoint.Participants) != 1 ||
		p.Checkpoint.Participants[0].Name != "a" || p.Checkpoint.Votes == nil || r.header.Get("Preference-Applied") != "return=minimal" {
		t.Fatalf("a conflicting vote's minimal problem: %d %s", r.status, r.body)
	}
	r = b.json(t, "PUT", "/v1/jobs/j/checkpoints/1/votes/a", `{"epoch":1,"vote":"abort"}`)
	if err := json.Unmarshal(r.body, &p); err != nil || p.Checkpoint == nil || len(p.Checkpoint.Participants) != 3 {
		t.Fatalf("a conflicting vote's full problem: %d %s", r.status, r.body)
	}
	// An abort vote is counted as one, and an aborted checkpoint owes acks only of prepared votes.
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	b.json(t, "PUT", "/v1/jobs/j/checkpoints/2/votes/b", `{"epoch":1,"vote":"prepared"}`).ok(t, 200, nil)
	cp = minimal(b.json(t, "PUT", "/v1/jobs/j/checkpoints/2/votes/a", `{"epoch":1,"vote":"abort","reason":"no"}`, "Prefer", "return=minimal"))
	if cp.Status != Aborted || *cp.Votes != (VoteCounts{Prepared: 1, Abort: 1, Missing: 1}) || *cp.Acks != (AckCounts{Missing: 1}) {
		t.Fatalf("the abort vote's minimal answer: %s, votes %+v, acks %+v; want 1 prepared, 1 abort, 1 missing; b's ack owed", cp.Status, cp.Votes, cp.Acks)
	}
	// Another preference alone is ignored.
	if a := b.call(t, "GET", "/v1/jobs/j/checkpoints/1", "", "", "Prefer", "return=representation"); a.header.Get("Preference-Applied") != "" {
		t.Fatalf("return=representation: Preference-Applied %q", a.header.Get("Preference-Applied"))
	}
}

func TestMinimalAnswerLeavesTheCallersCommittablesOut(t *testing.T) {
	onEachStore(t, testMinimalAnswerLeavesTheCallersCommittablesOut)
}

// A minimal answer to a vote or an ack leaves out the committables its caller sent, so
// that its size does not grow with them; the full view, a minimal read naming the
// participant, a refusal's checkpoint and pending still carry them exactly as sent.
func testMinimalAnswerLeavesTheCallersCommittablesOut(t *testing.T) {
	b := setup(t)
	b.job(t, "j", `{"participants":["a","b"]}`, "a", "b")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	big := `[{"txn":"` + strings.Repeat("x", 16<<10) + `"},2]`
	entries := func(a answer) []map[string]json.RawMessage {
		t.Helper()
		var cp struct{ Participants []map[string]json.RawMessage }
		if err := json.Unmarshal(a.body, &cp); err != nil || a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
		return cp.Participants
	}
	vote := b.json(t, "PUT", votePathOf("j", 1, "a"), `{"epoch":1,"vote":"prepared","committables":`+big+`}`, "Prefer", "return=minimal")
	if e := entries(vote); len(e) != 1 || e[0]["committables"] != nil || len(vote.body) > 1024 {
		t.Fatalf("the minimal answer to a's vote: %d bytes, %s; want a's entry without committables", len(vote.body), vote.body)
	}
	b.json(t, "PUT", votePathOf("j", 1, "b"), `{"epoch":1,"vote":"prepared","committables":["b"]}`).ok(t, 200, nil)
	ack := b.json(t, "PUT", ackPathOf("j", 1, "a"), `{"epoch":1}`, "Prefer", "return=minimal")
	if e := entries(ack); len(e) != 1 || e[0]["committables"] != nil || len(ack.body) > 1024 {
		t.Fatalf("the minimal answer to a's ack: %d bytes, %s; want a's entry without committables", len(ack.body), ack.body)
	}
	// The same vote again (idempotent) answers minimal without them too.
	again := b.json(t, "PUT", votePathOf("j", 1, "a"), `{"epoch":1,"vote":"prepared","committables":`+big+`}`, "Prefer", "return=minimal")
	if again.status != 409 && (len(entries(again)) != 1 || entries(again)[0]["committables"] != nil) {
		t.Fatalf("the repeated vote's minimal answer: %s", again.body)
	}
	// Everything else keeps them, byte for byte.
	read := b.call(t, "GET", "/v1/jobs/j/checkpoints/1?participant=a", "", "", "Prefer", "return=minimal")
	if e := entries(read); len(e) != 1 || string(e[0]["committables"]) != big {
		t.Fatalf("a minimal read of a's entry: %.200s", read.body)
	}
	full := b.call(t, "GET", "/v1/jobs/j/checkpoints/1", "", "")
	if e := entries(full); len(e) != 2 || string(e[0]["committables"]) != big || string(e[1]["committables"]) != `["b"]` {
		t.Fatalf("the full view: %.200s", full.body)
	}
	fullVote := b.json(t, "PUT", votePathOf("j", 1, "b"), `{"epoch":1,"vote":"prepared","committables":["b"]}`)
	if e := entries(fullVote); len(e) != 2 || string(e[1]["committables"]) != `["b"]` {
		t.Fatalf("a vote's full answer: %.200s", fullVote.body)
	}
	// A conflicting vote's minimal refusal shows what was recorded.
	conflict := b.json(t, "PUT", votePathOf("j", 1, "b"), `{"epoch":1,"vote":"prepared","committables":["other"]}`, "Prefer", "return=minimal")
	var p struct {
		Status     int
		Checkpoint struct{ Participants []map[string]json.RawMessage }
	}
	if err := json.Unmarshal(conflict.body, &p); err != nil || len(p.Checkpoint.Participants) != 1 || string(p.Checkpoint.Participants[0]["committables"]) != `["b"]` {
		t.Fatalf("a conflicting vote's minimal refusal: %s", conflict.body)
	}
	// After a restart a participant learns what it sent from pending.
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	b.json(t, "PUT", votePathOf("j", 2, "a"), `{"epoch":1,"vote":"prepared","committables":`+big+`}`, "Prefer", "return=minimal").ok(t, 200, nil)
	b.json(t, "PUT", votePathOf("j", 2, "b"), `{"epoch":1,"vote":"abort"}`).ok(t, 200, nil)
	var pending struct{ Items []map[string]json.RawMessage }
	if err := json.Unmarshal(b.call(t, "GET", "/v1/jobs/j/participants/a/pending", "", "").body, &pending); err != nil {
		t.Fatal(err)
	}
	if len(pending.Items) != 1 || string(pending.Items[0]["committables"]) != big {
		t.Fatalf("a's pending after its minimal vote: %d items", len(pending.Items))
	}
}
