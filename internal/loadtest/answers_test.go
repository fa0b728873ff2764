package loadtest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The answers that decode themselves decode as encoding/json does, and refuse what it
// refuses.
func TestAnswersDecodeAsEncodingJSON(t *testing.T) {
	t.Parallel()
	big := `["` + strings.Repeat("x", 20000) + `"]`
	texts := []string{
		`{"job":"j","id":7,"status":"committed","participants":[{"name":"a","epoch":1,"vote":"prepared","committables":` + big + `,"acked_at":null},{"name":"b","vote":null,"committables":null}],"votes":{"prepared":1}}`,
		` { "id" : 3 , "status" : "aborted" , "abort_reason" : "deadline \"passed\" \u00e9" , "participants" : [ ] } `,
		`{"id":1,"status":"preparing","participants":[{"name":"s\u0069nk","vote":"abort","committables":[ 1 , {"a" : "b"} ]}],"abort_reason":null}`,
		`{"id":9223372036854775807,"st\u0061tus":"committing"}`,
		`{"id":2}`, `{}`, `{"participants":null}`,
		`{"id":1.5}`, `{"id":"1"}`, `{"status":1}`, `{"participants":{}}`, `[1]`, `{"id":1`, `nope`,
	}
	for _, text := range texts {
		var got, want checkpointAnswer
		gotErr, wantErr := got.decodeAnswer([]byte(text)), json.Unmarshal([]byte(text), &want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Errorf("checkpoint %.60s: error %v, encoding/json's %v", text, gotErr, wantErr)
		} else if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("checkpoint %.60s: %+v, encoding/json %+v", text, got, want)
		}
		var gotS, wantS statusAnswer
		gotErr, wantErr = gotS.decodeAnswer([]byte(text)), json.Unmarshal([]byte(text), &wantS)
		// The status answer does not look into fields it does not read.
		if strings.Contains(text, `"participants":{}`) {
			continue
		}
		if (gotErr == nil) != (wantErr == nil) {
			t.Errorf("status %.60s: error %v, encoding/json's %v", text, gotErr, wantErr)
		} else if gotErr == nil && gotS != wantS {
			t.Errorf("status %.60s: %+v, encoding/json %+v", text, gotS, wantS)
		}
	}
}
