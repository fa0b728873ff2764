package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// validNameOracle is openapi.yaml's rule for names, as the regular expression that error
// messages quote.
func validNameOracle(s string) bool { return namePattern.MatchString(s) }

// FuzzValidName checks the name rule (path segments and participant lists), written as a
// loop, against its regular expression.
func FuzzValidName(f *testing.F) {
	for _, seed := range []string{"orders", "sink-a", "a.b_c-9", "-a", ".a", "_a", "a b", "é", "a\n", "a\x00",
		strings.Repeat("x", 128), strings.Repeat("x", 129), "", "A", "9", "a/b", "a..b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidName(s), validNameOracle(s); got != want {
			t.Fatalf("ValidName(%q) = %v, want %v", s, got, want)
		}
		err := ValidateName("job", s)
		if (err == nil) != validNameOracle(s) || err != nil && !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("ValidateName(%q) = %v", s, err)
		}
	})
}

// FuzzValidateVote feeds arbitrary votes, as the HTTP layer decodes them, to the vote
// check and the committables' canonical form: no panic; an accepted prepared vote's
// committables are a JSON array whose compact form is stable; an accepted reason fits
// any store.
func FuzzValidateVote(f *testing.F) {
	for _, seed := range []struct {
		epoch        int64
		kind         string
		committables string
		reason       string
	}{
		{1, "prepared", `[{"txn":"a-1"}]`, ""},
		{3, "prepared", "", ""},
		{3, "prepared", "[ 1 , 2.50 , \"<&>\" ]", ""},
		{1, "prepared", "null", ""},
		{1, "prepared", `{"a":1}`, ""},
		{1, "prepared", `[1] [2]`, ""},
		{1, "abort", "", "disk full"},
		{1, "abort", "[]", "x"},
		{0, "prepared", "[]", ""},
		{-1, "maybe", "[", "\x00"},
		{1, "abort", "", strings.Repeat("r", 1025)},
		{1, "abort", "", "\xff"},
	} {
		f.Add(seed.epoch, seed.kind, []byte(seed.committables), seed.reason)
	}
	f.Fuzz(func(t *testing.T, epoch int64, kind string, committables []byte, reason string) {
		v := Vote{Epoch: epoch, Kind: VoteKind(kind), Committables: committables, Reason: reason}
		checked, err := ValidateVoteRequest("job", 1, "p", v)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("ValidateVoteRequest(%+v) = %v, not an invalid_request", v, err)
			}
			return
		}
		if len(committables) > 0 && ValidateVote(v) != nil {
			t.Fatalf("ValidateVoteRequest accepted %+v, which ValidateVote refuses", v)
		}
		if epoch < 0 || (kind != "prepared" && kind != "abort") {
			t.Fatalf("accepted epoch %d, vote %q", epoch, kind)
		}
		if len(reason) > MaxReasonLength || strings.ContainsRune(reason, 0) || !utf8.ValidString(reason) {
			t.Fatalf("accepted reason %q", reason)
		}
		if kind == "abort" {
			if len(committables) > 0 {
				t.Fatalf("accepted committables %q on an abort vote", committables)
			}
			return
		}
		if reason != "" {
			t.Fatalf("accepted a reason on a prepared vote")
		}
		if len(committables) == 0 {
			return
		}
		compact, err := CompactJSON(committables)
		if err != nil {
			t.Fatalf("accepted committables %q that do not compact: %v", committables, err)
		}
		if !bytes.Equal(checked.Committables, compact) {
			t.Fatalf("ValidateVoteRequest returned committables %q, want their compact form %q", checked.Committables, compact)
		}
		var values []json.RawMessage
		if err := json.Unmarshal(compact, &values); err != nil || !bytes.HasPrefix(compact, []byte("[")) {
			t.Fatalf("accepted committables %q are not an array: %s", committables, compact)
		}
		again, err := CompactJSON(compact)
		if err != nil || !bytes.Equal(again, compact) {
			t.Fatalf("compact form of %q is not stable: %s then %s", committables, compact, again)
		}
	})
}

// FuzzValidateJobConfig feeds arbitrary configurations (participants as a comma-separated
// list) to the job check: no panic, and an accepted one keeps every bound of openapi.yaml.
func FuzzValidateJobConfig(f *testing.F) {
	f.Add("sink-a,sink-b", int64(60000), 1)
	f.Add("", int64(100), 1000)
	f.Add("a,a", int64(99), 0)
	f.Add("-a,b", int64(86400001), 1001)
	f.Add("a", int64(-1), -1)
	f.Fuzz(func(t *testing.T, participants string, timeoutMs int64, maxConcurrent int) {
		var names []string
		if participants != "" {
			names = strings.Split(participants, ",")
		}
		cfg := JobConfig{Participants: names, CheckpointTimeout: time.Duration(timeoutMs) * time.Millisecond, MaxConcurrentCheckpoints: maxConcurrent}
		err := ValidateJobConfig(cfg)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("ValidateJobConfig = %v, not an invalid_request", err)
			}
			return
		}
		if len(names) < 1 || len(names) > MaxParticipants || maxConcurrent < 1 || maxConcurrent > MaxMaxConcurrent ||
			cfg.CheckpointTimeout < MinCheckpointTimeout || cfg.CheckpointTimeout > MaxCheckpointTimeout {
			t.Fatalf("accepted %+v", cfg)
		}
		seen := map[string]bool{}
		for _, n := range names {
			if !validNameOracle(n) || seen[n] {
				t.Fatalf("accepted participant %q in %q", n, participants)
			}
			seen[n] = true
		}
	})
}
