package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// invalidFields returns the fields an invalid_request names, in order, or fails when err is not
// one (nil for nil).
func invalidFields(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInvalidRequest || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("err = %v, want an invalid_request *Error", err)
	}
	if len(e.Fields) == 0 {
		t.Fatalf("invalid_request without fields: %v", err)
	}
	if e.Checkpoint != nil {
		t.Errorf("invalid_request carries a checkpoint")
	}
	var fields []string
	for _, f := range e.Fields {
		if f.Message == "" {
			t.Errorf("field %s without a message", f.Field)
		}
		fields = append(fields, f.Field)
	}
	for other, sentinel := range sentinelsByCode {
		if other != CodeInvalidRequest && errors.Is(err, sentinel) {
			t.Errorf("invalid_request matches Err of %s", other)
		}
	}
	return fields
}

func checkInvalidFields(t *testing.T, err error, want ...string) {
	t.Helper()
	if got := invalidFields(t, err); !slices.Equal(got, want) {
		t.Errorf("invalid fields %q (%v), want %q", got, err, want)
	}
}

func TestValidName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"Z", true},
		{"0", true},
		{"orders", true},
		{"kafka-sink-0", true},
		{"pg_sink.1", true},
		{"A.b-C_d9", true},
		{"a..", true},
		{"9-_.", true},
		{strings.Repeat("a", 128), true},
		{"x" + strings.Repeat("-", 127), true},
		{strings.Repeat("a", 129), false},
		{strings.Repeat("a", 1000), false},
		{"", false},
		{"-a", false},
		{".a", false},
		{"_a", false},
		{".", false},
		{"..", false},
		{"a b", false},
		{" a", false},
		{"a ", false},
		{"a/b", false},
		{"a\\b", false},
		{"a:b", false},
		{"a%2Fb", false},
		{"a\n", false},
		{"a\x00", false},
		{"\x00", false},
		{"é", false},
		{"café", false},
		{"日本", false},
		{"ａ", false}, // fullwidth a
		{"a\u200b", false},
		{"ß" + strings.Repeat("a", 126), false},
		{strings.Repeat("é", 64), false}, // 128 bytes, not ASCII
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%q", c.name), func(t *testing.T) {
			t.Parallel()
			if got := ValidName(c.name); got != c.ok {
				t.Errorf("ValidName = %v, want %v", got, c.ok)
			}
			err := ValidateName("participant", c.name)
			if c.ok {
				if err != nil {
					t.Errorf("ValidateName: %v", err)
				}
				return
			}
			checkInvalidFields(t, err, "participant")
		})
	}
}

func validJobConfig() JobConfig {
	return JobConfig{
		Participants:             []string{"sink-a", "sink-b"},
		CheckpointTimeout:        DefaultCheckpointTimeout,
		MaxConcurrentCheckpoints: DefaultMaxConcurrent,
		AutoCommit:               true,
	}
}

