package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// referenceMembers lists an object's members with encoding/json's tokenizer: the slow,
// obvious way that objectMembers must agree with.
func referenceMembers(t *testing.T, object []byte) []member {
	dec := json.NewDecoder(bytes.NewReader(object))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		name := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			t.Fatal(err)
		}
		out = append(out, member{name: name, value: value, duplicate: seen[name]})
		seen[name] = true
	}
	return out
}

// FuzzObjectMembers checks the scanner of request bodies against encoding/json: the same
// members, names unescaped, values byte for byte, duplicates marked; and that what
// fitsType accepts without decoding decodes, and what it refuses of the kinds it knows
// does not.
func FuzzObjectMembers(f *testing.F) {
	for _, seed := range []string{
		`{"epoch":1,"vote":"prepared","committables":[{"txn":"a\"}"}],"reason":"x"}`,
		` { "a" : -0 , "b":1.5e3,"c":[1,[2,{"d":"]"}]] ,"e":true, "f":null,"g":"\\"} `,
		`{"vo\u0074e":"abort","vote":"prepared"}`,
		`{"epoch":9223372036854775807,"timeout_ms":9223372036854775808,"max_concurrent_checkpoints":2147483648}`,
		`{"\u00e9\ud83d\ude00":"\u00e9","":{}}`,
		`{}`,
	} {
		f.Add(seed)
	}
	types := []reflect.Type{
		reflect.TypeFor[string](), reflect.TypeFor[*string](), reflect.TypeFor[bool](), reflect.TypeFor[int64](),
		reflect.TypeFor[int32](), reflect.TypeFor[*int](), reflect.TypeFor[uint8](), reflect.TypeFor[json.RawMessage](),
		reflect.TypeFor[VoteKind](), reflect.TypeFor[*Committables](), reflect.TypeFor[[]string](), reflect.TypeFor[float64](),
	}
	f.Fuzz(func(t *testing.T, body string) {
		object := bytes.TrimSpace([]byte(body))
		// checkJSON refuses invalid UTF-8 and invalid JSON before it lists members.
		if !utf8.Valid(object) || !json.Valid(object) || len(object) == 0 || object[0] != '{' {
			return
		}
		got, want := objectMembers(object), referenceMembers(t, object)
		if len(got) != len(want) {
			t.Fatalf("%s: %d members, encoding/json finds %d", body, len(got), len(want))
		}
		for i := range got {
			if got[i].name != want[i].name || !bytes.Equal(got[i].value, want[i].value) || got[i].duplicate != want[i].duplicate {
				t.Fatalf("%s: member %d is %q=%s (duplicate %v), encoding/json: %q=%s (%v)", body, i,
					got[i].name, got[i].value, got[i].duplicate, want[i].name, want[i].value, want[i].duplicate)
			}
			for _, typ := range types {
				fits := fitsType(got[i].value, typ)
				err := json.Unmarshal(got[i].value, reflect.New(typ).Interface())
				if fits && err != nil {
					t.Fatalf("fitsType(%s, %s) = true, but it does not decode: %v", got[i].value, typ, err)
				}
				// (null decodes into anything; checkJSON refuses it before asking fitsType.)
				known := typ.Kind() != reflect.Slice && typ.Kind() != reflect.Float64 && string(got[i].value) != "null"
				if known && !fits && err == nil {
					t.Fatalf("fitsType(%s, %s) = false, but it decodes", got[i].value, typ)
				}
			}
		}
	})
}

// BenchmarkCheckJSON checks a vote's body, as every PUT .../votes/{participant} does.
func BenchmarkCheckJSON(b *testing.B) {
	body := []byte(`{"epoch":3,"vote":"prepared","committables":[{"topic":"orders","partition":0,"txn":"orders-41","offset":1234}]}`)
	model := reflect.TypeFor[VoteRequest]()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checkJSON(body, model); err != nil {
			b.Fatal(err)
		}
	}
}
