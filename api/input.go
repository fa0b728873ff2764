package api

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/internal/rawjson"
)

// This file is the strict input check that runs before the generated code decodes a body.
// encoding/json, which the generated code uses, accepts unknown fields, matches names
// case-insensitively, takes null for zero values, keeps the last of duplicate names and
// replaces invalid UTF-8; rule 10 of docs/protocol.md wants all of that refused with a
// 400, so each body is checked here first, then handed on unchanged.

// bodySpec says what body an operation takes.
type bodySpec struct {
	// model is the generated request body type; nil when the operation takes no body.
	model reflect.Type
	// required is false when the body may be left out.
	required bool
	// bound says that the input check also decodes the body, and an operation of
	// boundOperations takes it from there instead of decoding it again.
	bound bool
}

// requestBodies names, by method and chi route pattern, the operations that take a body,
// as openapi.yaml declares them. Every other operation takes none: it accepts an empty body
// (or {}), refuses any other JSON with 400 and anything not declared JSON with 415.
// TestRequestBodiesCoverRoutes checks this table against the generated routes.
var requestBodies = map[string]bodySpec{
	"PUT /v1/jobs/{job}":                                      {model: reflect.TypeFor[JobConfig](), required: true},
	"POST /v1/jobs/{job}/checkpoints":                         {model: reflect.TypeFor[PrepareRequest]()},
	"POST /v1/jobs/{job}/checkpoints/{id}/abort":              {model: reflect.TypeFor[AbortRequest]()},
	"PUT /v1/jobs/{job}/checkpoints/{id}/acks/{participant}":  {model: reflect.TypeFor[AckRequest](), required: true, bound: true},
	"PUT /v1/jobs/{job}/checkpoints/{id}/votes/{participant}": {model: reflect.TypeFor[VoteRequest](), required: true, bound: true},
	"POST /v1/tokens":                                         {model: reflect.TypeFor[TokenRequest](), required: true},
	"POST /v1/jobs/{job}/checkpoints/{id}/commit":             {model: reflect.TypeFor[CommitRequest]()},
	"POST /v1/jobs/{job}/checkpoints/{id}/complete":           {model: reflect.TypeFor[CompleteRequest]()},
}

// bodySpecFor returns the body spec of the route r was matched to.
func bodySpecFor(r *http.Request) bodySpec {
	return requestBodies[r.Method+" "+routePattern(r)]
}

// routePattern is the chi pattern of the route r was matched to, "" before routing.
func routePattern(r *http.Request) string {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		return rctx.RoutePattern()
	}
	return ""
}

// queryParams names, by method and chi route pattern, the generated parameters type of
// each operation that declares query parameters in openapi.yaml: the form tags of its
// fields are their names (its header parameters have none). Every other operation takes
// no query parameter at all. TestQueryParamsMatchSpec checks this table against
// openapi.yaml.
var queryParams = map[string]reflect.Type{
	"GET /v1/jobs":                        reflect.TypeFor[ListJobsParams](),
	"GET /v1/jobs/{job}/checkpoints":      reflect.TypeFor[ListCheckpointsParams](),
	"GET /v1/jobs/{job}/checkpoints/{id}": reflect.TypeFor[GetCheckpointParams](),
	"GET /v1/checkpoints":                 reflect.TypeFor[ListOpenCheckpointsParams](),
	"GET /v1/tokens":                      reflect.TypeFor[ListTokensParams](),
	"GET /v1/audit":                       reflect.TypeFor[ListAuditParams](),
	"GET /v1/jobs/{job}/participants/{participant}/pending":   reflect.TypeFor[GetPendingParams](),
	"PUT /v1/jobs/{job}/checkpoints/{id}/votes/{participant}": reflect.TypeFor[PutVoteParams](),
}

// queryNames is queryParams with the names read out of the types.
var queryNames = func() map[string][]string {
	out := make(map[string][]string, len(queryParams))
	for route, params := range queryParams {
		out[route] = queryNamesOf(params)
	}
	return out
}()

