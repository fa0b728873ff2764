package coordinatorclient_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocOnlyInDocGo guards what go doc shows: the package comment of doc.go alone.
// oapi-codegen's stock header is a package comment; oapi-codegen.yaml overrides it, and an
// upgrade of oapi-codegen that brings it back fails here.
func TestPackageDocOnlyInDocGo(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case name == "doc.go" && f.Doc == nil:
			t.Errorf("doc.go has no package comment")
		case name != "doc.go" && f.Doc != nil:
			t.Errorf("%s has a package comment (%q...); the package's documentation belongs in doc.go only",
				name, firstLine(f.Doc.Text()))
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
