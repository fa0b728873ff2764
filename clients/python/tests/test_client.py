"""The client against real coordinators: every operation, each problem code as its
exception, retries through a coordinator's SIGKILL, a lost answer, TLS and tokens."""

from __future__ import annotations

import http.server
import json
import threading
import time
import unittest

import twophase
from tests.fixture import admin, control, env, eventually, unique


class Operations(unittest.TestCase):
    def setUp(self) -> None:
        self.c = admin()

    def test_every_operation(self) -> None:
        c = self.c
        info = c.info()
        self.assertEqual(info.store, "postgres")
        self.assertTrue(c.ready())

        job = unique("ops")
        created = c.put_job(job, ["a", "b"], checkpoint_timeout_ms=60000, retention_ms=0)
        self.assertEqual(created.participants, ["a", "b"])
        self.assertIsNone(created.last_checkpoint)
        updated = c.put_job(job, ["a", "b"], max_concurrent_checkpoints=2, retention_ms=0)
        self.assertEqual(updated.max_concurrent_checkpoints, 2)
        self.assertEqual(c.get_job(job).name, job)

        for extra in ("x", "y"):
            c.put_job(f"{job}-{extra}", ["a"])
        page = c.jobs(limit=1)
        self.assertEqual(len(page.items), 1)
        self.assertIsNotNone(page.next_cursor)
        names = [j.name for j in c.iter_jobs(limit=2)]
        for n in (job, f"{job}-x", f"{job}-y"):
            self.assertIn(n, names)
        self.assertEqual(names, sorted(names))

        ra = c.register(job, "a")
        rb = c.register(job, "b")
        self.assertGreaterEqual(ra.epoch, 1)
        self.assertEqual(ra.pending, [])
        cp = c.open_checkpoint(job, timeout_ms=30000)
        self.assertEqual((cp.job, cp.id, cp.status), (job, 1, "preparing"))
        p = c.pending(job, "a")
        self.assertEqual([(i.checkpoint, i.action) for i in p.items], [(1, "vote")])

        after_a = c.vote(job, 1, "a", ra.epoch, committables=[{"txn": "a-1"}, 2, "three", None])
        self.assertEqual(after_a.status, "preparing")
        # A minimal answer leaves the caller's own committables out.
        self.assertIsNone(after_a.participant("a").committables)
        self.assertEqual(after_a.votes, {"prepared": 1, "abort": 0, "missing": 1})
        after_b = c.vote(job, 1, "b", rb.epoch, committables=[], minimal=False)
        self.assertEqual(after_b.status, "committing")
        self.assertEqual(after_b.participant("a").committables, [{"txn": "a-1"}, 2, "three", None])
        self.assertEqual(after_b.decision_cause, "all_prepared")

        glance = c.participants(job)
        self.assertEqual([(p.name, p.epoch, p.owed) for p in glance], [("a", ra.epoch, 1), ("b", rb.epoch, 1)])
        self.assertIsNotNone(glance[0].registered_at)
        self.assertIsNotNone(glance[0].last_vote_at)
        self.assertGreaterEqual(glance[0].last_vote_ms, 0)
        self.assertIsNone(glance[0].last_ack_at)
        owed = c.pending(job, "a", wait_ms=1000, epoch=ra.epoch)
        self.assertEqual([(i.checkpoint, i.action, i.committables) for i in owed.items],
                         [(1, "commit", [{"txn": "a-1"}, 2, "three", None])])
        c.ack(job, 1, "a", ra.epoch)
        full = c.get_checkpoint(job, 1)
        self.assertEqual(full.status, "committing")
        self.assertEqual(full.participant("a").acked_by, "a")
        # An operator settles b's ack.
        done = c.complete(job, 1, "b is gone for good")
        self.assertEqual(done.status, "committed")
        self.assertEqual(done.participant("b").acked_by, "admin")

        second = c.open_checkpoint(job)
        aborted = c.abort(job, second.id, "by the test")
        self.assertEqual((aborted.status, aborted.abort_reason, aborted.decision_cause),
                         ("aborted", "by the test", "abort_request"))
        waited = c.get_checkpoint(job, second.id, wait_ms=50, participant="a")
        self.assertEqual(waited.status, "aborted")
        self.assertEqual([p.name for p in waited.participants], ["a"])

        listed = c.checkpoints(job)
        self.assertEqual([x.id for x in listed.items], [2, 1])
        self.assertEqual([x.id for x in c.checkpoints(job, status=["aborted"]).items], [2])
        self.assertEqual([x.id for x in c.iter_checkpoints(job, limit=1)], [2, 1])

        manual = unique("manual")
        c.put_job(manual, ["a"], auto_commit=False)
        e = c.register(manual, "a").epoch
        m1 = c.open_checkpoint(manual)
        self.assertEqual(c.vote(manual, m1.id, "a", e, committables=[1]).status, "preparing")
        hanging = c.all_checkpoints(job=manual)
        self.assertEqual([(x.job, x.id) for x in hanging.items], [(manual, m1.id)])
        self.assertEqual(c.commit(manual, m1.id, "looks good").decision_cause, "commit_request")

        actions = [(a.action, a.job) for a in c.iter_audit(job=job, limit=2)]
        self.assertIn(("job_created", job), actions)
        self.assertIn(("checkpoint_completed", job), actions)

        tok = c.create_token(unique("reader"), ["read"], job=job)
        self.assertTrue(tok.token)
        self.assertNotIn(tok.token, repr(tok))
        self.assertEqual(c.get_token(tok.name).scopes, ["read"])
        self.assertIn(tok.name, [t.name for t in c.tokens(limit=1000).items])
        reader = twophase.Coordinator(env("TWOPHASE_URL"), token=tok.token)
        self.assertEqual(reader.get_job(job).name, job)
        c.revoke_token(tok.name)
        eventually("the revoked token refused", lambda: _refused(reader, job))

        c.delete_job(f"{job}-x")
        with self.assertRaises(twophase.NotFound):
            c.get_job(f"{job}-x")


