package coordinator

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A sweeper that keeps failing warns of the first failure, then once every sweepWarnEvery,
// and says once when it works again.
func TestSweeperFailuresAreRateLimited(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	f := failures{what: "sweep expired checkpoints"}
	start := time.Unix(1000, 0)
	down := errors.New("the database is down")
	for i := range 300 { // a minute of failures, every 200 ms
		f.note(logger, start.Add(time.Duration(i)*200*time.Millisecond), down)
	}
	f.note(logger, start.Add(time.Minute), nil)
	f.note(logger, start.Add(time.Minute+time.Second), nil)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines for a minute of failures and a recovery, want 3 (first, after 30 s, recovered):\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "failed_attempts=1") || !strings.Contains(lines[1], "level=WARN") || !strings.Contains(lines[2], "works again") || !strings.Contains(lines[2], "failed_attempts=300") {
		t.Fatalf("unexpected lines:\n%s", buf.String())
	}
}

func TestRetentionPause(t *testing.T) {
	for _, c := range []struct{ took, least, want time.Duration }{
		{0, 5 * time.Millisecond, 5 * time.Millisecond},
		{time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond},
		{10 * time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond},
		{200 * time.Millisecond, 5 * time.Millisecond, 400 * time.Millisecond},
	} {
		if got := retentionPause(c.took, c.least); got != c.want {
			t.Errorf("retentionPause(%s, %s) = %s, want %s", c.took, c.least, got, c.want)
		}
	}
}