func numberedNames(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func TestValidateJobConfig(t *testing.T) {
	t.Parallel()
	long := func(n int) []string {
		out := numberedNames(n, "")
		for i := range out {
			out[i] = (out[i] + strings.Repeat("x", 128))[:128]
		}
		return out
	}
	cases := []struct {
		name   string
		change func(*JobConfig)
		fields []string
	}{
		{"valid", func(*JobConfig) {}, nil},
		{"auto_commit off", func(c *JobConfig) { c.AutoCommit = false }, nil},
		{"one participant", func(c *JobConfig) { c.Participants = []string{"a"} }, nil},
		{"1000 participants", func(c *JobConfig) { c.Participants = numberedNames(1000, "p-") }, nil},
		{"1000 participants with the longest names", func(c *JobConfig) { c.Participants = long(1000) }, nil},
		{"1001 participants", func(c *JobConfig) { c.Participants = numberedNames(1001, "p-") }, []string{"participants"}},
		{"no participants", func(c *JobConfig) { c.Participants = []string{} }, []string{"participants"}},
		{"nil participants", func(c *JobConfig) { c.Participants = nil }, []string{"participants"}},
		{"duplicate", func(c *JobConfig) { c.Participants = []string{"a", "b", "a"} }, []string{"participants[2]"}},
		{"duplicate twice", func(c *JobConfig) { c.Participants = []string{"a", "a", "a"} }, []string{"participants[1]", "participants[2]"}},
		{"names differing in case are distinct", func(c *JobConfig) { c.Participants = []string{"a", "A"} }, nil},
		{"invalid name", func(c *JobConfig) { c.Participants = []string{"a", "b c"} }, []string{"participants[1]"}},
		{"empty name", func(c *JobConfig) { c.Participants = []string{""} }, []string{"participants[0]"}},
		{"129-character name", func(c *JobConfig) { c.Participants = []string{strings.Repeat("a", 129)} }, []string{"participants[0]"}},
		{"unicode name", func(c *JobConfig) { c.Participants = []string{"sink-ä"} }, []string{"participants[0]"}},
		{"timeout 100 ms", func(c *JobConfig) { c.CheckpointTimeout = 100 * time.Millisecond }, nil},
		{"timeout 86400000 ms", func(c *JobConfig) { c.CheckpointTimeout = 86400000 * time.Millisecond }, nil},
		{"timeout 99 ms", func(c *JobConfig) { c.CheckpointTimeout = 99 * time.Millisecond }, []string{"checkpoint_timeout_ms"}},
		{"timeout just under 100 ms", func(c *JobConfig) { c.CheckpointTimeout = 100*time.Millisecond - time.Nanosecond }, []string{"checkpoint_timeout_ms"}},
		{"timeout 86400001 ms", func(c *JobConfig) { c.CheckpointTimeout = 86400001 * time.Millisecond }, []string{"checkpoint_timeout_ms"}},
		{"timeout just over a day", func(c *JobConfig) { c.CheckpointTimeout = 24*time.Hour + time.Nanosecond }, []string{"checkpoint_timeout_ms"}},
		// The default is the caller's to fill in: zero is not a valid timeout here.
		{"timeout 0", func(c *JobConfig) { c.CheckpointTimeout = 0 }, []string{"checkpoint_timeout_ms"}},
		{"timeout negative", func(c *JobConfig) { c.CheckpointTimeout = -time.Second }, []string{"checkpoint_timeout_ms"}},
		{"max concurrent 1", func(c *JobConfig) { c.MaxConcurrentCheckpoints = 1 }, nil},
		{"max concurrent 1000", func(c *JobConfig) { c.MaxConcurrentCheckpoints = 1000 }, nil},
		{"max concurrent 0", func(c *JobConfig) { c.MaxConcurrentCheckpoints = 0 }, []string{"max_concurrent_checkpoints"}},
		{"max concurrent -1", func(c *JobConfig) { c.MaxConcurrentCheckpoints = -1 }, []string{"max_concurrent_checkpoints"}},
		{"max concurrent 1001", func(c *JobConfig) { c.MaxConcurrentCheckpoints = 1001 }, []string{"max_concurrent_checkpoints"}},
		{"everything wrong at once, each named", func(c *JobConfig) {
			*c = JobConfig{Participants: []string{"-x", "-x"}, CheckpointTimeout: time.Millisecond, MaxConcurrentCheckpoints: 5000}
		}, []string{"participants[0]", "participants[1]", "participants[1]", "checkpoint_timeout_ms", "max_concurrent_checkpoints"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := validJobConfig()
			c.change(&cfg)
			before := slices.Clone(cfg.Participants)
			err := ValidateJobConfig(cfg)
			if c.fields == nil {
				if err != nil {
					t.Fatalf("ValidateJobConfig: %v", err)
				}
			} else {
				checkInvalidFields(t, err, c.fields...)
			}
			if !slices.Equal(before, cfg.Participants) {
				t.Errorf("ValidateJobConfig changed the participants")
			}
		})
	}
}

func TestValidateVote(t *testing.T) {
	t.Parallel()
	prepared := func(epoch int64, committables string) Vote {
		v := Vote{Epoch: epoch, Kind: VotePrepared}
		if committables != "" {
			v.Committables = json.RawMessage(committables)
		}
		return v
	}
	cases := []struct {
		name   string
		vote   Vote
		fields []string
	}{
		{"prepared", prepared(1, `[{"txn":"a-1"}]`), nil},
		{"prepared without committables", prepared(1, ""), nil},
		{"prepared with empty committables", prepared(7, `[]`), nil},
		{"prepared with spaced array", prepared(1, " [ 1 , \"x\" ]\n"), nil},
		{"prepared with any JSON values", prepared(1, `[1,"s",true,null,{"a":[{}]},[]]`), nil},
		{"prepared with a huge epoch", prepared(1<<62, `[]`), nil},
		{"abort", Vote{Epoch: 1, Kind: VoteAbort}, nil},
		{"abort with reason", Vote{Epoch: 1, Kind: VoteAbort, Reason: "disk full"}, nil},
		{"abort with a 1024-byte reason", Vote{Epoch: 1, Kind: VoteAbort, Reason: strings.Repeat("r", 1024)}, nil},
		{"abort with a 1024-byte unicode reason", Vote{Epoch: 1, Kind: VoteAbort, Reason: strings.Repeat("é", 512)}, nil},
		{"abort with a 1025-byte reason", Vote{Epoch: 1, Kind: VoteAbort, Reason: strings.Repeat("r", 1025)}, []string{"reason"}},
		{"abort with a 1026-byte unicode reason", Vote{Epoch: 1, Kind: VoteAbort, Reason: strings.Repeat("é", 513)}, []string{"reason"}},
		{"abort with NUL in the reason", Vote{Epoch: 1, Kind: VoteAbort, Reason: "disk\x00full"}, []string{"reason"}},
		{"abort with invalid UTF-8 in the reason", Vote{Epoch: 1, Kind: VoteAbort, Reason: "disk \xff full"}, []string{"reason"}},
		{"abort with a reason too long and with NUL", Vote{Epoch: 1, Kind: VoteAbort, Reason: strings.Repeat("\x00", 1025)}, []string{"reason", "reason"}},
		{"abort with other control characters in the reason", Vote{Epoch: 1, Kind: VoteAbort, Reason: "line\nbreak\ttab"}, nil},
		{"epoch 0 (never registered: the rules refuse it, not the validation)", prepared(0, `[]`), nil},
		{"epoch -1", Vote{Epoch: -1, Kind: VoteAbort}, []string{"epoch"}},
		{"no kind", Vote{Epoch: 1}, []string{"vote"}},
		{"unknown kind", Vote{Epoch: 1, Kind: "commit"}, []string{"vote"}},
		{"kind in capitals", Vote{Epoch: 1, Kind: "PREPARED"}, []string{"vote"}},
		{"prepared with a reason", Vote{Epoch: 1, Kind: VotePrepared, Reason: "why"}, []string{"reason"}},
		{"prepared with a long reason", Vote{Epoch: 1, Kind: VotePrepared, Reason: strings.Repeat("r", 1025)}, []string{"reason", "reason"}},
		{"committables an object", prepared(1, `{"txn":"a"}`), []string{"committables"}},
		{"committables a string", prepared(1, `"txn"`), []string{"committables"}},
		{"committables a number", prepared(1, `1`), []string{"committables"}},
		{"committables null", prepared(1, `null`), []string{"committables"}},
		{"committables spaced null", prepared(1, " null "), []string{"committables"}},
		{"committables not JSON", prepared(1, `[1,`), []string{"committables"}},
		{"committables two arrays", prepared(1, `[][]`), []string{"committables"}},
		{"abort with committables", Vote{Epoch: 1, Kind: VoteAbort, Committables: json.RawMessage(`[]`)}, []string{"committables"}},
		{"everything wrong at once", Vote{Epoch: -1, Kind: VoteAbort, Committables: json.RawMessage(`[1]`), Reason: strings.Repeat("r", 2000)}, []string{"epoch", "committables", "reason"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateVote(c.vote)
			if c.fields == nil {
				if err != nil {
					t.Fatalf("ValidateVote: %v", err)
				}
				return
			}
			checkInvalidFields(t, err, c.fields...)
		})
	}
}

func TestValidateTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		timeout time.Duration
		ok      bool
	}{
		{0, true}, // the job's timeout
		{100 * time.Millisecond, true},
		{24 * time.Hour, true},
		{99 * time.Millisecond, false},
		{24*time.Hour + time.Millisecond, false},
		{-time.Millisecond, false},
	} {
		t.Run(c.timeout.String(), func(t *testing.T) {
			t.Parallel()
			var f fieldErrors
			validateTimeout(&f, c.timeout)
			if c.ok {
				if err := f.err(); err != nil {
					t.Fatalf("validateTimeout: %v", err)
				}
				return
			}
			checkInvalidFields(t, f.err(), "timeout_ms")
		})
	}
}

func TestValidIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key string
		ok  bool
	}{
		{"k", true},
		{"order 41 / retry #2 ~!", true},
		{strings.Repeat("k", 255), true},
		{strings.Repeat("k", 256), false},
		{"", false},
		{"tab\there", false},
		{"new\nline", false},
		{"del\x7f", false},
		{"clé", false},
	} {
		t.Run(fmt.Sprintf("%q", c.key), func(t *testing.T) {
			t.Parallel()
			if got := validIdempotencyKey(c.key); got != c.ok {
				t.Errorf("validIdempotencyKey = %v, want %v", got, c.ok)
			}
		})
	}
}

func TestCompactJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{`[]`, `[]`},
		{" [ 1 , {\"a\" : [ true , null ] } ,\n\"x y\" ] ", `[1,{"a":[true,null]},"x y"]`},
		{`[{"b":1,"a":2}]`, `[{"b":1,"a":2}]`}, // same values, same order: keys are not sorted
		{`["\u00e9"]`, `["\u00e9"]`},
	} {
		got, err := CompactJSON([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("CompactJSON(%q) = %q, %v, want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{``, `[1,`, `{"a"}`, `[1]]`} {
		if got, err := CompactJSON([]byte(in)); err == nil {
			t.Errorf("CompactJSON(%q) = %q, want an error", in, got)
		}
	}
}
