package e2e_test

import (
	"encoding/json"
	"testing"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// TestParkedLongPollFromPython checks README's "Idle long-polls" with a client the project
// did not write, Python's http.client on one keep-alive connection: a long-poll on pending
// that coordinator A parks is woken by a checkpoint opened through coordinator B, answers
// what is owed, and the same connection then carries the vote, the ack, and a parked
// long-poll that ends at its wait_ms with nothing owed; A counts what it parked.
func TestParkedLongPollFromPython(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t) // first: under -short it skips the test
	a := harness.StartCoordinator(t, dbURL, "--park-after", "200ms")
	b := harness.StartCoordinator(t, dbURL)
	out, stderr := runPython(t, "park_client.py", parkScript, map[string]string{"a": a.BaseURL, "b": b.BaseURL})
	var report struct {
		Checks []struct {
			Name string          `json:"name"`
			OK   bool            `json:"ok"`
			Got  json.RawMessage `json:"got"`
		} `json:"checks"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("the script's report: %v\n%s\nstderr:\n%s", err, out, stderr)
	}
	seen := map[string]bool{}
	for _, c := range report.Checks {
		seen[c.Name] = true
		if !c.OK {
			t.Errorf("%s: got %s", c.Name, c.Got)
		}
	}
	for _, name := range []string{
		"parked long-poll answers 200", "parked long-poll owes the vote of the checkpoint opened through B",
		"parked long-poll answered soon after the opening", "parked long-poll keeps the connection",
		"vote after the parked answer", "ack after the parked answer",
		"idle parked long-poll answers nothing owed at its wait_ms", "idle parked long-poll keeps the connection",
		"A counted the two parked long-polls", "one connection to A throughout",
	} {
		if !seen[name] {
			t.Errorf("the script made no check %q", name)
		}
	}
}

const parkScript = `
import http.client, json, sys, threading, time, urllib.parse

urls = json.load(sys.stdin)
checks = []
def check(name, ok, got):
    checks.append({"name": name, "ok": bool(ok), "got": got})

def connection(base):
    u = urllib.parse.urlsplit(base)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30)

def call(conn, method, path, body=None):
    headers = {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    raw = resp.read()
    return resp.status, resp.getheader("Connection"), json.loads(raw) if raw else None

b = connection(urls["b"])
call(b, "PUT", "/v1/jobs/parked", {"participants": ["p"]})
status, _, reg = call(b, "POST", "/v1/jobs/parked/participants/p/register")
epoch = reg["epoch"]

a = connection(urls["a"])
status, _, _ = call(a, "GET", "/healthz")
local = a.sock.getsockname()

# Parked after 200 ms; woken by a checkpoint opened through B a second later.
opened = {}
def open_checkpoint():
    c = connection(urls["b"])
    status, _, cp = call(c, "POST", "/v1/jobs/parked/checkpoints")
    opened["id"], opened["at"] = cp["id"], time.monotonic()
timer = threading.Timer(1.0, open_checkpoint)
timer.start()
sent = time.monotonic()
status, connection_header, pending = call(a, "GET", "/v1/jobs/parked/participants/p/pending?wait_ms=20000")
answered = time.monotonic()
timer.join()
items = pending.get("items", []) if pending else []
check("parked long-poll answers 200", status == 200, status)
check("parked long-poll owes the vote of the checkpoint opened through B",
      len(items) == 1 and items[0]["action"] == "vote" and items[0]["checkpoint"] == opened["id"], pending)
check("parked long-poll answered soon after the opening", answered - opened["at"] < 2.0, answered - opened["at"])
check("parked long-poll keeps the connection", connection_header != "close" and a.sock is not None and a.sock.getsockname() == local,
      {"connection": connection_header})

# The same connection carries the vote and the ack.
cp = opened["id"]
status, _, voted = call(a, "PUT", "/v1/jobs/parked/checkpoints/%d/votes/p" % cp, {"epoch": epoch, "vote": "prepared", "committables": [{"txn": 7}]})
check("vote after the parked answer", status == 200 and voted["status"] == "committing" and a.sock.getsockname() == local, [status, voted and voted.get("status")])
status, _, acked = call(a, "PUT", "/v1/jobs/parked/checkpoints/%d/acks/p" % cp, {"epoch": epoch})
check("ack after the parked answer", status == 200 and acked["status"] == "committed", [status, acked and acked.get("status")])

# Nothing owed: parked, and answered at its wait_ms with nothing, on the same connection.
sent = time.monotonic()
status, connection_header, pending = call(a, "GET", "/v1/jobs/parked/participants/p/pending?wait_ms=1000")
held = time.monotonic() - sent
check("idle parked long-poll answers nothing owed at its wait_ms",
      status == 200 and pending["items"] == [] and pending["epoch"] == epoch and 1.0 <= held < 5.0, [status, pending, held])
check("idle parked long-poll keeps the connection", connection_header != "close" and a.sock.getsockname() == local, connection_header)

status, _, _ = call(a, "GET", "/healthz")
a.request("GET", "/metrics")
metrics = a.getresponse().read().decode()
parked = [l for l in metrics.splitlines() if l.startswith("coordinator_http_parked_requests_total ")]
check("A counted the two parked long-polls", parked and float(parked[0].split()[1]) >= 2, parked)
check("one connection to A throughout", a.sock.getsockname() == local, a.sock.getsockname())

json.dump({"checks": checks}, sys.stdout)
`
