package e2e_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// TestOperations is the operator's side of the contract, checked by a client nobody in the
// project wrote (Python 3, standard library only) against two coordinator processes on one
// PostgreSQL database, with authentication on, its requests alternating between the two:
// every decision_cause where README ("Who decided, and why") says, with decided_by and
// abort_reason; acked_by of an ack and of an operator's complete; finding a stuck
// checkpoint (GET /v1/checkpoints?status=committing&older_than_ms&job=prefix*) and settling
// it; the audit (what requests did, with token, reason and X-Request-Id, and none of the
// protocol's own decisions); the metrics of both processes (the database's gauges equal on
// both, the counters summed over both equal to what the client did); and retention (a
// checkpoint past retention_ms answers 410, the last committed one stays).
//
// The script prints a report of named checks; the test asserts each one.
func TestOperations(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t) // first: under -short it skips the test
	adminFile, _ := harness.AdminTokenFile(t)
	a := harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile)
	b := harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile)

	specs := []harness.TokenSpec{
		{Name: "ops-a", Scopes: []string{"participant"}, Job: "ops", Participant: "a"},
		{Name: "ops-b", Scopes: []string{"participant"}, Job: "ops", Participant: "b"},
		{Name: "manual-a", Scopes: []string{"participant"}, Job: "manual", Participant: "a"},
		{Name: "keep-a", Scopes: []string{"participant"}, Job: "keep", Participant: "a"},
		{Name: "trigger", Scopes: []string{"trigger"}, Job: "*"},
		{Name: "operator", Scopes: []string{"operator"}, Job: "*"},
		{Name: "prometheus", Scopes: []string{"read"}, Job: "*"},
	}
	secrets := a.CreateTokens(t, specs...)
	harness.AwaitTokens(t, []*harness.Coordinator{b}, secrets...)
	tokens := map[string]string{}
	for i, s := range specs {
		tokens[s.Name] = secrets[i]
	}
	out, stderr := runPython(t, "operations_client.py", operationsScript,
		map[string]any{"coordinators": []string{a.BaseURL, b.BaseURL}, "tokens": tokens})

	var report struct {
		Checks []struct {
			Name string          `json:"name"`
			OK   bool            `json:"ok"`
			Got  json.RawMessage `json:"got"`
			Want json.RawMessage `json:"want"`
		} `json:"checks"`
		Notes []string `json:"notes"`
		Trace []string `json:"trace"`
		Error string   `json:"error"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("the Python client's report is not JSON (%v):\n%s\nstderr:\n%s", err, out, stderr)
	}
	for _, n := range report.Notes {
		t.Logf("note: %s", n)
	}
	dumpTrace := func() {
		t.Logf("the Python client's requests (A = %s, B = %s):\n%s", a.BaseURL, b.BaseURL, strings.Join(report.Trace, "\n"))
	}
	if report.Error != "" {
		dumpTrace()
		t.Fatalf("the Python client stopped: %s", report.Error)
	}

	// Every check of the scenario, by name: a report without one of them is a failure too.
	wantChecks := []string{
		"all_prepared.status", "all_prepared.decision_cause", "all_prepared.decided_by",
		"acked_by.self_a", "acked_by.self_b", "all_prepared.committed",
		"abort_vote.decision_cause", "abort_vote.decided_by",
		"abort_request.decision_cause", "abort_request.decided_by", "abort_request.abort_reason",
		"deadline.status", "deadline.decision_cause", "deadline.decided_by",
		"registration.decision_cause", "registration.decided_by",
		"fenced.vote_with_old_epoch",
		"lower_aborted.lower_cause", "lower_aborted.higher_status", "lower_aborted.higher_cause", "lower_aborted.higher_decided_by",
		"stuck.committing", "stuck.found_older_than_500ms", "stuck.not_found_older_than_60s",
		"stuck.complete_status", "stuck.acked_by_a", "stuck.acked_by_b_is_operator", "stuck.complete_repeated_changes_nothing",
		"commit_request.preparing_after_vote", "commit_request.decision_cause", "commit_request.decided_by", "commit_request.committed",
		"audit.checkpoint_completed", "audit.checkpoint_aborted_by_request", "audit.checkpoint_committed_by_request",
		"audit.job_created", "audit.no_protocol_decisions",
		"metrics.scraped", "metrics.gauges_equal_on_A_and_B",
		"metrics.open_checkpoints_ops", "metrics.oldest_open_ops", "metrics.last_committed_ops",
		"metrics.decided_ops_by_cause", "metrics.decided_manual_by_cause",
		"metrics.votes_ops", "metrics.opened", "metrics.registrations_ops", "metrics.acks_ops",
		"retention.first_gone", "retention.gone_code", "retention.last_committed_kept",
		"retention.vote_on_gone", "retention.ack_on_gone", "retention.job_last_committed",
		"retention.deleted_total",
	}
	seen := map[string]bool{}
	failed := 0
	for _, c := range report.Checks {
		seen[c.Name] = true
		if !c.OK {
			failed++
			t.Errorf("check %s: got %s, want %s", c.Name, c.Got, c.Want)
		}
	}
	for _, name := range wantChecks {
		if !seen[name] {
			failed++
			t.Errorf("check %s: not in the report", name)
		}
	}
	if failed > 0 {
		dumpTrace()
	}
	t.Logf("%d checks of the Python client, %d failed; %d requests", len(report.Checks), failed, len(report.Trace))
}

// operationsScript is the Python client of TestOperations. It reads {"coordinators": [A, B],
// "tokens": {name: secret}} on stdin and prints {"checks": [{name, ok, got, want}], "notes",
// "trace", "error"}. Its requests alternate between A and B, but for the scrapes of
// /metrics, which go to both.
const operationsScript = `
import calendar, datetime, json, re, sys, time, traceback, urllib.error, urllib.parse, urllib.request

opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # straight to the coordinators
spec = json.load(sys.stdin)
BASES = spec["coordinators"]
TOK = spec["tokens"]
report = {"checks": [], "notes": [], "trace": [], "error": ""}
turn = [0]


class Stop(Exception):
    pass


def call(method, path, token, body=None, headers=None, coord=None):
    """One request; to A and B in turn unless coord says which (0: A, 1: B)."""
    if coord is None:
        coord = turn[0] % 2
        turn[0] += 1
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASES[coord] + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", "Bearer " + TOK[token])
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with opener.open(req, timeout=30) as resp:
            status, raw, hdrs = resp.status, resp.read().decode(), resp.headers
    except urllib.error.HTTPError as e:
        status, raw, hdrs = e.code, e.read().decode(), e.headers
    doc = raw
    if "json" in (hdrs.get("Content-Type") or ""):
        try:
            doc = json.loads(raw)
        except ValueError:
            pass
    summary = ""
    if isinstance(doc, dict):
        if "code" in doc:
            summary = "%s: %s" % (doc.get("code"), doc.get("detail"))
        elif "status" in doc and "id" in doc:
            summary = "checkpoint %s %s cause=%s decided_by=%s" % (doc.get("id"), doc.get("status"), doc.get("decision_cause"), doc.get("decided_by"))
        elif "items" in doc:
            summary = "%d items" % len(doc["items"])
        elif "epoch" in doc:
            summary = "epoch %s" % doc["epoch"]
    report["trace"].append("%s %s %s (%s) %s -> %d %s" % (
        "AB"[coord], method, path, token, json.dumps(body) if body is not None else "", status, summary))
    return status, doc, hdrs


def must(want, method, path, token, body=None, headers=None, coord=None):
    status, doc, _ = call(method, path, token, body, headers, coord)
    if status != want:
        raise Stop("%s %s (%s): %d %s, want %d" % (method, path, token, status, json.dumps(doc)[:500], want))
    return doc


def check(name, got, want):
    report["checks"].append({"name": name, "ok": got == want, "got": got, "want": want})
    return got == want


def check_true(name, ok, got, want):
    report["checks"].append({"name": name, "ok": bool(ok), "got": got, "want": want})


def note(s):
    report["notes"].append(s)


def cp_path(job, cp):
    return "/v1/jobs/%s/checkpoints/%d" % (job, cp)


def part(cp, name):
    for p in cp["participants"]:
        if p["name"] == name:
            return p
    raise Stop("checkpoint %s/%s has no participant %s" % (cp["job"], cp["id"], name))


def unix(ts):
    """An RFC 3339 date-time as Unix seconds, to the microsecond."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", ts)
    if not m:
        raise Stop("not an RFC 3339 date-time: %r" % ts)
    base = calendar.timegm(datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").timetuple())
    micros = int((m.group(2) or "0")[:6].ljust(6, "0"))
    offset = 0
    if m.group(3) != "Z":
        sign = 1 if m.group(3)[0] == "+" else -1
        offset = sign * (int(m.group(3)[1:3]) * 3600 + int(m.group(3)[4:6]) * 60)
    return base - offset + micros / 1e6


# The Prometheus text format, line by line: name{label="value",...} value [timestamp].
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(coord):
    status, text, hdrs = call("GET", "/metrics", "prometheus", coord=coord)
    if status != 200 or not isinstance(text, str):
        raise Stop("GET /metrics on %s: %d %s" % ("AB"[coord], status, str(text)[:300]))
    samples = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise Stop("GET /metrics on %s: a line that is not a sample: %r" % ("AB"[coord], line))
        labels = dict((k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")) for k, v in LABEL.findall(m.group(2) or ""))
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def series(samples, name, by, **match):
    """The samples of name whose labels match, as {"v1,v2": value} by the labels by."""
    out = {}
    for n, labels, value in samples:
        if n != name or any(labels.get(k) != v for k, v in match.items()):
            continue
        key = ",".join(labels.get(k, "") for k in by)
        out[key] = out.get(key, 0) + value
    return out


def summed(*dicts):
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return dict((k, v) for k, v in out.items() if v != 0)


def scenario():
    # 1. The operator creates the jobs; each participant registers with its own token.
    must(201, "PUT", "/v1/jobs/ops", "operator", {"participants": ["a", "b"], "auto_commit": True, "max_concurrent_checkpoints": 2})
    must(201, "PUT", "/v1/jobs/manual", "operator", {"participants": ["a"], "auto_commit": False})
    must(201, "PUT", "/v1/jobs/keep", "operator", {"participants": ["a"], "retention_ms": 1000})
    ea = must(200, "POST", "/v1/jobs/ops/participants/a/register", "ops-a")["epoch"]
    eb = must(200, "POST", "/v1/jobs/ops/participants/b/register", "ops-b")["epoch"]
    em = must(200, "POST", "/v1/jobs/manual/participants/a/register", "manual-a")["epoch"]
    ek = must(200, "POST", "/v1/jobs/keep/participants/a/register", "keep-a")["epoch"]
    opened = {"ops": 0, "manual": 0, "keep": 0}

    def open_cp(job, body=None):
        cp = must(201, "POST", "/v1/jobs/%s/checkpoints" % job, "trigger", body)
        opened[job] += 1
        return cp["id"]

    # Retention first, so that its wait for the sweep overlaps the rest: two checkpoints of
    # keep (retention_ms 1000) committed and acked.
    keep_ids = []
    for i in range(2):
        k = open_cp("keep")
        cp = must(200, "PUT", cp_path("keep", k) + "/votes/a", "keep-a", {"epoch": ek, "vote": "prepared", "committables": ["keep-%d" % k]})
        if cp["status"] != "committing":
            raise Stop("keep/%d after its only vote: %s" % (k, cp["status"]))
        cp = must(200, "PUT", cp_path("keep", k) + "/acks/a", "keep-a", {"epoch": ek})
        if cp["status"] != "committed":
            raise Stop("keep/%d after its only ack: %s" % (k, cp["status"]))
        keep_ids.append(k)

    votes = {}

    def vote(want, job, cp, p, token, epoch, kind="prepared", result="accepted", **extra):
        body = dict({"epoch": epoch, "vote": kind}, **extra)
        status, doc, _ = call("PUT", cp_path(job, cp) + "/votes/" + p, token, body)
        if want is not None and status != want:
            raise Stop("vote of %s on %s/%d: %d %s, want %d" % (p, job, cp, status, json.dumps(doc)[:300], want))
        if job == "ops":
            key = "%s,%s" % (kind, result)
            votes[key] = votes.get(key, 0) + 1
        return status, doc

    acks = {}

    def ack(job, cp, p, token, epoch):
        doc = must(200, "PUT", cp_path(job, cp) + "/acks/" + p, token, {"epoch": epoch})
        if job == "ops":
            acks["accepted"] = acks.get("accepted", 0) + 1
        return doc

    def get(job, cp):
        return must(200, "GET", cp_path(job, cp), "operator")

    decided = {}

    def decided_as(job, decision, cause):
        key = "%s,%s,%s" % (job, decision, cause)
        decided[key] = decided.get(key, 0) + 1

    # 2. Every decision_cause.
    # all_prepared: the last prepared vote is b's.
    c1 = open_cp("ops")
    vote(200, "ops", c1, "a", "ops-a", ea, committables=[{"txn": "a-1"}])
    vote(200, "ops", c1, "a", "ops-a", ea, result="duplicate", committables=[{"txn": "a-1"}])
    _, cp = vote(200, "ops", c1, "b", "ops-b", eb, committables=[{"txn": "b-1"}])
    decided_as("ops", "commit", "all_prepared")
    check("all_prepared.status", cp["status"], "committing")
    cp = get("ops", c1)
    check("all_prepared.decision_cause", cp["decision_cause"], "all_prepared")
    check("all_prepared.decided_by", cp["decided_by"], "ops-b")
    # acked_by: each participant acks itself.
    ack("ops", c1, "a", "ops-a", ea)
    cp = ack("ops", c1, "b", "ops-b", eb)
    check("acked_by.self_a", part(cp, "a")["acked_by"], "a")
    check("acked_by.self_b", part(get("ops", c1), "b")["acked_by"], "b")
    check("all_prepared.committed", cp["status"], "committed")

    # abort_vote.
    c2 = open_cp("ops")
    vote(200, "ops", c2, "a", "ops-a", ea, kind="abort", reason="disk full")
    decided_as("ops", "abort", "abort_vote")
    cp = get("ops", c2)
    check("abort_vote.decision_cause", [cp["status"], cp["decision_cause"]], ["aborted", "abort_vote"])
    check("abort_vote.decided_by", cp["decided_by"], "ops-a")
    note("abort_vote: abort_reason is %r, a's reason %r" % (cp["abort_reason"], part(cp, "a").get("reason")))

    # abort_request, with a reason.
    c3 = open_cp("ops")
    must(200, "POST", cp_path("ops", c3) + "/abort", "operator", {"reason": "the operator says no"})
    decided_as("ops", "abort", "abort_request")
    cp = get("ops", c3)
    check("abort_request.decision_cause", [cp["status"], cp["decision_cause"]], ["aborted", "abort_request"])
    check("abort_request.decided_by", cp["decided_by"], "operator")
    check("abort_request.abort_reason", cp["abort_reason"], "the operator says no")

    # deadline: 100 ms, swept by whichever coordinator comes first.
    c4 = open_cp("ops", {"timeout_ms": 100})
    time.sleep(1.5)
    decided_as("ops", "abort", "deadline")
    cp = get("ops", c4)
    check("deadline.status", cp["status"], "aborted")
    check("deadline.decision_cause", cp["decision_cause"], "deadline")
    check("deadline.decided_by", cp["decided_by"], None)

    # registration: b registers again before voting; a, which voted prepared, rolls back.
    c5 = open_cp("ops")
    vote(200, "ops", c5, "a", "ops-a", ea, committables=[{"txn": "a-5"}])
    old_eb = eb
    eb = must(200, "POST", "/v1/jobs/ops/participants/b/register", "ops-b")["epoch"]
    decided_as("ops", "abort", "registration")
    cp = get("ops", c5)
    check("registration.decision_cause", [cp["status"], cp["decision_cause"]], ["aborted", "registration"])
    check("registration.decided_by", cp["decided_by"], "ops-b")
    ack("ops", c5, "a", "ops-a", ea)

    # lower_aborted: two preparing at once (max_concurrent_checkpoints 2), the lower aborted.
    c6 = open_cp("ops")
    c7 = open_cp("ops")
    status, doc = vote(None, "ops", c6, "b", "ops-b", old_eb, result="fenced")
    check("fenced.vote_with_old_epoch", [status, isinstance(doc, dict) and doc.get("code")], [409, "fenced"])
    must(200, "POST", cp_path("ops", c6) + "/abort", "operator", {"reason": "the lower one goes"})
    decided_as("ops", "abort", "abort_request")
    decided_as("ops", "abort", "lower_aborted")
    check("lower_aborted.lower_cause", get("ops", c6)["decision_cause"], "abort_request")
    cp = get("ops", c7)
    check("lower_aborted.higher_status", cp["status"], "aborted")
    check("lower_aborted.higher_cause", cp["decision_cause"], "lower_aborted")
    check("lower_aborted.higher_decided_by", cp["decided_by"], "operator")

    # 3. A committing checkpoint that b never acks: found, then settled by the operator.
    c8 = open_cp("ops")
    vote(200, "ops", c8, "a", "ops-a", ea, committables=[{"txn": "a-8"}])
    _, cp = vote(200, "ops", c8, "b", "ops-b", eb, committables=[{"txn": "b-8"}])
    decided_as("ops", "commit", "all_prepared")
    check("stuck.committing", [cp["status"], cp["decision_cause"], cp["decided_by"]], ["committing", "all_prepared", "ops-b"])
    ack("ops", c8, "a", "ops-a", ea)
    time.sleep(0.7)
    q = urllib.parse.urlencode({"status": "committing", "older_than_ms": 500, "job": "ops*"})
    found = must(200, "GET", "/v1/checkpoints?" + q, "operator")
    stuck = [[c["job"], c["id"]] for c in found["items"]]
    check("stuck.found_older_than_500ms", stuck, [["ops", c8]])
    if found["items"]:
        note("the stuck checkpoint as listed: waiting for %s" % [p["name"] for p in found["items"][0]["participants"] if p["acked_at"] is None])
    q = urllib.parse.urlencode({"status": "committing", "older_than_ms": 60000, "job": "ops*"})
    check("stuck.not_found_older_than_60s", must(200, "GET", "/v1/checkpoints?" + q, "operator")["items"], [])
    request_id = "ops-e2e-complete-%d" % int(time.time() * 1000)
    reason = "b decommissioned, its files moved by hand"
    cp = must(200, "POST", cp_path("ops", c8) + "/complete", "operator", {"reason": reason}, headers={"X-Request-Id": request_id})
    check("stuck.complete_status", cp["status"], "committed")
    check("stuck.acked_by_a", part(cp, "a")["acked_by"], "a")
    check("stuck.acked_by_b_is_operator", part(get("ops", c8), "b")["acked_by"], "operator")
    again = must(200, "POST", cp_path("ops", c8) + "/complete", "operator", {"reason": reason})
    check("stuck.complete_repeated_changes_nothing", again, get("ops", c8))

    # commit_request: job manual (auto_commit false).
    m1 = open_cp("manual")
    _, cp = vote(200, "manual", m1, "a", "manual-a", em, committables=["m-1"])
    check("commit_request.preparing_after_vote", cp["status"], "preparing")
    must(200, "POST", cp_path("manual", m1) + "/commit", "operator", {"reason": "released by hand"})
    decided_as("manual", "commit", "commit_request")
    cp = get("manual", m1)
    check("commit_request.decision_cause", [cp["status"], cp["decision_cause"]], ["committing", "commit_request"])
    check("commit_request.decided_by", cp["decided_by"], "operator")
    cp = must(200, "PUT", cp_path("manual", m1) + "/acks/a", "manual-a", {"epoch": em})
    check("commit_request.committed", cp["status"], "committed")

    # The audit: what requests did, and nothing of the protocol's own decisions.
    entries = must(200, "GET", "/v1/audit?job=ops&limit=1000", "operator")["items"]
    def audit_of(cp_id, action=None):
        return [e for e in entries if e["checkpoint"] == cp_id and (action is None or e["action"] == action)]
    got = [{k: e[k] for k in ("action", "job", "checkpoint", "token", "reason", "request_id")} for e in audit_of(c8)]
    check("audit.checkpoint_completed", got,
          [{"action": "checkpoint_completed", "job": "ops", "checkpoint": c8, "token": "operator", "reason": reason, "request_id": request_id}])
    got = sorted([e["checkpoint"], e["action"], e["token"], e["reason"]] for e in entries if e["action"] == "checkpoint_aborted")
    check("audit.checkpoint_aborted_by_request", got,
          [[c3, "checkpoint_aborted", "operator", "the operator says no"], [c6, "checkpoint_aborted", "operator", "the lower one goes"]])
    manual = must(200, "GET", "/v1/audit?job=manual", "operator")["items"]
    got = [[e["checkpoint"], e["action"], e["token"], e["reason"]] for e in manual if e["checkpoint"] is not None]
    check("audit.checkpoint_committed_by_request", got, [[m1, "checkpoint_committed", "operator", "released by hand"]])
    got = [[e["job"], e["token"]] for e in entries if e["action"] == "job_created"]
    check("audit.job_created", got, [["ops", "operator"]])
    protocol = {"all_prepared": c1, "abort_vote": c2, "deadline": c4, "registration": c5, "lower_aborted": c7}
    got = dict((cause, [e["action"] for e in audit_of(cp_id)]) for cause, cp_id in protocol.items())
    check("audit.no_protocol_decisions", got, dict((cause, []) for cause in protocol))
    note("audit of ops: %d entries: %s" % (len(entries), [(e["action"], e["checkpoint"]) for e in entries]))

    # Something open for the gauges: one committing (never acked), one preparing above it.
    c9 = open_cp("ops")
    vote(200, "ops", c9, "a", "ops-a", ea, committables=[{"txn": "a-9"}])
    vote(200, "ops", c9, "b", "ops-b", eb, committables=[{"txn": "b-9"}])
    decided_as("ops", "commit", "all_prepared")
    c10 = open_cp("ops", {"timeout_ms": 120000})
    created = {"committing": unix(get("ops", c9)["created_at"]), "preparing": unix(get("ops", c10)["created_at"])}
    job_ops = must(200, "GET", "/v1/jobs/ops", "operator")

    # 4. Metrics, once both coordinators' statistics (read at most once a second) are newer
    # than the last change.
    time.sleep(1.2)
    sa, sb = scrape(0), scrape(1)
    check_true("metrics.scraped", sa and sb, [len(sa), len(sb)], "samples from A and B")
    gauges = {}
    for name in ("coordinator_open_checkpoints", "coordinator_oldest_open_checkpoint_timestamp_seconds"):
        gauges[name] = [series(sa, name, ["status"], job="ops"), series(sb, name, ["status"], job="ops")]
    gauges["coordinator_last_committed_checkpoint"] = [series(sa, "coordinator_last_committed_checkpoint", ["job"], job="ops"),
                                                       series(sb, "coordinator_last_committed_checkpoint", ["job"], job="ops")]
    differ = dict((name, {"A": ab[0], "B": ab[1]}) for name, ab in gauges.items() if ab[0] != ab[1])
    check("metrics.gauges_equal_on_A_and_B", differ, {})
    check("metrics.open_checkpoints_ops", gauges["coordinator_open_checkpoints"][0], {"committing": 1, "preparing": 1})
    oldest = gauges["coordinator_oldest_open_checkpoint_timestamp_seconds"][0]
    off = dict((s, round(oldest.get(s, 0) - created[s], 6)) for s in created)
    check_true("metrics.oldest_open_ops", all(abs(v) < 0.001 for v in off.values()),
               {"metric": oldest, "created_at": created}, "the created_at of ops/%d (committing) and ops/%d (preparing)" % (c9, c10))
    check("metrics.last_committed_ops", [gauges["coordinator_last_committed_checkpoint"][0].get("ops"), job_ops["last_committed"]], [c9, c9])

    def both(name, by, **match):
        return summed(series(sa, name, by, **match), series(sb, name, by, **match))

    want = dict((k.split(",", 1)[1], v) for k, v in decided.items() if k.startswith("ops,"))
    got = both("coordinator_checkpoints_decided_total", ["decision", "cause"], job="ops")
    check("metrics.decided_ops_by_cause", got, want)
    if got != want:
        note("decided_total{job=ops} on A: %s; on B: %s" % (
            series(sa, "coordinator_checkpoints_decided_total", ["decision", "cause"], job="ops"),
            series(sb, "coordinator_checkpoints_decided_total", ["decision", "cause"], job="ops")))
    swept = [c for c, s in (("A", sa), ("B", sb)) if series(s, "coordinator_checkpoints_decided_total", ["cause"], job="ops", cause="deadline")]
    note("the deadline abort was counted by %s" % swept)
    want = dict((k.split(",", 1)[1], v) for k, v in decided.items() if k.startswith("manual,"))
    check("metrics.decided_manual_by_cause", both("coordinator_checkpoints_decided_total", ["decision", "cause"], job="manual"), want)
    check("metrics.votes_ops", both("coordinator_votes_total", ["vote", "result"], job="ops"), votes)
    check("metrics.opened", both("coordinator_checkpoints_opened_total", ["job"]), opened)
    check("metrics.registrations_ops", both("coordinator_registrations_total", ["job"], job="ops"), {"ops": 3})
    check("metrics.acks_ops", both("coordinator_acks_total", ["result"], job="ops"), acks)

    # 5. Retention: keep's first checkpoint goes (the sweep runs every 10 s on each
    # coordinator), its last committed one stays.
    first, last = keep_ids
    started = time.time()
    status = None
    while time.time() - started < 30:
        status, doc, _ = call("GET", cp_path("keep", first), "operator")
        if status != 200:
            break
        time.sleep(0.5)
    note("keep/%d answered %s %.1f s after the first poll" % (first, status, time.time() - started))
    check("retention.first_gone", status, 410)
    check("retention.gone_code", isinstance(doc, dict) and doc.get("code"), "gone")
    status, doc, _ = call("GET", cp_path("keep", last), "operator")
    check("retention.last_committed_kept", [status, isinstance(doc, dict) and doc.get("status")], [200, "committed"])
    status, doc, _ = call("PUT", cp_path("keep", first) + "/votes/a", "keep-a", {"epoch": ek, "vote": "prepared"})
    check("retention.vote_on_gone", [status, isinstance(doc, dict) and doc.get("code")], [410, "gone"])
    status, doc, _ = call("PUT", cp_path("keep", first) + "/acks/a", "keep-a", {"epoch": ek})
    check("retention.ack_on_gone", [status, isinstance(doc, dict) and doc.get("code")], [410, "gone"])
    check("retention.job_last_committed", must(200, "GET", "/v1/jobs/keep", "operator")["last_committed"], last)
    # The counter is added once the deletion committed: give it a moment.
    deadline = time.time() + 3
    while True:
        per = [sum(v for n, _, v in scrape(c) if n == "coordinator_retention_deleted_checkpoints_total") for c in (0, 1)]
        if sum(per) >= 1 or time.time() > deadline:
            break
        time.sleep(0.25)
    check_true("retention.deleted_total", sum(per) >= 1, {"A": per[0], "B": per[1]}, ">= 1 summed over A and B")


try:
    scenario()
except Stop as e:
    report["error"] = str(e)
except Exception:
    report["error"] = traceback.format_exc()
json.dump(report, sys.stdout)
`