def _refused(c: twophase.Coordinator, job: str) -> bool:
    try:
        c.get_job(job)
        return False
    except twophase.Unauthenticated:
        return True


class ProblemCodes(unittest.TestCase):
    """Each code of the contract, provoked for real, raises its own class."""

    def setUp(self) -> None:
        self.c = admin(max_attempts=3)

    def check(self, cls, status: int, code: str, fn):
        with self.assertRaises(cls) as ctx:
            fn()
        err = ctx.exception
        self.assertIsInstance(err, twophase.CoordinatorError)
        self.assertEqual((err.status, err.code, err.problem["code"]), (status, code, code))
        self.assertTrue(err.detail)
        self.assertEqual(err.problem["type"], "/problems/" + code)
        return err

    def test_codes(self) -> None:
        c = self.c
        job = unique("codes")
        err = self.check(twophase.InvalidRequest, 400, "invalid_request", lambda: c.put_job(job, ["not a name"]))
        self.assertTrue(err.problem["errors"])
        self.check(twophase.NotFound, 404, "not_found", lambda: c.get_job(unique("missing")))
        c.put_job(job, ["a", "b"], max_concurrent_checkpoints=2, auto_commit=False)
        self.check(twophase.NotRegistered, 409, "not_registered", lambda: (c.open_checkpoint(job), c.vote(job, 1, "a", 0)))
        old = c.register(job, "a").epoch
        new = c.register(job, "a").epoch
        eb = c.register(job, "b").epoch
        self.check(twophase.Fenced, 409, "fenced", lambda: c.vote(job, 1, "a", old, committables=[]))
        cp = c.open_checkpoint(job)
        c.vote(job, cp.id, "a", new, committables=["x"])
        self.check(twophase.VoteConflict, 409, "vote_conflict", lambda: c.vote(job, cp.id, "a", new, committables=["y"]))
        self.check(twophase.NotDecided, 409, "not_decided", lambda: c.ack(job, cp.id, "a", new))
        err = self.check(twophase.VotesMissing, 409, "votes_missing", lambda: c.commit(job, cp.id))
        self.assertEqual(err.problem["missing"], ["b"])
        self.check(twophase.TooManyCheckpoints, 409, "too_many_checkpoints",
                   lambda: (c.open_checkpoint(job), c.open_checkpoint(job)))
        higher = c.get_job(job).last_checkpoint
        c.vote(job, higher, "a", new, committables=[])
        c.vote(job, higher, "b", eb, committables=[])
        self.check(twophase.LowerCheckpointOpen, 409, "lower_checkpoint_open", lambda: c.commit(job, higher))
        self.check(twophase.JobBusy, 409, "job_busy", lambda: c.delete_job(job))
        c.abort(job, cp.id, "cascade")
        err = self.check(twophase.AlreadyDecided, 409, "already_decided", lambda: c.vote(job, cp.id, "b", eb, vote="abort", reason="late"))
        self.assertEqual(err.checkpoint.status, "aborted")
        self.assertEqual(err.checkpoint.id, cp.id)
        self.assertEqual(c.get_checkpoint(job, higher).decision_cause, "lower_aborted")

        idem = unique("idem")
        c.put_job(idem, ["a"])
        c.open_checkpoint(idem, idempotency_key="k-1", timeout_ms=5000)
        self.check(twophase.IdempotencyConflict, 409, "idempotency_conflict",
                   lambda: c.open_checkpoint(idem, idempotency_key="k-1", timeout_ms=6000))

        name = unique("tok")
        c.create_token(name, ["read"], job="*")
        self.check(twophase.TokenExists, 409, "token_exists", lambda: c.create_token(name, ["read"], job="*"))

        stranger = twophase.Coordinator(env("TWOPHASE_URL"), token="tpc_not-a-token-of-this-coordinator", max_attempts=2)
        self.check(twophase.Unauthenticated, 401, "unauthenticated", lambda: stranger.get_job(job))
        reader = c.create_token(unique("reader"), ["read"], job=job)
        ro = twophase.Coordinator(env("TWOPHASE_URL"), token=reader.token, max_attempts=2)
        err = self.check(twophase.Forbidden, 403, "forbidden", lambda: ro.put_job(job, ["a"]))
        self.assertIn("operator", err.detail)

        big = "x" * (1 << 20)
        self.check(twophase.PayloadTooLarge, 413, "payload_too_large", lambda: c.vote(idem, 1, "a", 1, committables=[big]))
        self.check(twophase.UnsupportedMediaType, 415, "unsupported_media_type",
                   lambda: c._call("put job", "PUT", f"/v1/jobs/{job}", body={"participants": ["a"]},
                                   headers={"Content-Type": "text/plain"}))
        self.check(twophase.MethodNotAllowed, 405, "method_not_allowed", lambda: c._call("patch", "PATCH", f"/v1/jobs/{job}"))
        self.check(twophase.MisdirectedRequest, 421, "misdirected_request",
                   lambda: c._call("get job", "GET", f"/v1/jobs/{job}", headers={"Host": "coordinator.elsewhere.example"}))

    def test_gone(self) -> None:
        c = admin()
        job = unique("gone")
        c.put_job(job, ["a"], retention_ms=1000)
        e = c.register(job, "a").epoch
        for _ in range(2):
            cp = c.open_checkpoint(job)
            c.vote(job, cp.id, "a", e, committables=[])
            c.ack(job, cp.id, "a", e)
        time.sleep(1.2)
        control("restart")  # the start-up pass of retention deletes checkpoint 1
        deadline = time.monotonic() + 30
        while True:
            try:
                c.get_checkpoint(job, 1)
            except twophase.Gone as err:
                self.assertEqual((err.status, err.code), (410, "gone"))
                break
            if time.monotonic() > deadline:
                self.fail("checkpoint 1 was not deleted by retention")
            time.sleep(0.2)
        self.assertEqual(c.get_job(job).last_checkpoint, 2)