// queryNamesOf lists the query parameters of a generated parameters type, in the order
// of openapi.yaml.
func queryNamesOf(params reflect.Type) []string {
	var names []string
	for i := range params.NumField() {
		if name, _, _ := strings.Cut(params.Field(i).Tag.Get("form"), ","); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// checkQuery refuses a query string that does not parse and any query parameter the
// operation does not declare: the generated code reads the parameters it knows and would
// ignore the others, so a misspelt limit would silently be the default, and a parameter
// not (yet) implemented would seem to work. A HEAD request takes what its GET takes.
func checkQuery(r *http.Request) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return &requestError{code: codeInvalidRequest, detail: "the query string does not parse: " + err.Error()}
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	declared := queryNames[method+" "+routePattern(r)]
	takes := "which takes none"
	if len(declared) > 0 {
		takes = "which takes " + strings.Join(declared, ", ")
	}
	var problems fieldProblems
	for _, name := range slices.Sorted(maps.Keys(values)) {
		switch {
		case slices.Contains(declared, name):
		case name == "":
			problems.add("query", "has a parameter without a name")
		default:
			problems.add(name, "is not a query parameter of this operation, %s%s", takes, queryCaseHint(name, declared))
		}
	}
	if len(problems) > 0 {
		return invalidFields(problems)
	}
	return nil
}

// queryCaseHint suggests the parameter a misspelt name probably meant, when only the case
// differs.
func queryCaseHint(name string, declared []string) string {
	for _, known := range declared {
		if strings.EqualFold(known, name) {
			return fmt.Sprintf(" (names are case-sensitive: did you mean %q?)", known)
		}
	}
	return ""
}

// checkedBody is a request body as the input check read it, handed on to the generated
// code, with the model value it decoded when its operation's spec is bound (nil
// otherwise).
type checkedBody struct {
	bytes.Reader
	bound any
}

func (*checkedBody) Close() error { return nil }

// checkBody reads r's body (at most max bytes) and checks it against spec: declared as
// JSON, valid UTF-8, exactly one JSON object, only the model's fields, each spelled
// exactly, at most once, not null, of the right type, and the required ones present. It
// returns the body as read, to be handed on, and when spec is bound, what it decodes to
// (a pointer to a new spec.model; nil when the body was left out).
func checkBody(w http.ResponseWriter, r *http.Request, max int64, spec bodySpec) ([]byte, any, error) {
	if r.ContentLength > max {
		return nil, nil, &http.MaxBytesError{Limit: max}
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, max), r.ContentLength)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, nil, err
		}
		return nil, nil, &requestError{code: codeInvalidRequest, detail: "the request body could not be read: " + err.Error()}
	}
	if len(body) > 0 {
		if err := checkMediaType(r.Header.Get("Content-Type")); err != nil {
			return nil, nil, err
		}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if spec.required {
			return nil, nil, &requestError{code: codeInvalidRequest, detail: "a JSON body is required (Content-Type: application/json)"}
		}
		return body, nil, nil
	}
	members, err := checkJSON(body, spec.model)
	if err != nil {
		return nil, nil, err
	}
	if !spec.bound {
		return body, nil, nil
	}
	bound, err := bind(body, members, spec.model)
	if err != nil {
		return nil, nil, err
	}
	return body, bound, nil
}

