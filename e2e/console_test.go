package e2e_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// TestConsole drives the operator console (/ui/) in Debian's chromium with Playwright
// (e2e/browser/console.test.mjs) against three real coordinators on PostgreSQL: one
// without authentication and a little history, one with authentication, one with 1,000
// jobs. The screenshots it takes of each page go to docs/screenshots, which the README
// shows.
func TestConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser")
	}
	dir, chromium := harness.BrowserTests(t)

	plain := harness.StartCoordinator(t, pgtest.URL(t))
	viaPlain := newAPI(plain)
	epochs := viaPlain.setupJob(t, "orders", `{"participants":["a","b"],"max_concurrent_checkpoints":2}`, "a", "b")
	viaPlain.setupJob(t, "payments", `{"participants":["a"],"max_concurrent_checkpoints":3}`, "a")
	// Some history for the chart: committed rounds and one aborted checkpoint.
	for id := int64(1); id <= 6; id++ {
		viaPlain.prepare(t, "orders", "")
		if id == 4 {
			viaPlain.mustDo(t, "POST", cpPath("orders", id)+"/abort", `{"reason":"the sink's disk was full"}`, http.StatusOK, nil)
			continue
		}
		for _, p := range []string{"a", "b"} {
			time.Sleep(time.Duration(5*id) * time.Millisecond) // votes that take a while
			viaPlain.vote(t, "orders", id, p, epochs[p], fmt.Sprintf(`[{"txn":"%s-%d"}]`, p, id))
		}
		for _, p := range []string{"a", "b"} {
			viaPlain.ack(t, "orders", id, p, epochs[p])
		}
	}

	auth := harness.StartAuthCoordinator(t, pgtest.URL(t))
	admin := newAPI(auth)
	admin.hc = auth.Admin().HTTP
	admin.setupJob(t, "orders", `{"participants":["a"]}`)
	reader := auth.CreateToken(t, harness.TokenSpec{Name: "console-reader", Scopes: []string{"read"}})

	many := harness.StartCoordinator(t, pgtest.URL(t))
	viaMany := newAPI(many)
	for i := range 1000 {
		viaMany.mustDo(t, "PUT", jobPath(fmt.Sprintf("job-%04d", i)), `{"participants":["a","b"]}`, http.StatusCreated, nil)
	}

	shots, err := filepath.Abs(filepath.Join(dir, "..", "..", "docs", "screenshots"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "--test", "--test-concurrency=1", "console.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"CONSOLE_URL="+plain.BaseURL, "AUTH_URL="+auth.BaseURL, "MANY_URL="+many.BaseURL,
		"ADMIN_TOKEN="+auth.AdminToken, "READ_TOKEN="+reader,
		"SCREENSHOTS="+shots, "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	text := string(out)
	passed := regexp.MustCompile(`(?m)^# pass (\d+)`).FindStringSubmatch(text)
	if err != nil || passed == nil || passed[1] != "6" {
		t.Fatalf("node --test console.test.mjs: %v\n%s", err, text)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "first screen") {
			t.Log(strings.TrimSpace(line))
		}
	}
}
