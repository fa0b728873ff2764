package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// emptyStore is a coordinator.Store without any job: every input that passes validation
// ends in 404 not_found, every listing is empty. It lets the parameter fuzz target run the
// real handlers and the real service without a database.
type emptyStore struct{}

var _ coordinator.Store = emptyStore{}

func (emptyStore) Update(context.Context, string, int64, func(coordinator.JobTx) error) error {
	return coordinator.ErrNotFound
}
func (emptyStore) View(context.Context, string, func(coordinator.JobTx) error) error {
	return coordinator.ErrNotFound
}
func (emptyStore) PutJob(_ context.Context, name string, cfg coordinator.JobConfig, _ *coordinator.AuditEntry) (*coordinator.Job, bool, error) {
	return &coordinator.Job{Name: name, Config: cfg, Epochs: map[string]int64{}}, true, nil
}
func (emptyStore) Stats(context.Context, bool) (*coordinator.Stats, error) {
	return &coordinator.Stats{}, nil
}
func (emptyStore) Owing(context.Context, string, string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, error) {
	return nil, time.Time{}, nil, coordinator.ErrNotFound
}
func (emptyStore) DeleteExpired(context.Context, []string, int) (int, string, bool, error) {
	return 0, "", false, nil
}
func (emptyStore) JobsToPrune(context.Context, string, int) ([]string, error) { return nil, nil }
func (emptyStore) ListAudit(context.Context, coordinator.AuditQuery) ([]*coordinator.AuditEntry, error) {
	return nil, nil
}
func (emptyStore) GetJob(context.Context, string) (*coordinator.Job, error) {
	return nil, coordinator.ErrNotFound
}
func (emptyStore) Participants(context.Context, string, []string) ([]coordinator.ParticipantActivity, error) {
	return nil, coordinator.ErrNotFound
}
func (emptyStore) ListJobs(context.Context, coordinator.JobPattern, string, int) ([]*coordinator.Job, error) {
	return nil, nil
}
func (emptyStore) ListCheckpoints(context.Context, coordinator.CheckpointQuery) ([]*coordinator.Checkpoint, error) {
	return nil, nil
}
func (emptyStore) ExpiredJobs(context.Context) ([]string, error) { return nil, nil }
func (emptyStore) GetCheckpoint(context.Context, string, int64) (*coordinator.Checkpoint, error) {
	return nil, coordinator.ErrNotFound
}
func (emptyStore) Subscribe(job string, id int64) *coordinator.Subscription {
	return new(coordinator.Broker).Subscribe(job, id)
}
func (emptyStore) Ready(context.Context) error { return nil }
func (emptyStore) Close()                      {}

