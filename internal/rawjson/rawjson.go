// Package rawjson checks and compacts JSON text in one pass over its bytes.
//
// It accepts exactly what encoding/json's Valid accepts (RFC 8259's grammar, one value with
// only white space around it, at most 10,000 levels of nesting, bytes of 0x80 and above in
// strings taken as they are) and compacts as encoding/json's Compact does (white space
// outside strings removed, nothing else changed), at several times their speed: strings,
// which are most of the bytes of committables, are skipped a byte at a time with a table
// instead of a call per byte. The tests compare both functions with encoding/json's on
// every input the fuzzer finds.
//
// It exists for the request path, where a vote's committables (up to megabytes) are
// checked and stored as the bytes that were sent; it has no dependency but the standard
// library.
package rawjson

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
)

// maxDepth is encoding/json's limit of nested arrays and objects.
const maxDepth = 10000

// plain marks the bytes that may appear in a string as they are: not the quote, not the
// backslash, not a control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// space marks JSON's white space.
var space = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// SyntaxError is what Compact returns for text that is not one JSON value: the offset of
// the byte where it stopped being one (len of the text when it ended too soon).
type SyntaxError struct {
	Offset int
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("rawjson: invalid JSON at byte %d", e.Offset)
}

// errTooDeep is not a position in the text but a limit.
var errTooDeep = errors.New("rawjson: more than 10000 nested arrays and objects")

// Valid reports whether b is exactly one JSON value, with only white space around it.
func Valid(b []byte) bool {
	_, err := check(b)
	return err == nil
}

// Compact returns b without its insignificant white space, or an error if b is not exactly
// one JSON value. When b has no such white space (the usual case for text a program
// wrote), the result is b itself, not a copy.
func Compact(b []byte) ([]byte, error) {
	firstSpace, err := check(b)
	if err != nil {
		return nil, err
	}
	if firstSpace < 0 {
		return b, nil
	}
	out := make([]byte, firstSpace, len(b)-1)
	copy(out, b[:firstSpace])
	for i := firstSpace; i < len(b); i++ {
		c := b[i]
		switch {
		case space[c]:
		case c == '"':
			end := stringEnd(b, i)
			out = append(out, b[i:end]...)
			i = end - 1
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

// ValueEnd returns the index just past the JSON value that begins at b[i], in text that
// Valid accepts. On other text its answer means nothing, and it may panic.
func ValueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; ; j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
	}
	// A number, true, false or null: up to the next delimiter.
	j := i
	for j < len(b) && !space[b[j]] && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	return j
}

// Members yields each member of object, a JSON object that Valid accepts (white space
// around it or inside is allowed), in the order of the text: its name as written (the
// quoted string, escapes as they are) and its value's text.
func Members(object []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func(name, value []byte) bool) {
		i := skipSpace(object, 0) + 1 // past '{'
		for {
			i = skipSpace(object, i)
			if object[i] == '}' {
				return
			}
			end := stringEnd(object, i)
			name := object[i:end]
			i = skipSpace(object, skipSpace(object, end)+1) // past ':'
			vEnd := ValueEnd(object, i)
			if !yield(name, object[i:vEnd]) {
				return
			}
			i = skipSpace(object, vEnd)
			if object[i] == ',' {
				i++
			}
		}
	}
}

