package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twophase/coordinator/coordinator"
)

// The answers every round of the protocol carries (a checkpoint, a participant's pending
// work) are encoded here by appending to a buffer, byte for byte as writeJSON's
// encoding/json path would encode their generated models (the models' field order,
// omitempty where they have it, times as time.Time.MarshalJSON writes them, strings
// escaped as encoding/json escapes them with HTML escaping off, a trailing newline), and
// committables as they are stored. encoding/json finds the fields by reflection and
// allocates for every time and pointer; an answer is written on every vote, ack and
// long-poll, so that was a good part of the cost of a request. A checkpoint is written
// from the domain value itself, without building its model (checkpointBody), which would
// copy every time and optional string to the heap. A test holds each to the bytes
// encoding/json writes for the model.

// appendCheckpoint appends cp's answer: the JSON encoding of checkpointBody(cp), or with
// minimal of minimalBody(cp, participant), written from cp itself, without the model's
// copies of every time and optional string. With minimal and fromCaller (the answer to
// participant's own vote or ack) its entry leaves its committables out.
func appendCheckpoint(b []byte, cp *coordinator.Checkpoint, minimal bool, participant string, fromCaller bool) ([]byte, error) {
	var err error
	var votes VoteCounts
	var acks AckCounts
	if minimal {
		votes, acks = checkpointCounts(cp)
	}
	b = append(b, `{"abort_reason":`...)
	b = appendNullableString(b, cp.AbortReason)
	if minimal {
		b = append(b, `,"acks":{"done":`...)
		b = strconv.AppendInt(b, int64(acks.Done), 10)
		b = append(b, `,"missing":`...)
		b = strconv.AppendInt(b, int64(acks.Missing), 10)
		b = append(b, '}')
	}
	b = append(b, `,"auto_commit":`...)
	b = strconv.AppendBool(b, cp.AutoCommit)
	b = append(b, `,"completed_at":`...)
	if b, err = appendOptionalTime(b, cp.CompletedAt); err != nil {
		return b, err
	}
	b = append(b, `,"created_at":`...)
	if b, err = appendTime(b, cp.CreatedAt.UTC()); err != nil {
		return b, err
	}
	b = append(b, `,"deadline":`...)
	if b, err = appendTime(b, cp.Deadline.UTC()); err != nil {
		return b, err
	}
	b = append(b, `,"decided_at":`...)
	if b, err = appendOptionalTime(b, cp.DecidedAt); err != nil {
		return b, err
	}
	b = append(b, `,"decided_by":`...)
	b = appendNullableString(b, cp.DecidedBy)
	b = append(b, `,"decision_cause":`...)
	b = appendNullableString(b, string(cp.DecisionCause))
	b = append(b, `,"id":`...)
	b = strconv.AppendInt(b, cp.ID, 10)
	b = append(b, `,"job":`...)
	b = appendString(b, cp.Job)
	b = append(b, `,"participants":[`...)
	first := true
	for i := range cp.Participants {
		p := &cp.Participants[i]
		if minimal && p.Name != participant {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		if b, err = appendParticipant(b, p, !(minimal && fromCaller)); err != nil {
			return b, err
		}
	}
	b = append(b, `],"status":`...)
	b = appendString(b, string(cp.Status))
	if minimal {
		b = append(b, `,"votes":{"abort":`...)
		b = strconv.AppendInt(b, int64(votes.Abort), 10)
		b = append(b, `,"missing":`...)
		b = strconv.AppendInt(b, int64(votes.Missing), 10)
		b = append(b, `,"prepared":`...)
		b = strconv.AppendInt(b, int64(votes.Prepared), 10)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// appendParticipant appends the encoding of p's entry in checkpointBody, without its
// committables unless withCommittables.
func appendParticipant(b []byte, p *coordinator.ParticipantState, withCommittables bool) ([]byte, error) {
	var err error
	b = append(b, `{"acked_at":`...)
	if b, err = appendOptionalTime(b, p.AckedAt); err != nil {
		return b, err
	}
	b = append(b, `,"acked_by":`...)
	b = appendNullableString(b, p.AckedBy)
	if withCommittables {
		b = append(b, `,"committables":`...)
		b = append(b, committables(p.Committables)...)
	}
	b = append(b, `,"epoch":`...)
	if p.Vote == "" {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, p.Epoch, 10)
	}
	b = append(b, `,"name":`...)
	b = appendString(b, p.Name)
	if p.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, p.Reason)
	}
	b = append(b, `,"vote":`...)
	b = appendNullableString(b, string(p.Vote))
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

// appendNullableString appends s, or null when it is empty, as optionalString makes it.
func appendNullableString(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendString(b, s)
}

// errTimeRange is encoding/json's refusal of a time whose year has more than four digits.
var errTimeRange = errors.New("api: a time's year is outside [0,9999]")

// appendOptionalTime appends t in UTC, or null when it is nil, as utc makes it.
func appendOptionalTime(b []byte, t *time.Time) ([]byte, error) {
	if t == nil {
		return append(b, "null"...), nil
	}
	return appendTime(b, t.UTC())
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
