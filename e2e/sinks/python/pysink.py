#!/usr/bin/env python3
"""A file sink participant of the two-phase-commit coordinator, in Python 3 with only the
standard library (urllib, json, socket): proof that the REST API needs no Go client.

It plays the same part as the Go FileSink (e2e/sinks/filesink.go): it receives events from
the pipeline's source over a unix socket (e2e/pipeline/stream.go: JSON lines, "reset",
events, "barrier"), and for each checkpoint writes them to a temp file that it fsyncs
(prepare), renames into place (commit) or removes (abort). Its committables are
[{"temp": ".pending-<id>.jsonl", "final": "part-<id>.jsonl", "events": n}], the same as
the Go sink's, so the same reader checks both.

The protocol, by hand:
  1. POST .../participants/<name>/register      -> new epoch + what is owed (pending)
  2. reconcile temp files that no pending item names with GET .../checkpoints/<id>
  3. loop: GET .../participants/<name>/pending?wait_ms=... (epoch changed -> fenced, exit 3),
     which the coordinator holds while nothing is owed
       commit items: rename temp -> final (idempotent), fsync dir, PUT .../acks/<name>
       abort items:  remove temp, PUT .../acks/<name>
       vote items:   wait for the barrier, write + fsync temp, PUT .../votes/<name>?wait_ms=...,
                     which the coordinator holds until the checkpoint is decided (the
                     decision is then applied and acked at once) or something else is owed
     the same long-poll on pending waits for the decision on a vote still in doubt (its
     commit or abort becomes owed); only a commit held behind a lower undecided checkpoint
     long-polls GET .../checkpoints/<lower>?wait_ms=... first
Transient failures (connection errors, 5xx, 503 with Retry-After) are retried with
exponential backoff and jitter; 409 fenced stops the process.

Usage: pysink.py --coordinator URL --job JOB --name NAME --socket PATH --dir DIR
                 [--token TOKEN] [--ca-file PEM] [--client-cert-file PEM --client-key-file PEM]

With a token (--token, or the environment variable PYSINK_TOKEN, which keeps it off the
command line), every request carries "Authorization: Bearer <token>"; the token is never
logged. For an https:// coordinator, --ca-file (or PYSINK_CA_FILE) names the PEM file of the
CAs its certificate must be signed by (default: the system's), and --client-cert-file and
--client-key-file a client certificate, for a coordinator that asks for one. A certificate
that cannot be verified stops the process (exit 2) rather than being retried, as does a
401 or 403 answer.
"""

import argparse
import json
import os
import random
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

TEMP_PREFIX = ".pending-"
FINAL_PREFIX = "part-"


def log(msg, **kw):
    fields = " ".join(f"{k}={v}" for k, v in kw.items())
    print(f"pysink pid={os.getpid()} {msg} {fields}", file=sys.stderr, flush=True)


class Problem(Exception):
    """A refusal of the coordinator (a 4xx problem document)."""

    def __init__(self, status, doc):
        super().__init__(f"HTTP {status} {doc.get('code')}: {doc.get('detail')}")
        self.status = status
        self.code = doc.get("code")
        self.doc = doc


class Fenced(Exception):
    pass


class Misconfigured(Exception):
    """What retrying cannot fix: a certificate that cannot be verified."""