// protocolName is the name rule of openapi.yaml and docs/protocol.md, written out again
// here as the oracle.
var protocolName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// FuzzParameters sends arbitrary path segments (job, participant, checkpoint id), query
// strings and Idempotency-Keys to every operation of the real handlers on the real service
// (over a store without jobs). Never a 5xx; every error a problem document; and the path
// parameters are judged exactly as openapi.yaml says: valid names and ids reach the store
// (404 not_found: it has no job), anything else is refused with 400 (or 404 when it does
// not even route, e.g. an empty segment).
func FuzzParameters(f *testing.F) {
	for _, seed := range []struct{ job, participant, id, query, key string }{
		{"orders", "sink-a", "1", "", ""},
		{"orders", "sink-a", "41", "wait_ms=100", "k-1"},
		{"a.b_c-9", "X", "9223372036854775807", "limit=1000&cursor=", "x"},
		{"-orders", "sink a", "0", "wait_ms=60001", ""},
		{".x", "é", "-1", "wait_ms=-1", "caf\u00e9"},
		{strings.Repeat("j", 128), strings.Repeat("p", 129), "9223372036854775808", "limit=0", strings.Repeat("k", 256)},
		{"", "", "", "status=preparing,committing", ""},
		{"a/b", "a%2Fb", "1.5", "status=bogus&limit=x", "tab\there"},
		{"orders", "sink\x00", "+7", "cursor=" + encodeCursor(cursorCheckpoints, "5"), "k"},
		{"orders", "p", "007", "cursor=" + encodeCursor(cursorJobs, "x") + "&status=aborted", "k"},
		{"orders", "p", "1", "wait_ms=1&wait_ms=2", ""},
		{"orders", "p", "1", "%zz", ""},
	} {
		f.Add(seed.job, seed.participant, seed.id, seed.query, seed.key)
	}
	svc := coordinator.NewService(emptyStore{}, nil)
	h := NewHandler(svc, Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: 5 * time.Second, AllowedHosts: testHosts})
	f.Fuzz(func(t *testing.T, job, participant, id, query, key string) {
		j, p, i := url.PathEscape(job), url.PathEscape(participant), url.PathEscape(id)
		cp := "/v1/jobs/" + j + "/checkpoints/" + i
		ops := []struct {
			method, path, body string
			names              []string // the name parameters in the path
			hasID              bool
		}{
			{"GET", "/v1/jobs/" + j, "", []string{job}, false},
			{"DELETE", "/v1/jobs/" + j, "", []string{job}, false},
			{"POST", "/v1/jobs/" + j + "/participants/" + p + "/register", "", []string{job, participant}, false},
			{"GET", "/v1/jobs/" + j + "/participants/" + p + "/pending", "", []string{job, participant}, false},
			{"POST", "/v1/jobs/" + j + "/checkpoints", "", []string{job}, false},
			{"GET", "/v1/jobs/" + j + "/checkpoints", "", []string{job}, false},
			{"GET", cp, "", []string{job}, true},
			{"PUT", cp + "/votes/" + p, `{"epoch":1,"vote":"prepared"}`, []string{job, participant}, true},
			{"POST", cp + "/commit", "", []string{job}, true},
			{"POST", cp + "/abort", "", []string{job}, true},
			{"PUT", cp + "/acks/" + p, `{"epoch":1}`, []string{job, participant}, true},
			{"GET", "/v1/jobs", "", nil, false},
			{"GET", "/v1/checkpoints", "", nil, false},
		}
		for _, op := range ops {
			for _, withQuery := range []bool{false, true} {
				target := op.path
				if withQuery {
					target += "?" + query
				}
				var body io.Reader
				if op.body != "" {
					body = strings.NewReader(op.body)
				}
				r, err := http.NewRequest(op.method, "http://coordinator"+target, body)
				if err != nil {
					continue // not a request a client could send
				}
				if r.Body == nil {
					r.Body = http.NoBody // as the server gives handlers
				}
				if op.body != "" {
					r.Header.Set("Content-Type", "application/json")
				}
				if withQuery && key != "" {
					r.Header["Idempotency-Key"] = []string{key}
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				resp := w.Result()
				got, _ := io.ReadAll(resp.Body)
				if resp.StatusCode >= 500 {
					t.Fatalf("%s %s: %d %s", op.method, target, resp.StatusCode, got)
				}
				if resp.StatusCode >= 400 {
					var problem Problem
					if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(got, &problem) != nil ||
						problem.Status != resp.StatusCode || problem.Code == "" {
						t.Fatalf("%s %s: %d %q %s: not a problem document", op.method, target, resp.StatusCode, resp.Header.Get("Content-Type"), got)
					}
				}
				if withQuery {
					continue // the query and the key have no oracle beyond the above
				}
				valid := true
				for _, n := range op.names {
					valid = valid && protocolName.MatchString(n)
				}
				if op.hasID {
					n, err := strconv.ParseInt(id, 10, 64)
					valid = valid && err == nil && n >= 1
				}
				switch {
				case op.names == nil:
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("%s %s: %d %s, want 200 (an empty listing)", op.method, target, resp.StatusCode, got)
					}
				case valid && resp.StatusCode != http.StatusNotFound:
					t.Fatalf("%s %s with valid parameters: %d %s, want 404 from a store without jobs", op.method, target, resp.StatusCode, got)
				case !valid && resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound:
					t.Fatalf("%s %s with invalid parameters: %d %s, want 400", op.method, target, resp.StatusCode, got)
				case !valid && resp.StatusCode == http.StatusNotFound && !strings.Contains(string(got), "no route for"):
					t.Fatalf("%s %s with invalid parameters reached the store: %s", op.method, target, got)
				}
			}
		}
	})
}

// FuzzCursor decodes arbitrary cursors for every listing: no panic, and a cursor that is
// accepted names a position that encodes back to the same cursor, so that clients can
// only page through positions the service handed out.
func FuzzCursor(f *testing.F) {
	for _, seed := range []string{
		"", "!!", encodeCursor(cursorJobs, "orders"), encodeCursor(cursorCheckpoints, "41"), encodeCursor(cursorAll, "7"),
		encodeCursor(cursorCheckpoints, "0"), encodeCursor(cursorCheckpoints, "-3"), encodeCursor(cursorJobs, "-bad"),
		encodeCursor(cursorAll, "99999999999999999999"), encodeCursor("other", "1"), "am9iczo", "Y2hlY2twb2ludHM6MQ==",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, cursor string) {
		if name, err := jobCursor(&cursor); err == nil && cursor != "" {
			if !protocolName.MatchString(name) {
				t.Fatalf("job cursor %q accepted with the invalid name %q", cursor, name)
			}
			if again, err := jobCursor(ptr(encodeCursor(cursorJobs, name))); err != nil || again != name {
				t.Fatalf("job cursor %q: %q does not round-trip (%q, %v)", cursor, name, again, err)
			}
		} else if err != nil && problemFor(err).body.Status != http.StatusBadRequest {
			t.Fatalf("job cursor %q: %v is not a 400", cursor, err)
		}
		for _, tag := range []string{cursorCheckpoints, cursorAll} {
			pos, err := positionCursor(tag, &cursor)
			switch {
			case err != nil:
				if problemFor(err).body.Status != http.StatusBadRequest {
					t.Fatalf("%s cursor %q: %v is not a 400", tag, cursor, err)
				}
			case cursor == "":
				if pos != 0 {
					t.Fatalf("an empty cursor starts at %d", pos)
				}
			case pos < 1:
				t.Fatalf("%s cursor %q accepted at position %d", tag, cursor, pos)
			default:
				if again, err := positionCursor(tag, ptr(encodeCursor(tag, strconv.FormatInt(pos, 10)))); err != nil || again != pos {
					t.Fatalf("%s cursor %q: position %d does not round-trip (%d, %v)", tag, cursor, pos, again, err)
				}
			}
		}
	})
}