// readBody reads a request body of size bytes (its Content-Length; -1 when unknown, as
// with chunked transfer) in one buffer of that size: at a few kilobytes and more, reading
// into a growing buffer costs a read call and a copy per step.
func readBody(body io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(body)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(body, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// checkMediaType accepts application/json and application/*+json, with parameters; a
// charset, if given, must be UTF-8, the only encoding of JSON (RFC 8259).
func checkMediaType(contentType string) error {
	unsupported := func(why string) error {
		return &requestError{code: codeUnsupportedMediaType, detail: why + ": send the body as application/json (curl --json)"}
	}
	if contentType == "" {
		return unsupported("the body has no Content-Type")
	}
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return unsupported(fmt.Sprintf("the Content-Type %q does not parse", contentType))
	}
	sub, ok := strings.CutPrefix(mediaType, "application/")
	if !ok || (sub != "json" && !strings.HasSuffix(sub, "+json")) {
		return unsupported(fmt.Sprintf("the body is %s, not JSON", mediaType))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return unsupported(fmt.Sprintf("the charset %q is not UTF-8", cs))
	}
	return nil
}

// checkJSON checks body, known to be non-blank, against model (nil: no fields at all), and
// returns its members.
func checkJSON(body []byte, model reflect.Type) ([]member, error) {
	if !utf8.Valid(body) {
		return nil, &requestError{code: codeInvalidRequest, detail: "the body is not valid UTF-8"}
	}
	var value []byte
	if rawjson.Valid(body) {
		// Exactly one JSON value: rawjson.Valid, as json.Valid, allows only white space around it.
		value = bytes.TrimSpace(body)
	} else {
		// Decode it to say what is wrong, and where.
		dec := json.NewDecoder(bytes.NewReader(body))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, &requestError{code: codeInvalidRequest, detail: "the body is not valid JSON: " + jsonSyntaxMessage(err)}
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, &requestError{code: codeInvalidRequest, detail: fmt.Sprintf("the body must be exactly one JSON value, but more follows at byte %d", dec.InputOffset())}
		}
		value = raw
	}
	if value[0] != '{' {
		return nil, &requestError{code: codeInvalidRequest, detail: "the body must be a JSON object"}
	}
	members := objectMembers(value)

	spec := modelSpecOf(model)
	fields := spec.fields
	var problems fieldProblems
	for _, m := range members {
		f, ok := fields[m.name]
		switch {
		case m.duplicate:
			problems.add(m.name, "appears more than once")
		case !ok && model == nil:
			problems.add(m.name, "is not allowed: this operation takes no body (send none, or {})")
		case !ok:
			problems.add(m.name, "is not a field of %s%s", model.Name(), caseHint(m.name, fields))
		case bytes.Equal(m.value, []byte("null")):
			problems.add(m.name, "must not be null: leave the field out instead")
		case fitsType(m.value, f.typ):
		default:
			if err := json.Unmarshal(m.value, reflect.New(f.typ).Interface()); err != nil {
				problems.add(m.name, "must be %s%s", describeType(f.typ), gotWhat(err))
			}
		}
	}
	for _, name := range spec.required {
		if !slices.ContainsFunc(members, func(m member) bool { return m.name == name }) {
			problems.add(name, "is required")
		}
	}
	if len(problems) > 0 {
		return nil, invalidFields(problems)
	}
	return members, nil
}

// bind decodes body, which checkJSON accepted with these members, into a new value of
// model, and returns a pointer to it: what encoding/json decodes from the body, without
// reading it all again. A JSON field (json.RawMessage: committables) takes its member's
// bytes as they are, copied only when they are under half of the body, so that a small
// value does not keep a large body alive.
func bind(body []byte, members []member, model reflect.Type) (any, error) {
	v := reflect.New(model)
	fields := modelSpecOf(model).fields
	for _, m := range members {
		dst := v.Elem().Field(fields[m.name].index) // checkJSON: a field of model, once
		if dst.Kind() == reflect.Pointer {
			dst.Set(reflect.New(dst.Type().Elem()))
			dst = dst.Elem()
		}
		switch {
		case dst.Type() == rawMessageType:
			raw := m.value
			if 2*len(raw) < len(body) {
				raw = bytes.Clone(raw)
			}
			dst.SetBytes(raw)
		case plainString(m.value, dst.Type()):
			dst.SetString(string(m.value[1 : len(m.value)-1]))
		default:
			if err := json.Unmarshal(m.value, dst.Addr().Interface()); err != nil {
				return nil, &requestError{code: codeInvalidRequest, detail: fmt.Sprintf("%s: %v", m.name, err)}
			}
		}
	}
	return v.Interface(), nil
}