// Elements yields the text of each element of array, a JSON array that Valid accepts.
func Elements(array []byte) iter.Seq[[]byte] {
	return func(yield func(value []byte) bool) {
		i := skipSpace(array, 0) + 1 // past '['
		for {
			i = skipSpace(array, i)
			if array[i] == ']' {
				return
			}
			end := ValueEnd(array, i)
			if !yield(array[i:end]) {
				return
			}
			i = skipSpace(array, end)
			if array[i] == ',' {
				i++
			}
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && space[b[i]] {
		i++
	}
	return i
}

// stringEnd returns the index just past the string that begins at b[i], in valid text.
func stringEnd(b []byte, i int) int {
	n := len(b)
	for i++; ; i++ {
		for i+8 <= n && plain8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// check validates b and returns the index of its first insignificant white space, -1 if
// it has none.
func check(b []byte) (firstSpace int, err error) {
	firstSpace = -1
	n := len(b)
	// open holds the arrays ('[') and objects ('{') that enclose the current position.
	var stackBuf [32]byte
	open := stackBuf[:0]
	i := 0
	skip := func() {
		if i < n && space[b[i]] {
			if firstSpace < 0 {
				firstSpace = i
			}
			for i++; i < n && space[b[i]]; i++ {
			}
		}
	}
	fail := func() (int, error) { return -1, &SyntaxError{Offset: i} }

	skip()
	for {
		// A value begins at b[i].
		if i >= n {
			return fail()
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			open = append(open, c)
			if len(open) > maxDepth {
				return -1, errTooDeep
			}
			i++
			skip()
			if i < n && b[i] == c+2 { // '{'+2 is '}', '['+2 is ']'
				open = open[:len(open)-1]
				i++
				break
			}
			if c == '{' {
				if !member(b, &i, skip) {
					return fail()
				}
			}
			continue
		case c == '"':
			end, ok := scanString(b, i)
			if !ok {
				i = end
				return fail()
			}
			i = end
		case c == '-' || ('0' <= c && c <= '9'):
			end, ok := scanNumber(b, i)
			i = end
			if !ok {
				return fail()
			}
		case c == 't':
			if !literal(b, &i, "true") {
				return fail()
			}
		case c == 'f':
			if !literal(b, &i, "false") {
				return fail()
			}
		case c == 'n':
			if !literal(b, &i, "null") {
				return fail()
			}
		default:
			return fail()
		}
		// A value ended before b[i]: close what it closes, then find the next value.
		for {
			skip()
			if len(open) == 0 {
				if i != n {
					return fail()
				}
				return firstSpace, nil
			}
			if i >= n {
				return fail()
			}
			top := open[len(open)-1]
			if b[i] == top+2 {
				open = open[:len(open)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return fail()
			}
			i++
			skip()
			if top == '{' && !member(b, &i, skip) {
				return fail()
			}
			break
		}
	}
}

// member reads an object member's name and colon at b[*i], leaving *i at its value.
func member(b []byte, i *int, skip func()) bool {
	if *i >= len(b) || b[*i] != '"' {
		return false
	}
	end, ok := scanString(b, *i)
	*i = end
	if !ok {
		return false
	}
	skip()
	if *i >= len(b) || b[*i] != ':' {
		return false
	}
	*i++
	skip()
	return true
}

// scanString returns the index just past the string that begins at b[i] (a quote), and
// whether it is one; when it is not, the index of the byte that is wrong.
func scanString(b []byte, i int) (int, bool) {
	n := len(b)
	for i++; i < n; i++ {
		// Eight bytes at a time while none of them ends the run of plain bytes.
		for i+8 <= n && plain8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= n {
			break
		}
		c := b[i]
		if plain[c] {
			continue
		}
		switch c {
		case '"':
			return i + 1, true
		case '\\':
			i++
			if i >= n {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 0; k < 4; k++ {
					i++
					if i >= n || !isHex(b[i]) {
						return i, false
					}
				}
			default:
				return i, false
			}
		default: // a control character
			return i, false
		}
	}
	return i, false
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plain8 reports whether the eight bytes of x are all plain: no byte below 0x20, no quote,
// no backslash. (x - ones*k) & ^x & highs is not zero exactly when some byte of x is
// below k (for k up to 0x80); a byte equal to q is a zero byte of x ^ ones*q.
func plain8(x uint64) bool {
	lt := (x - ones*0x20) & ^x
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	return (lt|(q-ones)&^q|(bs-ones)&^bs)&highs == 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanNumber returns the index just past the number that begins at b[i], and whether it is
// one (RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?).
func scanNumber(b []byte, i int) (int, bool) {
	n := len(b)
	digit := func(k int) bool { return k < n && '0' <= b[k] && b[k] <= '9' }
	if b[i] == '-' {
		i++
	}
	switch {
	case i < n && b[i] == '0':
		i++
	case digit(i):
		for i++; digit(i); i++ {
		}
	default:
		return i, false
	}
	if i < n && b[i] == '.' {
		i++
		if !digit(i) {
			return i, false
		}
		for i++; digit(i); i++ {
		}
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digit(i) {
			return i, false
		}
		for i++; digit(i); i++ {
		}
	}
	return i, true
}

// literal reads word (true, false or null) at b[*i].
func literal(b []byte, i *int, word string) bool {
	if len(b)-*i < len(word) || string(b[*i:*i+len(word)]) != word {
		return false
	}
	*i += len(word)
	return true
}
