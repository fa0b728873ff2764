package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"
)

// The answers every round of the protocol carries (a checkpoint, a participant's pending
// work) are encoded here by appending to a buffer, byte for byte as writeJSON's
// encoding/json path would encode them (the field order of the generated models,
// omitempty where they have it, times as time.Time.MarshalJSON writes them, strings
// escaped as encoding/json escapes them with HTML escaping off, a trailing newline), and
// committables as they are stored. encoding/json finds the fields by reflection and
// allocates for every time and pointer; an answer is written on every vote, ack and
// long-poll, so that was a good part of the cost of a request. A test holds the two to
// the same bytes.

// appendCheckpoint appends cp's JSON encoding.
func appendCheckpoint(b []byte, cp *Checkpoint) ([]byte, error) {
	var err error
	b = append(b, `{"abort_reason":`...)
	b = appendOptionalString(b, cp.AbortReason)
	if cp.Acks != nil {
		b = append(b, `,"acks":{"done":`...)
		b = strconv.AppendInt(b, int64(cp.Acks.Done), 10)
		b = append(b, `,"missing":`...)
		b = strconv.AppendInt(b, int64(cp.Acks.Missing), 10)
		b = append(b, '}')
	}
	b = append(b, `,"auto_commit":`...)
	b = strconv.AppendBool(b, cp.AutoCommit)
	b = append(b, `,"completed_at":`...)
	if b, err = appendOptionalTime(b, cp.CompletedAt); err != nil {
		return b, err
	}
	b = append(b, `,"created_at":`...)
	if b, err = appendTime(b, cp.CreatedAt); err != nil {
		return b, err
	}
	b = append(b, `,"deadline":`...)
	if b, err = appendTime(b, cp.Deadline); err != nil {
		return b, err
	}
	b = append(b, `,"decided_at":`...)
	if b, err = appendOptionalTime(b, cp.DecidedAt); err != nil {
		return b, err
	}
	b = append(b, `,"decided_by":`...)
	b = appendOptionalString(b, cp.DecidedBy)
	b = append(b, `,"decision_cause":`...)
	if cp.DecisionCause == nil {
		b = append(b, "null"...)
	} else {
		b = appendString(b, string(*cp.DecisionCause))
	}
	b = append(b, `,"id":`...)
	b = strconv.AppendInt(b, cp.Id, 10)
	b = append(b, `,"job":`...)
	b = appendString(b, string(cp.Job))
	b = append(b, `,"participants":`...)
	if cp.Participants == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range cp.Participants {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendParticipant(b, &cp.Participants[i]); err != nil {
				return b, err
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"status":`...)
	b = appendString(b, string(cp.Status))
	if cp.Votes != nil {
		b = append(b, `,"votes":{"abort":`...)
		b = strconv.AppendInt(b, int64(cp.Votes.Abort), 10)
		b = append(b, `,"missing":`...)
		b = strconv.AppendInt(b, int64(cp.Votes.Missing), 10)
		b = append(b, `,"prepared":`...)
		b = strconv.AppendInt(b, int64(cp.Votes.Prepared), 10)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

func appendParticipant(b []byte, p *CheckpointParticipant) ([]byte, error) {
	var err error
	b = append(b, `{"acked_at":`...)
	if b, err = appendOptionalTime(b, p.AckedAt); err != nil {
		return b, err
	}
	b = append(b, `,"acked_by":`...)
	b = appendOptionalString(b, p.AckedBy)
	b = append(b, `,"committables":`...)
	b = appendCommittables(b, p.Committables)
	b = append(b, `,"epoch":`...)
	if p.Epoch == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, *p.Epoch, 10)
	}
	b = append(b, `,"name":`...)
	b = appendString(b, string(p.Name))
	if p.Reason != nil {
		b = append(b, `,"reason":`...)
		b = appendString(b, *p.Reason)
	}
	b = append(b, `,"vote":`...)
	if p.Vote == nil {
		b = append(b, "null"...)
	} else {
		b = appendString(b, string(*p.Vote))
	}
	b = append(b, `,"voted_at":`...)
	if b, err = appendOptionalTime(b, p.VotedAt); err != nil {
		return b, err
	}
	return append(b, '}'), nil
}

// appendPending appends p's JSON encoding.
func appendPending(b []byte, p *Pending) []byte {
	b = append(b, `{"epoch":`...)
	b = strconv.AppendInt(b, p.Epoch, 10)
	b = append(b, `,"items":`...)
	if p.Items == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range p.Items {
			it := &p.Items[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"action":`...)
			b = appendString(b, string(it.Action))
			b = append(b, `,"checkpoint":`...)
			b = strconv.AppendInt(b, it.Checkpoint, 10)
			b = append(b, `,"committables":`...)
			b = appendCommittables(b, it.Committables)
			b = append(b, `,"status":`...)
			b = appendString(b, string(it.Status))
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"job":`...)
	b = appendString(b, string(p.Job))
	b = append(b, `,"participant":`...)
	b = appendString(b, string(p.Participant))
	return append(b, '}')
}

// appendCommittables appends committables as they are stored (compact JSON, checked when
// they were voted), or null when there are none, as encoding/json writes an empty
// json.RawMessage.
func appendCommittables(b []byte, raw Committables) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	return append(b, raw...)
}

func appendOptionalString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendString(b, *s)
}

// errTimeRange is encoding/json's refusal of a time whose year has more than four digits.
var errTimeRange = errors.New("api: a time's year is outside [0,9999]")

func appendOptionalTime(b []byte, t *time.Time) ([]byte, error) {
	if t == nil {
		return append(b, "null"...), nil
	}
	return appendTime(b, *t)
}

// appendTime appends t as time.Time.MarshalJSON does: RFC 3339 with nanoseconds, trailing
// zeros dropped, in quotes; a year outside [0,9999] is an error there too. Answers carry
// UTC times; any other is left to MarshalJSON, with its checks of the offset.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	if t.Location() != time.UTC {
		j, err := t.MarshalJSON()
		return append(b, j...), err
	}
	if y := t.Year(); y < 0 || y > 9999 {
		return b, errTimeRange
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// appendString appends s as a JSON string. The names, statuses and reasons the protocol
// carries are printable ASCII nearly always: those are copied between quotes; anything
// else is left to encoding/json, so that every escape is exactly its own.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return appendStringSlow(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendStringSlow(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
