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
		{10 * time.Millisecond, 5 * time.Millisecond, 40 * time.Millisecond},
		{200 * time.Millisecond, 5 * time.Millisecond, 800 * time.Millisecond},
	} {
		if got := retentionPause(c.took, c.least); got != c.want {
			t.Errorf("retentionPause(%s, %s) = %s, want %s", c.took, c.least, got, c.want)
		}
	}
}

// What a hand-over makes of the last read: the job with the checkpoints opened or
// changed in place of its own, at the new version and clock, only when the version read
// lies from Since to From; otherwise nothing (read).
func TestOwingViewAfterChanged(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	job := &Job{Name: "j", Config: JobConfig{Participants: []string{"a", "b"}}, Epochs: map[string]int64{"a": 1, "b": 1}, Version: 7}
	open := func(id int64) *Checkpoint {
		return &Checkpoint{Job: "j", ID: id, Status: StatusPreparing, CreatedAt: t0, Deadline: t0.Add(time.Minute),
			Participants: []ParticipantState{{Name: "a"}, {Name: "b"}}}
	}
	read := &owingView{job: job, now: t0, owing: []*Checkpoint{open(3)}}
	o := &Changed{Since: 7, From: 7, To: 8, Now: t0.Add(time.Second), Checkpoints: []*Checkpoint{open(4)}}
	for name, v := range map[string]*owingView{
		"no hand-over":            read.after(nil),
		"from a later version":    read.after(&Changed{Since: 8, From: 9, To: 10, Now: o.Now, Checkpoints: o.Checkpoints}),
		"from an earlier version": read.after(&Changed{Since: 5, From: 6, To: 8, Now: o.Now, Checkpoints: o.Checkpoints}),
		"a store with no version": (&owingView{job: &Job{Name: "j"}, now: t0}).after(&Changed{From: 0, To: 1}),
	} {
		if v != nil {
			t.Errorf("%s: %+v, want nil (read again)", name, v)
		}
	}
	v := read.after(o)
	if v == nil || v.job.Version != 8 || !v.now.Equal(o.Now) || len(v.owing) != 2 || v.owing[1].ID != 4 {
		t.Fatalf("after the hand-over: %+v", v)
	}
	// A batch whose clock was read before the read's keeps the later one.
	late := &owingView{job: job, now: t0.Add(time.Hour)}
	if w := late.after(o); w == nil || !w.now.Equal(late.now) {
		t.Errorf("a hand-over with an earlier clock: %+v, want the read's clock", w)
	}
	if job.Version != 7 || len(read.owing) != 1 {
		t.Errorf("the hand-over changed what was read: version %d, %d checkpoints", job.Version, len(read.owing))
	}
	p, err := v.pending("a")
	if err != nil || len(p.Items) != 2 || p.Items[0].Checkpoint != 3 || p.Items[1].Checkpoint != 4 || p.Epoch != 1 {
		t.Fatalf("pending after the hand-over: %+v, %v", p, err)
	}

	// A decision, handed over by a batch whose chain of changes began at or before the
	// version read: checkpoint 3 committing takes the place of the one read, and a
	// checkpoint settled (committed) leaves the view.
	voted := open(3)
	voted.Participants[0].Vote = VotePrepared
	read = &owingView{job: &Job{Name: "j", Config: job.Config, Epochs: job.Epochs, Version: 7}, now: t0, owing: []*Checkpoint{voted, open(2)}}
	decided := open(3)
	decided.Status = StatusCommitting
	for i := range decided.Participants {
		decided.Participants[i].Vote = VotePrepared
	}
	settled := open(2)
	settled.Status = StatusCommitted
	at := t0.Add(time.Second)
	for i := range settled.Participants {
		settled.Participants[i].Vote, settled.Participants[i].AckedAt = VotePrepared, &at
	}
	c := &Changed{Since: 5, From: 9, To: 10, Now: at, Checkpoints: []*Checkpoint{decided, settled}}
	v = read.after(c)
	if v == nil || v.job.Version != 10 || len(v.owing) != 1 || v.owing[0] != decided {
		t.Fatalf("after a decision handed over: %+v", v)
	}
	if p, err := v.pending("a"); err != nil || len(p.Items) != 1 || p.Items[0].Checkpoint != 3 || p.Items[0].Action != ActionCommit {
		t.Fatalf("pending after a decision handed over: %+v, %v", p, err)
	}
	if read.owing[0] != voted || len(read.owing) != 2 {
		t.Errorf("the hand-over changed what was read: %+v", read.owing)
	}
}