class Coordinator:
    def __init__(self, base, job, name, token=None, tls_context=None):
        self.base = base.rstrip("/")
        self.job = job
        self.name = name
        self.token = token
        self.tls_context = tls_context  # for https:// only; None: the system's CAs

    def call(self, method, path, body=None, timeout=10, minimal=False):
        """Sends a request until it succeeds or is refused; returns the decoded answer."""
        delay = 0.02
        while True:
            data = None if body is None else json.dumps(body).encode()
            req = urllib.request.Request(self.base + path, data=data, method=method)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            if self.token:
                req.add_header("Authorization", "Bearer " + self.token)
            if minimal:
                # Only this participant's entry and the counts: the answer's size does not
                # grow with the job's participants.
                req.add_header("Prefer", "return=minimal")
            wait = delay
            try:
                with urllib.request.urlopen(req, timeout=timeout, context=self.tls_context) as resp:
                    raw = resp.read()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as e:  # before URLError: it is one
                raw = e.read()
                try:
                    doc = json.loads(raw) if raw else {}
                except ValueError:
                    doc = {}
                if e.code < 500 and e.code not in (408, 429):
                    raise Problem(e.code, doc) from None
                retry_after = e.headers.get("Retry-After")
                if retry_after and retry_after.isdigit():
                    wait = max(wait, min(float(retry_after), 5.0))
            except urllib.error.URLError as e:
                if isinstance(e.reason, ssl.SSLCertVerificationError):
                    raise Misconfigured(f"the coordinator's certificate cannot be verified: {e.reason.verify_message}") from None
            except ssl.SSLCertVerificationError as e:
                raise Misconfigured(f"the coordinator's certificate cannot be verified: {e.verify_message}") from None
            except (ConnectionError, TimeoutError, OSError, ValueError):
                pass
            # Equal jitter: half fixed, half random.
            time.sleep(wait / 2 + random.random() * wait / 2)
            delay = min(delay * 2, 1.0)

    def p(self, *parts):
        return "/".join(urllib.parse.quote(str(x), safe="") for x in parts)

    def register(self):
        return self.call("POST", f"/v1/jobs/{self.p(self.job)}/participants/{self.p(self.name)}/register")

    def pending(self, wait_ms=0, epoch=0):
        # With its epoch, the long-poll ends at once if a newer instance registered, even
        # before this request.
        q = (f"?wait_ms={wait_ms}" + (f"&epoch={epoch}" if epoch else "")) if wait_ms else ""
        return self.call("GET", f"/v1/jobs/{self.p(self.job)}/participants/{self.p(self.name)}/pending{q}",
                         timeout=10 + wait_ms / 1000)

    def checkpoint(self, cid, wait_ms=0):
        q = f"?participant={self.p(self.name)}" + (f"&wait_ms={wait_ms}" if wait_ms else "")
        return self.call("GET", f"/v1/jobs/{self.p(self.job)}/checkpoints/{cid}{q}", timeout=10 + wait_ms / 1000, minimal=True)

    def vote(self, cid, epoch, body, wait_ms=0):
        # With wait_ms, the answer comes once the checkpoint is decided, or still preparing
        # when the wait ends or this participant owes anything else.
        body = dict(body, epoch=epoch)
        q = f"?wait_ms={wait_ms}" if wait_ms else ""
        return self.call("PUT", f"/v1/jobs/{self.p(self.job)}/checkpoints/{cid}/votes/{self.p(self.name)}{q}", body,
                         timeout=10 + wait_ms / 1000, minimal=True)

    def ack(self, cid, epoch):
        return self.call("PUT", f"/v1/jobs/{self.p(self.job)}/checkpoints/{cid}/acks/{self.p(self.name)}", {"epoch": epoch},
                         minimal=True)


