package coordinator

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The rules are listed in three places: the README's summary, docs/protocol.md (a section
// each) and the index at the top of rules.go (where each is decided). They keep in step:
// the same rules, numbered 1 to the last without a gap, with the same names in the README
// and docs/protocol.md, and each in the index.
func TestRulesListedInStep(t *testing.T) {
	t.Parallel()
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	readme := section(t, read("../README.md"), "## States and rules")
	fromReadme := numbered(regexp.MustCompile(`(?m)^(\d+)\. \*\*([^*]+)\*\*`), readme)
	fromProtocol := numbered(regexp.MustCompile(`(?m)^### (\d+)\. (.+)$`), section(t, read("../docs/protocol.md"), "## The rules"))
	if len(fromProtocol) < 12 {
		t.Fatalf("docs/protocol.md lists %d rules: %q", len(fromProtocol), fromProtocol)
	}
	for i, name := range fromProtocol {
		if name == "" {
			t.Errorf("docs/protocol.md has no rule %d", i+1)
		}
	}
	if fmt.Sprint(fromReadme) != fmt.Sprint(fromProtocol) {
		t.Errorf("the README's rules differ from docs/protocol.md's:\nREADME:   %q\nprotocol: %q", fromReadme, fromProtocol)
	}
	// The index in rules.go: a line per rule, its number first.
	src := read("rules.go")
	start := strings.Index(src, "// Where each rule of the protocol")
	end := strings.Index(src, "// Names:")
	if start < 0 || end < start {
		t.Fatal("rules.go has no index of where each rule is decided")
	}
	index := numbered(regexp.MustCompile(`(?m)^//\t\s?(\d+) (\S+)`), src[start:end])
	if len(index) != len(fromProtocol) {
		t.Errorf("rules.go's index lists %d rules, docs/protocol.md %d: %q", len(index), len(fromProtocol), index)
	}
	for i, name := range index {
		if name == "" {
			t.Errorf("rules.go's index has no rule %d", i+1)
		}
	}
}

// section is the text of markdown from the heading to the next heading of its level or above.
func section(t *testing.T, markdown, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(markdown, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no heading %q", heading)
	}
	level := strings.Count(strings.Fields(heading)[0], "#")
	for _, line := range strings.SplitAfter(rest, "\n") {
		if h := strings.Fields(line); len(h) > 0 && strings.Trim(h[0], "#") == "" && len(h[0]) <= level {
			rest = rest[:strings.Index(rest, line)]
			break
		}
	}
	return rest
}

// numbered returns the names re finds (group 1 the number, group 2 the name) by number, from
// 1: a number never found has the name "".
func numbered(re *regexp.Regexp, text string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		n, err := strconv.Atoi(m[1])
		if err != nil || n < 1 {
			continue
		}
		for len(out) < n {
			out = append(out, "")
		}
		out[n-1] = strings.TrimRight(strings.TrimSpace(m[2]), ":")
	}
	return out
}
