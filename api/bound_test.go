package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzBind checks that what the input check decodes of a body it accepted is what
// encoding/json (the generated code) decodes from it, for every operation's body type.
func FuzzBind(f *testing.F) {
	for _, seed := range []string{
		`{"epoch":3,"vote":"prepared","committables":[{"txn":"orders-41"}]}`,
		` { "epoch" : 1 , "vote" : "abort" , "reason" : "disk \"full\" \u00e9\ud800" } `,
		`{"vote":"prepared","epoch":0,"committables":[ 1 , [ ] , "a\\b" ]}`,
		`{"epoch":9223372036854775807,"vote":"x"}`,
		`{"participants":["a","b"],"checkpoint_timeout_ms":1000,"auto_commit":true,"retention_ms":0}`,
		`{"timeout_ms":5}`, `{"reason":"\u0000"}`, `{"name":"n","scopes":["admin"],"expires_in_ms":60000}`,
		`{}`,
	} {
		f.Add(seed)
	}
	models := map[reflect.Type]bool{}
	for _, spec := range requestBodies {
		models[spec.model] = true
	}
	f.Fuzz(func(t *testing.T, body string) {
		if !utf8.ValidString(body) || len(bytes.TrimSpace([]byte(body))) == 0 {
			return
		}
		for model := range models {
			members, err := checkJSON([]byte(body), model)
			if err != nil {
				continue
			}
			got, err := bind([]byte(body), members, model)
			if err != nil {
				t.Fatalf("%s: bind %s: %v", body, model.Name(), err)
			}
			want := reflect.New(model)
			if err := json.Unmarshal([]byte(body), want.Interface()); err != nil {
				t.Fatalf("%s: checked as a %s, but encoding/json refuses it: %v", body, model.Name(), err)
			}
			if !reflect.DeepEqual(got, want.Interface()) {
				t.Fatalf("%s: bind gives %+v, encoding/json %+v", body, reflect.ValueOf(got).Elem(), want.Elem())
			}
		}
	})
}

// A vote's body reaches the strict server as the input check decoded it: the generated
// handler, which would decode it again, is not called.
func TestVoteBodyIsBoundOnce(t *testing.T) {
	t.Parallel()
	pw := &problemWriter{logger: slog.New(slog.DiscardHandler)}
	// The embedded generated handler is nil: calling it panics.
	capture := &captureVotes{}
	h := boundOperations{ssi: capture, pw: pw}
	body := `{"epoch":3,"vote":"prepared","committables":[ {"txn": "orders-41"} ],"reason":"x\ty"}`
	for _, rr := range []rawRequest{{body: body}} {
		r := httptest.NewRequest(http.MethodPut, votePath, nil)
		members, err := checkJSON([]byte(rr.body), reflect.TypeFor[VoteRequest]())
		if err != nil {
			t.Fatal(err)
		}
		bound, err := bind([]byte(rr.body), members, reflect.TypeFor[VoteRequest]())
		if err != nil {
			t.Fatal(err)
		}
		cb := &checkedBody{bound: bound}
		cb.Reset([]byte(rr.body))
		r.Body = cb
		w := httptest.NewRecorder()
		h.PutVote(w, r, "orders", 1, "sink-a", PutVoteParams{})
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if cb.Len() != len(rr.body) {
			t.Errorf("the body was read again: %d of %d bytes left", cb.Len(), len(rr.body))
		}
		var want VoteRequest
		if err := json.Unmarshal([]byte(rr.body), &want); err != nil {
			t.Fatal(err)
		}
		if got := *capture.last.Body; !reflect.DeepEqual(got, want) {
			t.Errorf("the server got %s, encoding/json decodes %s", jsonOf(got), jsonOf(want))
		}
	}
}

// Through the whole HTTP layer, a vote's fields arrive as sent, and the committables
// byte for byte, as large as the body limit allows; a refused body reaches nothing.
func TestVoteBodyThroughTheHandler(t *testing.T) {
	t.Parallel()
	capture := &captureVotes{}
	h := newHandler(capture, Options{MaxBodyBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler), AllowedHosts: testHosts})
	big := `["` + strings.Repeat("x", 64<<10) + `",{"a" : [1, 2]}]`
	for _, body := range []string{
		`{"epoch":3,"vote":"prepared","committables":` + big + `}`,
		`{"epoch":2,"vote":"abort","reason":"disk \"full\" \u00e9"}`,
		`{"vote":"prepared","epoch":1}`,
	} {
		capture.last = nil
		res := rawRequest{method: http.MethodPut, path: votePath, contentType: "application/json", body: body}.do(t, h)
		if res.StatusCode != http.StatusOK {
			got, _ := io.ReadAll(res.Body)
			t.Fatalf("status %d: %s", res.StatusCode, got)
		}
		var want VoteRequest
		if err := json.Unmarshal([]byte(body), &want); err != nil {
			t.Fatal(err)
		}
		if got := *capture.last.Body; !reflect.DeepEqual(got, want) {
			t.Errorf("the server got %.200s, encoding/json decodes %.200s", jsonOf(got), jsonOf(want))
		}
	}
	capture.last = nil
	res := rawRequest{method: http.MethodPut, path: votePath, contentType: "application/json", body: `{"epoch":1,"vote":"prepared","Reason":"x"}`}.do(t, h)
	if res.StatusCode != http.StatusBadRequest || capture.last != nil {
		t.Errorf("a misspelt field: status %d (want 400), reached the server: %v", res.StatusCode, capture.last != nil)
	}
}

