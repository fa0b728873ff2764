package postgres

import (
	"testing"
	"time"
)

// TestReconnectBackoff drives the listener's reconnection policy through drops: failing
// connections double the wait up to the cap, and a connection that was good (it listened
// for at least the cap) starts the doubling again from the bottom, however many drops came
// before it.
func TestReconnectBackoff(t *testing.T) {
	t.Parallel()
	const good = maxReconnectBackoff
	steps := []struct {
		listenedFor time.Duration // how long the connection that just failed had listened
		want        time.Duration
	}{
		{0, 100 * time.Millisecond}, // the first drop
		{0, 200 * time.Millisecond},
		{0, 400 * time.Millisecond},
		{0, 800 * time.Millisecond},
		{0, 1600 * time.Millisecond},
		{0, 2 * time.Second},
		{0, 2 * time.Second},
		{good, 100 * time.Millisecond},                    // the connection came back and stayed up
		{0, 200 * time.Millisecond},                       // and the next attempts failed
		{good - time.Millisecond, 400 * time.Millisecond}, // up, but dropped too soon: still flapping
		{good - time.Millisecond, 800 * time.Millisecond},
		{time.Hour, 100 * time.Millisecond},
		{time.Hour, 100 * time.Millisecond}, // good connections, one after the other
		{0, 200 * time.Millisecond},
	}
	var b reconnectBackoff
	for i, s := range steps {
		if got := b.next(s.listenedFor); got != s.want {
			t.Fatalf("drop %d, after a connection that listened for %v: wait %v, want %v", i+1, s.listenedFor, got, s.want)
		}
	}
}

// While the connection keeps dropping, the listener warns of the first drop and then once
// every listenWarnEvery with the count; a drop after a good connection warns at once.
func TestListenerDropsAreRateLimited(t *testing.T) {
	t.Parallel()
	var d dropLog
	start := time.Unix(1000, 0)
	var warned []int
	for i := range 60 { // a minute of drops, every second, none after a good connection
		if n, warn := d.note(start.Add(time.Duration(i)*time.Second), 0); warn {
			warned = append(warned, n)
		}
	}
	if len(warned) != 2 || warned[0] != 1 || warned[1] != 31 {
		t.Fatalf("warnings at drops %v, want [1 31]", warned)
	}
	if n, warn := d.note(start.Add(61*time.Second), maxReconnectBackoff); !warn || n != 1 {
		t.Fatalf("a drop after a good connection: count %d, warn %v; want 1, true", n, warn)
	}
}
