package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// What a lingerStep does to the policy.
const (
	lingerAsk    = iota // no update came, and the batch's time is not up: may it go on waiting?
	lingerTimeUp        // no update came, and the batch's time is up: the wait was in vain
	lingerCame          // updates came: the wait succeeded
)

// lingerStep is one event of a lingerPolicy's life, on its fake clock.
type lingerStep struct {
	at   time.Duration // since the start of the clock
	jobs string        // the jobs the batch awaits, comma separated
	do   int           // lingerAsk, lingerTimeUp or lingerCame
	want bool          // for lingerAsk: whether the batch may go on waiting
}

func lingerJobs(jobs string) map[string]bool {
	await := map[string]bool{}
	for job := range strings.SplitSeq(jobs, ",") {
		if job != "" {
			await[job] = true
		}
	}
	return await
}

// givenUpOn are the steps that give up on job at at: vainTries vain waits in a row.
func givenUpOn(job string, at time.Duration) []lingerStep {
	steps := make([]lingerStep, vainTries)
	for i := range steps {
		steps[i] = lingerStep{at: at, jobs: job, do: lingerTimeUp}
	}
	return steps
}

// lingerDoubling gives job a up on, then again each time just after it is waited for
// again: for 1 s, then 2 s, 4 s... up to a minute.
func lingerDoubling() []lingerStep {
	steps := givenUpOn("a", 0)
	at, off := time.Duration(0), time.Second
	for _, next := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute} {
		steps = append(steps,
			lingerStep{at: at + off, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: at + off + 1, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: at + off + 1, jobs: "a", do: lingerTimeUp})
		at, off = at+off+1, next
	}
	return append(steps,
		lingerStep{at: at + off, jobs: "a", do: lingerAsk, want: false},
		lingerStep{at: at + off + 1, jobs: "a", do: lingerAsk, want: true})
}