// captureVotes keeps the last vote request, and the last ack request, the strict server got.
type captureVotes struct {
	stubServer
	last    *PutVoteRequestObject
	lastAck *PutAckRequestObject
}

func (c *captureVotes) PutAck(_ context.Context, req PutAckRequestObject) (PutAckResponseObject, error) {
	c.lastAck = &req
	return ok(map[string]string{}), nil
}

func (c *captureVotes) PutVote(_ context.Context, req PutVoteRequestObject) (PutVoteResponseObject, error) {
	c.last = &req
	return ok(map[string]string{}), nil
}

func jsonOf(v VoteRequest) string {
	return fmt.Sprintf("epoch=%d vote=%s committables=%s reason=%q", v.Epoch, v.Vote, string(valueOr(v.Committables)), valueOr(v.Reason))
}

func valueOr[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// An ack's body, like a vote's, reaches the strict server as the input check decoded it,
// without the generated handler; through the whole HTTP layer a refused one reaches nothing.
func TestAckBodyIsBoundOnce(t *testing.T) {
	t.Parallel()
	if !requestBodies["PUT /v1/jobs/{job}/checkpoints/{id}/acks/{participant}"].bound {
		t.Fatal("the ack's body spec is not bound: the generated handler decodes it again")
	}
	pw := &problemWriter{logger: slog.New(slog.DiscardHandler)}
	capture := &captureVotes{}
	h := boundOperations{ssi: capture, pw: pw} // the generated handler is nil: calling it panics
	body := ` { "epoch" : 7 } `
	members, err := checkJSON([]byte(body), reflect.TypeFor[AckRequest]())
	if err != nil {
		t.Fatal(err)
	}
	bound, err := bind([]byte(body), members, reflect.TypeFor[AckRequest]())
	if err != nil {
		t.Fatal(err)
	}
	cb := &checkedBody{bound: bound}
	cb.Reset([]byte(body))
	r := httptest.NewRequest(http.MethodPut, ackPathOf("orders", 1, "sink-a"), nil)
	r.Body = cb
	w := httptest.NewRecorder()
	h.PutAck(w, r, "orders", 1, "sink-a", PutAckParams{})
	if w.Code != http.StatusOK || capture.lastAck == nil {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if cb.Len() != len(body) {
		t.Errorf("the body was read again: %d of %d bytes left", cb.Len(), len(body))
	}
	if got := capture.lastAck; got.Body.Epoch != 7 || got.Job != "orders" || got.Id != 1 || got.Participant != "sink-a" {
		t.Errorf("the server got %+v with body %+v", got, got.Body)
	}

	full := newHandler(capture, Options{Logger: slog.New(slog.DiscardHandler), AllowedHosts: testHosts})
	for body, want := range map[string]int{`{"epoch":2}`: http.StatusOK, `{"Epoch":2}`: http.StatusBadRequest, `{"epoch":"2"}`: http.StatusBadRequest} {
		capture.lastAck = nil
		res := rawRequest{method: http.MethodPut, path: ackPathOf("orders", 1, "sink-a"), contentType: "application/json", body: body}.do(t, full)
		switch {
		case res.StatusCode != want:
			got, _ := io.ReadAll(res.Body)
			t.Errorf("%s: status %d, want %d: %s", body, res.StatusCode, want, got)
		case want == http.StatusOK && (capture.lastAck == nil || capture.lastAck.Body.Epoch != 2):
			t.Errorf("%s: the server got %+v", body, capture.lastAck)
		case want != http.StatusOK && capture.lastAck != nil:
			t.Errorf("%s: refused, but reached the server", body)
		}
	}
}

// A body shorter than its Content-Length is refused with 400 and reaches nothing.
func TestBodyLengths(t *testing.T) {
	t.Parallel()
	capture := &captureVotes{}
	h := newHandler(capture, Options{Logger: slog.New(slog.DiscardHandler), AllowedHosts: testHosts})
	r := httptest.NewRequest(http.MethodPut, votePath, strings.NewReader(`{"epoch":1,"vote":"prepared"}`))
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = 100
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest || capture.last != nil {
		t.Errorf("a body shorter than declared: status %d (want 400), reached the server: %v", w.Code, capture.last != nil)
	}
}