// plainString reports whether value is a JSON string without escapes, for a field of
// type t that decodes it as it is.
func plainString(value []byte, t reflect.Type) bool {
	return t.Kind() == reflect.String && value[0] == '"' && bytes.IndexByte(value, '\\') < 0 &&
		!reflect.PointerTo(t).Implements(jsonUnmarshalerType) && !reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// member is one name/value pair of a JSON object, in the order of the text.
type member struct {
	name      string
	value     []byte
	duplicate bool
}

// objectMembers lists the members of object, a valid JSON object (rawjson.Valid), marking
// repeated names. It only finds where each value begins and ends: the values are checked
// against their field's type afterwards.
func objectMembers(object []byte) []member {
	var out []member
	for quoted, value := range rawjson.Members(object) {
		name := string(quoted[1 : len(quoted)-1])
		if bytes.IndexByte(quoted, '\\') >= 0 {
			_ = json.Unmarshal(quoted, &name) // valid: cannot fail
		}
		dup := slices.ContainsFunc(out, func(m member) bool { return m.name == name })
		out = append(out, member{name: name, value: value, duplicate: dup})
	}
	return out
}

// fitsType reports whether value, a valid JSON value, decodes into t without error, for
// the types it knows to check without decoding (strings, integers, booleans, raw JSON);
// false means it does not know, or it does not fit: decode to find out, and why.
func fitsType(value []byte, t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType {
		return true
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return false
	}
	switch t.Kind() {
	case reflect.String:
		return value[0] == '"'
	case reflect.Bool:
		return string(value) == "true" || string(value) == "false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		_, err := strconv.ParseInt(string(value), 10, t.Bits())
		return err == nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		_, err := strconv.ParseUint(string(value), 10, t.Bits())
		return err == nil
	}
	return false
}

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// modelSpec is what checkJSON needs of a generated body type, worked out once per type.
type modelSpec struct {
	fields   map[string]modelField
	required []string // sorted, for stable messages
}

var modelSpecs sync.Map // reflect.Type -> *modelSpec

func modelSpecOf(model reflect.Type) *modelSpec {
	if model == nil {
		return &modelSpec{}
	}
	if s, ok := modelSpecs.Load(model); ok {
		return s.(*modelSpec)
	}
	fields := modelFields(model)
	s, _ := modelSpecs.LoadOrStore(model, &modelSpec{fields: fields, required: sortedRequired(fields)})
	return s.(*modelSpec)
}

// modelField is one field of a generated body type.
type modelField struct {
	typ      reflect.Type
	index    int // in the struct
	required bool
}

// modelFields maps the JSON names of model's fields to their types. The generated code
// marks optional fields with omitempty, so a field without it is required.
func modelFields(model reflect.Type) map[string]modelField {
	out := map[string]modelField{}
	if model == nil {
		return out
	}
	for i := range model.NumField() {
		sf := model.Field(i)
		tag := sf.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = modelField{typ: sf.Type, index: i, required: !strings.Contains(opts, "omitempty")}
	}
	return out
}

func sortedRequired(fields map[string]modelField) []string {
	var out []string
	for name, f := range fields {
		if f.required {
			out = append(out, name)
		}
	}
	slices.Sort(out) // stable messages
	return out
}

// caseHint suggests the field a misspelt name probably meant, when only the case differs.
func caseHint(name string, fields map[string]modelField) string {
	for known := range fields {
		if strings.EqualFold(known, name) {
			return fmt.Sprintf(" (names are case-sensitive: did you mean %q?)", known)
		}
	}
	return ""
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// describeType says in words what JSON a field takes.
func describeType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType {
		return "JSON"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(describeType(t.Elem()), "an "), "a ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.Kind().String()
}

// gotWhat says what a type error found instead, e.g. ", got string".
func gotWhat(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Value != "" {
		return ", got " + te.Value
	}
	return ""
}

func jsonSyntaxMessage(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "it ends too early"
	}
	return err.Error()
}

// fieldProblems collects field errors in the order they were found.
type fieldProblems []coordinator.FieldError

func (p *fieldProblems) add(field, format string, args ...any) {
	*p = append(*p, coordinator.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}
