package cli

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"},
		{"postgres://app:s3cret@db:5432/coord", "postgres://app:xxxxx@db:5432/coord"},
		{"postgres://app:p%40ss%2Fw@db/coord", "postgres://app:xxxxx@db/coord"},
		{"postgresql://db/coord?user=app&password=s3cret", "postgresql://db/coord?password=xxxxx&user=app"},
	}
	for _, tt := range tests {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Contains(RedactURL(tt.in), "s3cret") || strings.Contains(RedactURL(tt.in), "p%40ss") {
			t.Errorf("RedactURL(%q) leaks the password", tt.in)
		}
	}
}

func TestScrubRemovesPasswordsFromErrors(t *testing.T) {
	t.Parallel()
	raw := "postgres://app:p%40ss%2Fw@db:5432/coord"
	if got := URLPassword(raw); got != "p@ss/w" {
		t.Fatalf("URLPassword = %q, want p@ss/w", got)
	}
	if got := URLPassword("postgres://db/x?password=a"); got != "a" {
		t.Errorf("URLPassword of a query password = %q, want a", got)
	}
	msg := `failed to connect to "` + raw + `": password p@ss/w rejected`
	got := Scrub(msg, URLPassword(raw))
	if strings.Contains(got, "p@ss") || strings.Contains(got, "p%40ss") {
		t.Errorf("Scrub left the password in %q", got)
	}
	if Scrub("no secret here", "") != "no secret here" {
		t.Errorf("Scrub with no secret changed the message")
	}
}