class _Stub(http.server.BaseHTTPRequestHandler):
    """A server that is not a coordinator (a proxy in between, say): what the client does
    with answers that the coordinator itself does not give on demand."""

    answers: list = []
    seen: list = []

    def do_GET(self) -> None:
        self.seen.append(time.monotonic())
        status, headers, body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class Answers(unittest.TestCase):
    def serve(self, answers):
        _Stub.answers, _Stub.seen = list(answers), []
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.shutdown)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    def test_unavailable_honours_retry_after_then_raises(self) -> None:
        problem = json.dumps({"type": "/problems/unavailable", "title": "x", "status": 503, "code": "unavailable",
                              "detail": "the database is away"}).encode()
        url = self.serve([(503, {"Content-Type": "application/problem+json", "Retry-After": "1"}, problem)])
        c = twophase.Coordinator(url, max_attempts=2, min_backoff=0.01, max_backoff=5)
        with self.assertRaises(twophase.Unavailable) as ctx:
            c.get_job("x")
        self.assertEqual(ctx.exception.retry_after, 1.0)
        self.assertEqual(len(_Stub.seen), 2)
        self.assertGreaterEqual(_Stub.seen[1] - _Stub.seen[0], 0.95)

    def test_internal_and_unknown_codes_and_no_problem(self) -> None:
        internal = json.dumps({"type": "/problems/internal", "title": "x", "status": 500, "code": "internal"}).encode()
        future = json.dumps({"type": "/problems/new", "title": "x", "status": 409, "code": "a_code_of_tomorrow"}).encode()
        url = self.serve([(500, {"Content-Type": "application/problem+json"}, internal),
                          (409, {"Content-Type": "application/problem+json"}, future),
                          (502, {"Content-Type": "text/html"}, b"<h1>bad gateway</h1>")])
        c = twophase.Coordinator(url, max_attempts=1)
        with self.assertRaises(twophase.InternalError):
            c.get_job("x")
        with self.assertRaises(twophase.CoordinatorError) as ctx:
            c.get_job("x")
        self.assertIs(type(ctx.exception), twophase.CoordinatorError)
        self.assertEqual(ctx.exception.code, "a_code_of_tomorrow")
        with self.assertRaises(twophase.CoordinatorError) as ctx:
            c.get_job("x")
        self.assertIsNone(ctx.exception.code)
        self.assertIn("bad gateway", ctx.exception.body)

    def test_retries_5xx_until_success(self) -> None:
        ok = json.dumps({"name": "x", "participants": ["a"]}).encode()
        url = self.serve([(502, {}, b""), (429, {}, b""), (408, {}, b""), (200, {"Content-Type": "application/json"}, ok)])
        c = twophase.Coordinator(url, min_backoff=0.01, max_backoff=0.05)
        self.assertEqual(c.get_job("x").name, "x")
        self.assertEqual(len(_Stub.seen), 4)