// TestLinger: when a batch about to commit may wait for the votes (or acks) it awaits.
func TestLinger(t *testing.T) {
	const ms, s = time.Millisecond, time.Second
	cases := []struct {
		name  string
		steps []lingerStep
	}{
		{"a job not waited for in vain yet is waited for", []lingerStep{
			{at: 0, jobs: "a", do: lingerAsk, want: true},
			{at: 0, jobs: "a", do: lingerAsk, want: true}, // asking counts nothing
			{at: 1 * ms, jobs: "a", do: lingerAsk, want: true},
		}},
		{"a batch awaiting no job never waits, and counts nothing", []lingerStep{
			{at: 0, jobs: "", do: lingerAsk, want: false},
			{at: 0, jobs: "", do: lingerTimeUp},
			{at: 0, jobs: "", do: lingerTimeUp},
			{at: 0, jobs: "", do: lingerTimeUp},
			{at: 1 * ms, jobs: "a", do: lingerAsk, want: true},
		}},
		{"two vain waits in a row are not enough to give up", []lingerStep{
			{at: 0, jobs: "a", do: lingerTimeUp},
			{at: 10 * ms, jobs: "a", do: lingerTimeUp},
			{at: 20 * ms, jobs: "a", do: lingerAsk, want: true},
		}},
		{"three vain waits in a row: not waited for during a second, then waited for again", []lingerStep{
			{at: 0, jobs: "a", do: lingerTimeUp},
			{at: 10 * ms, jobs: "a", do: lingerTimeUp},
			{at: 20 * ms, jobs: "a", do: lingerTimeUp},
			{at: 20 * ms, jobs: "a", do: lingerAsk, want: false},
			{at: 500 * ms, jobs: "a", do: lingerAsk, want: false},
			{at: 20*ms + s, jobs: "a", do: lingerAsk, want: false},
			{at: 20*ms + s + 1, jobs: "a", do: lingerAsk, want: true},
		}},
		{"a success between vain waits starts the count again", []lingerStep{
			{at: 0, jobs: "a", do: lingerTimeUp},
			{at: 0, jobs: "a", do: lingerTimeUp},
			{at: 0, jobs: "a", do: lingerCame},
			{at: 0, jobs: "a", do: lingerTimeUp},
			{at: 0, jobs: "a", do: lingerTimeUp},
			{at: 0, jobs: "a", do: lingerAsk, want: true},
			{at: 0, jobs: "a", do: lingerTimeUp},
			{at: 0, jobs: "a", do: lingerAsk, want: false},
		}},
		{"given up on again soon after: at the first vain wait, for twice as long", append(givenUpOn("a", 0),
			lingerStep{at: 1500 * ms, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: 1500 * ms, jobs: "a", do: lingerTimeUp}, // within 2 s of the give-up
			lingerStep{at: 1500*ms + 2*s, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: 1500*ms + 2*s + 1, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: 4 * s, jobs: "a", do: lingerTimeUp}, // within 4 s
			lingerStep{at: 8 * s, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: 8*s + 1, jobs: "a", do: lingerAsk, want: true},
		)},
		{"twice as long each time, up to a minute", lingerDoubling()},
		{"given up on again later: after three vain waits, still for twice as long", append(givenUpOn("a", 0),
			lingerStep{at: 2 * s, jobs: "a", do: lingerTimeUp}, // 2 s after the give-up: not soon
			lingerStep{at: 2 * s, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: 2 * s, jobs: "a", do: lingerTimeUp},
			lingerStep{at: 2 * s, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: 2 * s, jobs: "a", do: lingerTimeUp},
			lingerStep{at: 4 * s, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: 4*s + 1, jobs: "a", do: lingerAsk, want: true},
		)},
		{"a success resets the give-up period", append(givenUpOn("a", 0),
			lingerStep{at: 1500 * ms, jobs: "a", do: lingerTimeUp}, // given up on for 2 s
			lingerStep{at: 2 * s, jobs: "a", do: lingerCame},
			lingerStep{at: 2 * s, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: 2 * s, jobs: "a", do: lingerTimeUp}, // not given up on at once
			lingerStep{at: 2 * s, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: 2 * s, jobs: "a", do: lingerTimeUp},
			lingerStep{at: 2 * s, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: 2 * s, jobs: "a", do: lingerTimeUp}, // the third: for 1 s, not 4
			lingerStep{at: 3 * s, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: 3*s + 1, jobs: "a", do: lingerAsk, want: true},
		)},
		{"a vain wait counted while given up on (a request come late) gives up again", append(givenUpOn("a", 0),
			lingerStep{at: 500 * ms, jobs: "a", do: lingerTimeUp},
			lingerStep{at: 2 * s, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: 2500 * ms, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: 2500*ms + 1, jobs: "a", do: lingerAsk, want: true},
		)},
		{"jobs are given up on one by one", append(givenUpOn("a", 0),
			lingerStep{at: 10 * ms, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: 10 * ms, jobs: "b", do: lingerAsk, want: true},
		)},
		{"a batch awaiting several jobs waits while any is not given up on", append(append(givenUpOn("a", 0), givenUpOn("b", 0)...),
			lingerStep{at: 10 * ms, jobs: "a,b", do: lingerAsk, want: false},
			lingerStep{at: 10 * ms, jobs: "a,b,c", do: lingerAsk, want: true},
			lingerStep{at: 10 * ms, jobs: "c,a", do: lingerAsk, want: true},
		)},
		{"a vain wait for several jobs counts for each, given up on or not", append(givenUpOn("a", 0),
			lingerStep{at: 10 * ms, jobs: "a,b", do: lingerTimeUp}, // a: for 2 s from now
			lingerStep{at: 10 * ms, jobs: "b", do: lingerTimeUp},
			lingerStep{at: 10 * ms, jobs: "b", do: lingerAsk, want: true},
			lingerStep{at: 10 * ms, jobs: "b", do: lingerTimeUp}, // b's third
			lingerStep{at: 10 * ms, jobs: "b", do: lingerAsk, want: false},
			lingerStep{at: 1500 * ms, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: 10*ms + 2*s, jobs: "a", do: lingerAsk, want: false},
			lingerStep{at: 10*ms + 2*s + 1, jobs: "a", do: lingerAsk, want: true},
		)},
		{"a success for several jobs resets each", append(append(givenUpOn("a", 0),
			lingerStep{at: 0, jobs: "b", do: lingerTimeUp},
			lingerStep{at: 0, jobs: "b", do: lingerTimeUp}),
			lingerStep{at: 10 * ms, jobs: "a,b", do: lingerCame},
			lingerStep{at: 10 * ms, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: 10 * ms, jobs: "a", do: lingerTimeUp},
			lingerStep{at: 10 * ms, jobs: "b", do: lingerTimeUp},
			lingerStep{at: 10 * ms, jobs: "a,b", do: lingerTimeUp},
			lingerStep{at: 10 * ms, jobs: "a", do: lingerAsk, want: true},
			lingerStep{at: 10 * ms, jobs: "b", do: lingerAsk, want: true},
		)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			now := start
			p := newLingerPolicy(func() time.Time { return now })
			for i, s := range c.steps {
				now = start.Add(s.at)
				await := lingerJobs(s.jobs)
				switch s.do {
				case lingerAsk:
					if got := p.keepWaiting(await, now.Add(joinWait)); got != s.want {
						t.Fatalf("step %d: at %s, a batch awaiting %q may go on waiting: %t, want %t", i, s.at, s.jobs, got, s.want)
					}
				case lingerTimeUp:
					if p.keepWaiting(await, now) {
						t.Fatalf("step %d: at %s, a batch awaiting %q may go on waiting past its time", i, s.at, s.jobs)
					}
				case lingerCame:
					p.joined(await)
				}
			}
		})
	}
}

// TestLingerForgetsPastMaxCachedJobs: once more than maxCachedJobs jobs were waited for in
// vain, the next vain wait forgets them all, given up on or not.
func TestLingerForgetsPastMaxCachedJobs(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newLingerPolicy(func() time.Time { return now })
	for range vainTries {
		p.keepWaiting(map[string]bool{"a": true}, now)
	}
	many := map[string]bool{}
	for i := range maxCachedJobs {
		many[fmt.Sprint("job", i)] = true
	}
	p.keepWaiting(many, now)
	if len(p.jobs) != maxCachedJobs+1 {
		t.Fatalf("%d jobs kept, want %d", len(p.jobs), maxCachedJobs+1)
	}
	if p.keepWaiting(map[string]bool{"a": true}, now.Add(joinWait)) {
		t.Fatal("a job given up on is waited for before the bound is passed")
	}
	p.keepWaiting(map[string]bool{"b": true}, now)
	if len(p.jobs) != 1 || p.jobs["b"] == nil {
		t.Fatalf("%d jobs kept past the bound, want only the last one waited for", len(p.jobs))
	}
	if !p.keepWaiting(map[string]bool{"a": true}, now.Add(joinWait)) {
		t.Fatal("a job given up on is still not waited for once the bound is passed")
	}
}
