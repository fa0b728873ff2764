package loadtest

import (
	"context"
	"errors"
	"testing"
)

// TestSetupRetriesOnlyUnavailable: the setup sends a request again while it is answered
// 503 unavailable (nothing applied), at most five times in all, and never after any other
// failure.
func TestSetupRetriesOnlyUnavailable(t *testing.T) {
	unavailable := &requestError{code: "unavailable", detail: "locked"}
	cases := []struct {
		name    string
		answers []error
		calls   int
		err     error
	}{
		{"succeeds after two 503s", []error{unavailable, unavailable, nil}, 3, nil},
		{"another failure is not retried", []error{&requestError{code: "conflict"}}, 1, nil},
		{"gives up after five", []error{unavailable, unavailable, unavailable, unavailable, unavailable, nil}, 5, unavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retryUnavailable(context.Background(), func() error {
				calls++
				return tc.answers[calls-1]
			})
			if calls != tc.calls {
				t.Fatalf("%d calls, want %d", calls, tc.calls)
			}
			want := tc.answers[calls-1]
			if tc.err != nil {
				want = tc.err
			}
			if !errors.Is(err, want) && err != want {
				t.Fatalf("error %v, want %v", err, want)
			}
		})
	}
}
