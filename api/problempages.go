package api

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"sync"
)

// problemPages serves the pages that problem types name (GET /problems and
// GET /problems/{code}): small HTML documents without script, made from problemTable.
// Like /healthz they are outside /v1, and they are to stay readable without
// authentication when access control comes (docs/protocol.md, rule 11): a client that was
// refused must be able to read why. server embeds it.
type problemPages struct{}

func (problemPages) ListProblemTypes(context.Context, ListProblemTypesRequestObject) (ListProblemTypesResponseObject, error) {
	return htmlResponse(renderedProblemPages().list), nil
}

func (problemPages) GetProblemType(_ context.Context, req GetProblemTypeRequestObject) (GetProblemTypeResponseObject, error) {
	page, ok := renderedProblemPages().byCode[req.Code]
	if !ok {
		return nil, &requestError{code: codeNotFound, detail: fmt.Sprintf("no problem type %q: GET /problems lists them", req.Code)}
	}
	return htmlResponse(page), nil
}

// htmlResponse is a problem page, answered as it was rendered.
type htmlResponse []byte

func (h htmlResponse) visit(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(h)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(h)
	return err
}

func (h htmlResponse) VisitListProblemTypesResponse(w http.ResponseWriter) error { return h.visit(w) }
func (h htmlResponse) VisitGetProblemTypeResponse(w http.ResponseWriter) error   { return h.visit(w) }

// problemPageSet is every page, rendered once.
type problemPageSet struct {
	list   []byte
	byCode map[string][]byte
}

var renderedProblemPages = sync.OnceValue(func() problemPageSet {
	pages := make([]problemPage, len(problemTable))
	for i, k := range problemTable {
		pages[i] = problemPage{
			Code: k.code, Status: k.status, StatusText: http.StatusText(k.status), Title: k.title,
			Type: problemTypeBase + k.code, When: inlineHTML(k.when), Retry: inlineHTML(k.retry), Action: inlineHTML(k.action),
		}
	}
	set := problemPageSet{list: mustRender("list", pages), byCode: map[string][]byte{}}
	for _, p := range pages {
		set.byCode[p.Code] = mustRender("page", p)
	}
	return set
})

// problemPage is what the templates show of a problemKind.
type problemPage struct {
	Code, StatusText, Title, Type string
	Status                        int
	When, Retry, Action           template.HTML
}

func mustRender(name string, data any) []byte {
	var b bytes.Buffer
	if err := problemTemplates.ExecuteTemplate(&b, name, data); err != nil {
		panic(fmt.Sprintf("api: render problem page %s: %v", name, err))
	}
	return b.Bytes()
}

// The links are relative ("problems/fenced" from /problems, "../problems" from a page), so
// that the pages also link right behind a proxy that moves them under a prefix.
var problemTemplates = template.Must(template.New("").Parse(`
{{- define "head" -}}
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.}}</title>
</head>
<body>
{{end -}}

{{- define "list" -}}
{{template "head" "Problem types of the coordinator"}}<h1>Problem types</h1>
<p>Every error the coordinator answers is an RFC 9457 <code>application/problem+json</code>
document with a stable <code>code</code>. Its <code>type</code> is <code>/problems/{code}</code>,
relative to the URL of the request: the page about the code on the coordinator that answered.</p>
<table>
<thead><tr><th>code</th><th>status</th><th>title</th></tr></thead>
<tbody>
{{range .}}<tr><td><a href="problems/{{.Code}}"><code>{{.Code}}</code></a></td><td>{{.Status}}</td><td>{{.Title}}</td></tr>
{{end}}</tbody>
</table>
</body>
</html>
{{end -}}

{{- define "page" -}}
{{template "head" (printf "%s: %s" .Code .Title)}}<p><a href="../problems">All problem types</a></p>
<h1><code>{{.Code}}</code>: {{.Title}}</h1>
<p>HTTP status <strong>{{.Status}} {{.StatusText}}</strong>; problem type <code>{{.Type}}</code>.</p>
<h2>When</h2>
<p>{{.When}}</p>
<h2>Retry?</h2>
<p>{{.Retry}}</p>
<h2>What to do</h2>
<p>{{.Action}}</p>
</body>
</html>
{{end -}}
`))

// inlineHTML escapes s as the text of an element and sets its backquoted spans as code.
// Quotes are left as they are, for whoever reads the page with curl.
func inlineHTML(s string) template.HTML {
	var b strings.Builder
	for i, part := range strings.Split(s, "`") {
		if i%2 == 1 {
			b.WriteString("<code>" + textEscaper.Replace(part) + "</code>")
		} else {
			b.WriteString(textEscaper.Replace(part))
		}
	}
	return template.HTML(b.String())
}

var textEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// ProblemTypesMarkdown is docs/problems.md: the text of the problem pages, as markdown. go
// generate writes it (internal/problemsdoc), and a test checks that the file is current.
func ProblemTypesMarkdown() []byte {
	var b bytes.Buffer
	b.WriteString("# Problem types\n\n" +
		"<!-- Generated by go generate from problemTable in api/problem.go; do not edit. -->\n\n" +
		"Every error the coordinator answers is an RFC 9457 `application/problem+json` document\n" +
		"with a stable `code`. Its `type` is `/problems/{code}`, a relative reference: resolved\n" +
		"against the URL of the request, it is the page about the code that the coordinator which\n" +
		"answered serves (HTML; with authentication on, any token reads it), with the text below. `GET /problems` lists them.\n\n" +
		"| code | status | title |\n| --- | --- | --- |\n")
	for _, k := range problemTable {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %d | %s |\n", k.code, k.code, k.status, k.title)
	}
	b.WriteString("\n")
	for _, k := range problemTable {
		fmt.Fprintf(&b, "## `%s`\n\n", k.code)
		for _, para := range []string{
			fmt.Sprintf("**Status** %d %s. **Title** %s. **Type** `%s`.", k.status, http.StatusText(k.status), k.title, problemTypeBase+k.code),
			"**When.** " + k.when,
			"**Retry?** " + k.retry,
			"**What to do.** " + k.action,
		} {
			b.WriteString(wrapText(para, 92))
			b.WriteString("\n")
		}
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// wrapText breaks s into lines of at most width bytes, each ending in a newline. It breaks
// only between words and never inside a backquoted span; what is longer stands alone.
func wrapText(s string, width int) string {
	var words []string
	open := false // inside a backquoted span
	for _, w := range strings.Fields(s) {
		if open {
			words[len(words)-1] += " " + w
		} else {
			words = append(words, w)
		}
		if strings.Count(w, "`")%2 == 1 {
			open = !open
		}
	}
	var b strings.Builder
	line := 0
	for _, word := range words {
		switch {
		case line == 0:
		case line+1+len(word) > width:
			b.WriteString("\n")
			line = 0
		default:
			b.WriteString(" ")
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	b.WriteString("\n")
	return b.String()
}