class Faults(unittest.TestCase):
    def test_retries_through_a_coordinator_kill(self) -> None:
        c = admin()
        job = unique("kill")
        c.put_job(job, ["a"])
        e = c.register(job, "a").epoch
        control("restart")  # SIGKILL now, started again in the background
        cp = c.open_checkpoint(job)  # retried until the coordinator is back
        control("restart")
        after = c.vote(job, cp.id, "a", e, committables=["k"])
        self.assertEqual(after.status, "committing")
        control("restart")
        self.assertEqual(c.ack(job, cp.id, "a", e).status, "committed")
        self.assertEqual(c.get_job(job).last_checkpoint, cp.id)

    def test_a_lost_answer_opens_one_checkpoint(self) -> None:
        c = admin("TWOPHASE_PROXY_URL")
        job = unique("lost")
        c.put_job(job, ["a"])
        control("lose-answers?n=2")  # the first two attempts are served, their answers lost
        cp = c.open_checkpoint(job)
        self.assertEqual(cp.id, 1)
        self.assertEqual(c.get_job(job).last_checkpoint, 1)
        self.assertEqual([x.id for x in c.checkpoints(job).items], [1])
        # A vote whose answer was lost is retried; the repeat changes nothing.
        e = c.register(job, "a").epoch  # registration aborted checkpoint 1
        cp2 = c.open_checkpoint(job)
        control("lose-answers?n=1")
        self.assertEqual(c.vote(job, cp2.id, "a", e, committables=["once"]).status, "committing")
        self.assertEqual(c.get_job(job).last_checkpoint, 2)


class Transport(unittest.TestCase):
    def test_tls_with_a_client_certificate(self) -> None:
        c = twophase.Coordinator(env("TWOPHASE_TLS_URL"), token=env("TWOPHASE_ADMIN_TOKEN"),
                                 ca_file=env("TWOPHASE_CA_FILE"), cert_file=env("TWOPHASE_CLIENT_CERT"),
                                 key_file=env("TWOPHASE_CLIENT_KEY"))
        job = unique("tls")
        self.assertEqual(c.put_job(job, ["a"]).name, job)
        self.assertEqual(c.register(job, "a").epoch, 1)

    def test_an_untrusted_certificate_is_not_retried(self) -> None:
        # No CA: the system's do not know the test's CA. With no limit on attempts, only
        # failing at once ends the call (a guard cancels it after 20 s).
        c = twophase.Coordinator(env("TWOPHASE_TLS_URL"), token=env("TWOPHASE_ADMIN_TOKEN"))
        cancel = twophase.Cancel()
        timer = threading.Timer(20, cancel.set)
        timer.start()
        try:
            with self.assertRaises(twophase.Misconfigured) as ctx:
                c._call("info", "GET", "/v1/info", cancel=cancel)
        finally:
            timer.cancel()
        self.assertIn("certificate", str(ctx.exception))

    def test_the_token_never_shows(self) -> None:
        c = admin()
        self.assertNotIn(env("TWOPHASE_ADMIN_TOKEN"), repr(c))
        with self.assertRaises(twophase.NotFound) as ctx:
            c.get_job(unique("nothing"))
        self.assertNotIn(env("TWOPHASE_ADMIN_TOKEN"), str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
