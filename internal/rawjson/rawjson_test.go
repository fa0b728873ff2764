package rawjson

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
)

// samples are texts on each side of every rule of the grammar.
var samples = []string{
	``, ` `, `0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `1e07`, `-1.5e+30`, `2x`,
	`true`, `tru`, `truex`, `false`, `null`, `nul`, `NaN`, `"`, `""`, `"a`, `"\"`, `"\\"`, `"\/"`,
	`"\u00e9"`, `"\u00G9"`, `"\u12"`, `"\x"`, "\"\t\"", "\"\x7f\"", "\"\xff\xfe\"", `"é"`,
	`[]`, `[`, `]`, `[1,]`, `[,1]`, `[1 2]`, `[1,2]`, ` [ 1 , "a" , [ ] , { } ] `, `{}`, `{`,
	`{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{"a":1,"b":[true,false,null]}`,
	`{ "a" : { "b" : [ 1 , 2 ] } }`, `{1:2}`, `{"a":1}}`, `[[]]]`, `[{]`, `{[}`, "\n\r\t[1]\n",
	`1 2`, `"a" "b"`, `[1]x`, "[\"x\"]\x00", `{"a":"b","a":"c"}`, `[-]`, `[1e5,0.0,-0E-0]`,
}

func TestAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range samples {
		same(t, []byte(s))
	}
}

func TestDepthLimit(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		arrays := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		objects := strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
		for _, s := range []string{arrays, objects} {
			if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
				t.Errorf("depth %d: Valid = %v, encoding/json says %v", depth, got, want)
			}
		}
	}
	if !Valid([]byte(strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth))) {
		t.Errorf("%d levels refused", maxDepth)
	}
	if Valid([]byte(strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1))) {
		t.Errorf("%d levels accepted", maxDepth+1)
	}
}

func TestCompactReturnsCompactTextItself(t *testing.T) {
	t.Parallel()
	in := []byte(`["orders-41",{"txn":"a b","n":[1,2]}]`)
	out, err := Compact(in)
	if err != nil {
		t.Fatal(err)
	}
	if &out[0] != &in[0] || len(out) != len(in) {
		t.Errorf("compact text was copied")
	}
	spaced := []byte(` [ "a b" ,	{ "c" : 1 } ]` + "\n")
	out, err = Compact(spaced)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `["a b",{"c":1}]` {
		t.Errorf("Compact = %s", out)
	}
	if string(spaced) != ` [ "a b" ,	{ "c" : 1 } ]`+"\n" {
		t.Errorf("Compact changed its input: %q", spaced)
	}
}

func TestSyntaxErrorOffset(t *testing.T) {
	t.Parallel()
	for s, offset := range map[string]int{`[1,]`: 3, `{"a" 1}`: 5, `[1`: 2, `"\q"`: 2, "\"a\x01\"": 2} {
		_, err := Compact([]byte(s))
		se, ok := err.(*SyntaxError)
		if !ok || se.Offset != offset {
			t.Errorf("Compact(%q) error %v, want offset %d", s, err, offset)
		}
	}
}

// same fails t unless Valid and Compact agree with encoding/json on b.
func same(t *testing.T, b []byte) {
	t.Helper()
	orig := bytes.Clone(b)
	want := json.Valid(b)
	if got := Valid(b); got != want {
		t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
	}
	var wantOut bytes.Buffer
	wantErr := json.Compact(&wantOut, b)
	out, err := Compact(b)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("Compact(%q) error %v, encoding/json's %v", b, err, wantErr)
	}
	if err == nil && !bytes.Equal(out, wantOut.Bytes()) {
		t.Fatalf("Compact(%q) = %q, encoding/json's %q", b, out, wantOut.Bytes())
	}
	if !bytes.Equal(b, orig) {
		t.Fatalf("input changed: %q became %q", orig, b)
	}
	if want {
		sameParts(t, b)
	}
}

// sameParts fails t unless Members, Elements and ValueEnd find in b, a valid value, what
// encoding/json finds.
func sameParts(t *testing.T, b []byte) {
	t.Helper()
	v := bytes.TrimLeft(b, " \t\r\n")
	if end := ValueEnd(v, 0); !bytes.Equal(bytes.TrimRight(v, " \t\r\n"), v[:end]) {
		t.Fatalf("ValueEnd(%q) = %d", v, end)
	}
	switch v[0] {
	case '[':
		var want []json.RawMessage
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		var got [][]byte
		for e := range Elements(b) {
			got = append(got, e)
		}
		if len(got) != len(want) {
			t.Fatalf("Elements(%q): %d, encoding/json %d", b, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("Elements(%q)[%d] = %q, encoding/json %q", b, i, got[i], want[i])
			}
		}
	case '{':
		dec := json.NewDecoder(bytes.NewReader(b))
		if _, err := dec.Token(); err != nil {
			t.Fatal(err)
		}
		for name, value := range Members(b) {
			if !dec.More() {
				t.Fatalf("Members(%q): more than encoding/json finds", b)
			}
			tok, _ := dec.Token()
			var wantName string
			if err := json.Unmarshal(name, &wantName); err != nil || wantName != tok.(string) {
				t.Fatalf("Members(%q): name %s, encoding/json %q", b, name, tok)
			}
			var wantValue json.RawMessage
			if err := dec.Decode(&wantValue); err != nil || !bytes.Equal(value, wantValue) {
				t.Fatalf("Members(%q): value %q, encoding/json %q", b, value, wantValue)
			}
		}
		if dec.More() {
			t.Fatalf("Members(%q): fewer than encoding/json finds", b)
		}
	}
}

func FuzzAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range samples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { same(t, b) })
}

func BenchmarkCompact16KiB(b *testing.B) {
	body := []byte(`["` + strings.Repeat("x", 16380) + `"]`)
	b.Run("rawjson", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := Compact(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := json.Compact(&buf, body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestPlain8(t *testing.T) {
	t.Parallel()
	for _, fill := range []byte{'a', 0x20, 0x80, 0xff, 0x21, 0x5d} {
		for c := 0; c < 256; c++ {
			for p := 0; p < 8; p++ {
				w := bytes.Repeat([]byte{fill}, 8)
				w[p] = byte(c)
				want := true
				for _, x := range w {
					want = want && plain[x]
				}
				if got := plain8(binary.LittleEndian.Uint64(w)); got != want {
					t.Fatalf("plain8(%q) = %v, want %v", w, got, want)
				}
			}
		}
	}
	// Strings long enough for the eight-byte steps, with the byte that ends them at every
	// offset.
	for n := 0; n < 40; n++ {
		for _, end := range []string{`"`, `\"x"`, `\u00e9"`, "\x1f\"", `\q"`} {
			same(t, []byte(`["`+strings.Repeat("é", n/2)+strings.Repeat("x", n%2)+end+`]`))
		}
	}
}
