package loadtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/twophase/coordinator/internal/rawjson"
)

// The answers of votes, acks and long-polls carry committables, up to megabytes a round.
// encoding/json would read each answer twice (once to check it, once to decode it), at a
// fraction of the speed of rawjson, and the load tool shares the machine with what it
// measures; so the answers the rounds read most decode themselves: rawjson checks the
// whole text once, then only the fields the checks read are decoded. The tests hold them
// to encoding/json's results.

// answerDecoder is an answer that decodes itself; do uses it instead of json.Unmarshal.
type answerDecoder interface {
	decodeAnswer(text []byte) error
}

var errNotJSON = errors.New("not one JSON value")

func (a *statusAnswer) decodeAnswer(text []byte) error {
	if !rawjson.Valid(text) {
		return errNotJSON
	}
	*a = statusAnswer{}
	return objectFields(text, a.field)
}

// field decodes the member name of a checkpoint, if it is one of a statusAnswer's.
func (a *statusAnswer) field(name string, value []byte) error {
	switch name {
	case "id":
		return decodeInt(value, &a.ID)
	case "status":
		return decodeString(value, &a.Status)
	}
	return nil
}

func (a *checkpointAnswer) decodeAnswer(text []byte) error {
	if !rawjson.Valid(text) {
		return errNotJSON
	}
	*a = checkpointAnswer{}
	return objectFields(text, func(name string, value []byte) error {
		switch name {
		case "abort_reason":
			return json.Unmarshal(value, &a.AbortReason)
		case "votes":
			return json.Unmarshal(value, &a.Votes)
		case "participants":
			if string(value) == "null" {
				return nil
			}
			if value[0] != '[' {
				return fmt.Errorf("participants: %.20s is not an array", value)
			}
			a.Participants = []participantAnswer{}
			for element := range rawjson.Elements(value) {
				var p participantAnswer
				if err := p.decode(element); err != nil {
					return err
				}
				a.Participants = append(a.Participants, p)
			}
		}
		return a.statusAnswer.field(name, value)
	})
}

func (p *participantAnswer) decode(text []byte) error {
	return objectFields(text, func(name string, value []byte) error {
		switch name {
		case "name":
			return decodeString(value, &p.Name)
		case "vote":
			return json.Unmarshal(value, &p.Vote)
		case "committables":
			p.Committables = bytes.Clone(value) // text is a pooled buffer
		}
		return nil
	})
}

// objectFields calls field with each member of object, a valid JSON object, by name (a name
// with escapes is decoded first). Unlike encoding/json it matches names exactly, as the
// coordinator writes them.
func objectFields(object []byte, field func(name string, value []byte) error) error {
	object = bytes.TrimLeft(object, " \t\r\n")
	if object[0] != '{' {
		return fmt.Errorf("%.20s is not an object", object)
	}
	for quoted, value := range rawjson.Members(object) {
		name := string(quoted[1 : len(quoted)-1])
		if bytes.IndexByte(quoted, '\\') >= 0 {
			if err := json.Unmarshal(quoted, &name); err != nil {
				return err
			}
		}
		if err := field(name, value); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func decodeInt(value []byte, into *int64) error {
	n, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return json.Unmarshal(value, into) // its error, or a form ParseInt does not take
	}
	*into = n
	return nil
}

func decodeString(value []byte, into *string) error {
	if value[0] == '"' && bytes.IndexByte(value, '\\') < 0 {
		*into = string(value[1 : len(value)-1])
		return nil
	}
	return json.Unmarshal(value, into)
}