class Inbox:
    """The sink's end of the source's stream (see e2e/pipeline/stream.go)."""

    def __init__(self, path, name):
        self.path = path
        self.name = name
        self.cond = threading.Condition()
        self.open = []
        self.sealed = []  # [(checkpoint, events)]

    def clear(self):
        with self.cond:
            self.open, self.sealed = [], []
            self.cond.notify_all()

    def run(self):
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.path)
            except OSError:
                time.sleep(0.02)
                continue
            try:
                s.sendall((json.dumps({"hello": self.name}) + "\n").encode())
                f = s.makefile("r", encoding="utf-8", buffering=1 << 16)
                for line in f:
                    frame = json.loads(line)
                    with self.cond:
                        if "reset" in frame:
                            self.open, self.sealed = [], []
                        elif "barrier" in frame:
                            self.sealed.append((frame["barrier"], self.open))
                            self.open = []
                        elif "seq" in frame:
                            self.open.append({"seq": frame["seq"], "payload": frame.get("payload", "")})
                        self.cond.notify_all()
            except (OSError, ValueError):
                pass
            finally:
                s.close()
            self.clear()  # the source replays what was not prepared

    def take(self, cid, still_preparing):
        """Events up to barrier cid; None when the checkpoint is decided meanwhile or a
        higher barrier came first (barrier cid never will)."""
        last_check = time.monotonic()
        with self.cond:
            while True:
                for i, (c, _) in enumerate(self.sealed):
                    if c >= cid:
                        if c != cid:
                            return None
                        events = [e for _, evs in self.sealed[: i + 1] for e in evs]
                        del self.sealed[: i + 1]
                        return events
                self.cond.wait(timeout=0.1)
                if time.monotonic() - last_check > 0.5:
                    last_check = time.monotonic()
                    self.cond.release()
                    try:
                        alive = still_preparing()
                    finally:
                        self.cond.acquire()
                    if not alive:
                        return None


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Sink:
    def __init__(self, coord, inbox, directory, wait_ms=10000):
        self.c = coord
        self.inbox = inbox
        self.dir = directory
        self.wait_ms = wait_ms  # the long-polls' wait, on pending and on a prepared vote
        self.epoch = 0
        self.in_doubt = set()

    # Phase one.
    def prepare(self, cid):
        def still_preparing():
            return self.c.checkpoint(cid)["status"] == "preparing"

        events = self.inbox.take(cid, still_preparing)
        if events is None:
            return None
        if not events:
            return []
        temp = f"{TEMP_PREFIX}{cid:020d}.jsonl"
        final = f"{FINAL_PREFIX}{cid:020d}.jsonl"
        path = os.path.join(self.dir, temp)
        with open(path, "w", encoding="utf-8") as f:
            for e in events:
                f.write(json.dumps(e, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.dir)
        return [{"temp": temp, "final": final, "events": len(events)}]

    # Phase two.
    def commit(self, cid, committables):
        for c in committables:
            src, dst = os.path.join(self.dir, c["temp"]), os.path.join(self.dir, c["final"])
            try:
                os.rename(src, dst)
            except FileNotFoundError:
                if not os.path.exists(dst):
                    raise RuntimeError(f"checkpoint {cid}: {c['temp']} is neither pending nor committed")
        fsync_dir(self.dir)

    def abort(self, cid, committables):
        for c in committables:
            try:
                os.remove(os.path.join(self.dir, c["temp"]))
            except FileNotFoundError:
                pass
        fsync_dir(self.dir)

    def finish(self, cid, action, committables):
        (self.commit if action == "commit" else self.abort)(cid, committables or [])
        try:
            self.c.ack(cid, self.epoch)
        except Problem as p:
            if p.code == "fenced":
                raise Fenced() from None
            raise
        self.in_doubt.discard(cid)

    def voted_prepared(self, cp, match=None):
        for p in cp.get("participants", []):
            if p["name"] == self.c.name:
                return p.get("vote") == "prepared" and (match is None or match(p.get("committables") or []))
        return False

    def reconcile(self, pending):
        """Temp files that no pending item names: left by a process that died between
        writing them and voting, or before it applied a decision."""
        owed = {c["temp"] for it in pending for c in (it.get("committables") or [])}
        for name in sorted(os.listdir(self.dir)):
            if not name.startswith(TEMP_PREFIX) or name in owed:
                continue
            cid = int(name[len(TEMP_PREFIX):].split(".")[0])
            try:
                cp = self.c.checkpoint(cid)
            except Problem:
                continue
            voted = self.voted_prepared(cp, lambda cs: any(c.get("temp") == name for c in cs))
            if cp["status"] == "preparing" and voted:
                continue
            committable = {"temp": name, "final": f"{FINAL_PREFIX}{cid:020d}.jsonl"}
            if cp["status"] in ("committing", "committed") and voted:
                self.commit(cid, [committable])
            else:
                self.abort(cid, [committable])
                log("recovered: removed an orphan temp file", file=name, status=cp["status"])

    def vote(self, cid, first):
        if first:
            # Opened before this instance registered: its transaction died with the old one.
            body = {"vote": "abort", "reason": "participant restarted"}
            committables = None
        else:
            committables = self.prepare(cid)
            if committables is None:
                try:
                    self.c.vote(cid, self.epoch, {"vote": "abort", "reason": "barrier never came"})
                except Problem as p:
                    if p.code == "fenced":
                        raise Fenced() from None
                    if p.code != "already_decided":
                        raise
                return
            body = {"vote": "prepared", "committables": committables}
        try:
            cp = self.c.vote(cid, self.epoch, body, wait_ms=self.wait_ms if committables is not None else 0)
        except Problem as p:
            if p.code == "fenced":
                raise Fenced() from None
            if p.code == "already_decided":
                if committables and not self.voted_prepared(p.doc.get("checkpoint") or {}):
                    self.abort(cid, committables)  # never recorded: nobody will ask for it
                elif committables:
                    self.in_doubt.add(cid)
                return
            raise
        if committables is None:
            return
        if cp["status"] in ("committing", "committed") and not self.in_doubt:
            self.finish(cid, "commit", committables)
        elif cp["status"] == "aborted":
            self.finish(cid, "abort", committables)  # aborts keep no order
        else:
            self.in_doubt.add(cid)

    def run(self):
        reg = self.c.register()
        self.epoch = reg["epoch"]
        log("registered", epoch=self.epoch, owed=len(reg["pending"]))
        self.reconcile(reg["pending"])
        items, first = reg["pending"], True
        while True:
            blocked = False
            for it in sorted(items, key=lambda it: it["checkpoint"]):
                cid, action = it["checkpoint"], it["action"]
                if action == "commit":
                    if self.in_doubt and min(self.in_doubt) < cid:
                        blocked = True
                        break  # commits keep checkpoint order
                    self.finish(cid, "commit", it.get("committables"))
                elif action == "abort":
                    self.finish(cid, "abort", it.get("committables"))
                elif action == "vote":
                    self.vote(cid, first)
            first = False
            # One long-poll on pending waits for the next checkpoint and for the decision on
            # one in doubt alike (the decision makes its commit or abort owed). Only a commit
            # held back behind a lower undecided checkpoint waits for that one's decision:
            # pending would answer at once with the same commit.
            wait = self.wait_ms
            if blocked:
                self.c.checkpoint(min(self.in_doubt), wait_ms=5000)
                wait = 0
            pending = self.c.pending(wait_ms=wait, epoch=self.epoch)
            if pending["epoch"] != self.epoch:
                raise Fenced()
            items = pending["items"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--token", default=os.environ.get("PYSINK_TOKEN"),
                    help="bearer token sent on every request (default: $PYSINK_TOKEN)")
    ap.add_argument("--ca-file", default=os.environ.get("PYSINK_CA_FILE"),
                    help="PEM file of the CAs an https:// coordinator's certificate must be signed by (default: $PYSINK_CA_FILE, else the system's)")
    ap.add_argument("--client-cert-file", help="PEM client certificate to present over https")
    ap.add_argument("--client-key-file", help="PEM key of --client-cert-file")
    args = ap.parse_args()
    if bool(args.client_cert_file) != bool(args.client_key_file):
        ap.error("--client-cert-file and --client-key-file go together")
    tls_context = None
    if args.ca_file or args.client_cert_file:
        tls_context = ssl.create_default_context(cafile=args.ca_file)
        tls_context.minimum_version = ssl.TLSVersion.TLSv1_2
        if args.client_cert_file:
            tls_context.load_cert_chain(args.client_cert_file, args.client_key_file)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    inbox = Inbox(args.socket, args.name)
    threading.Thread(target=inbox.run, daemon=True).start()
    coord = Coordinator(args.coordinator, args.job, args.name, token=args.token or None, tls_context=tls_context)
    sink = Sink(coord, inbox, args.dir)
    try:
        sink.run()
    except Fenced:
        log("fenced: a newer instance registered; stopping")
        return 3
    except Misconfigured as e:
        log(f"stopping: {e}")
        return 2
    except Problem as p:
        if p.status not in (401, 403):
            raise
        log(f"stopping: the coordinator refused the request ({p}); check --token")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
