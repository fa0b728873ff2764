#!/usr/bin/env python3
"""A file sink participant of the two-phase-commit coordinator, in Python 3, built on the
Python client (clients/python, package twophase: standard library only).

It plays the same part as the Go FileSink (e2e/sinks/filesink.go): it receives events from
the pipeline's source over a unix socket (e2e/pipeline/stream.go: JSON lines, "reset",
events, "barrier"), and for each checkpoint writes them to a temp file that it fsyncs
(prepare), renames into place (commit) or removes (abort). Its committables are
[{"temp": ".pending-<id>.jsonl", "final": "part-<id>.jsonl", "events": n}], the same as
the Go sink's, so the same reader checks both.

The protocol is twophase.Runner's: it registers, recovers (removing temp files that no
recorded vote names), applies what is owed in checkpoint order, prepares and votes, waits
for decisions by long-poll, and acks after each commit or rollback. Transient failures are
retried; a newer instance's registration stops it (exit 3).

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
import logging
import os
import signal
import socket
import sys
import threading
import time

# The package from this checkout, unless one is installed.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "clients", "python"))

import twophase  # noqa: E402

TEMP_PREFIX = ".pending-"
FINAL_PREFIX = "part-"


def log(msg, **kw):
    fields = " ".join(f"{k}={v}" for k, v in kw.items())
    print(f"pysink pid={os.getpid()} {msg} {fields}", file=sys.stderr, flush=True)


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


class FileSink:
    """The application's part: prepare, commit, abort and recover, for twophase.Runner."""

    def __init__(self, coord, job, name, inbox, directory):
        self.coord = coord
        self.job = job
        self.name = name
        self.inbox = inbox
        self.dir = directory

    # Phase one.
    def prepare(self, checkpoint):
        cid = int(checkpoint)
        events = self.inbox.take(cid, lambda: not checkpoint.decided.is_set())
        if events is None:
            raise RuntimeError("barrier never came")  # the Runner votes abort, unless decided
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
                    raise twophase.Permanent(f"checkpoint {cid}: {c['temp']} is neither pending nor committed")
        fsync_dir(self.dir)

    def abort(self, cid, committables):
        for c in committables:
            try:
                os.remove(os.path.join(self.dir, c["temp"]))
            except FileNotFoundError:
                pass
        fsync_dir(self.dir)

    def recover(self, epoch, pending):
        """Temp files that no pending item names: left by a process that died between
        writing them and voting, or before it applied a decision."""
        log("registered", epoch=epoch, owed=len(pending))
        owed = {c["temp"] for it in pending for c in (it.committables or []) if isinstance(c, dict)}
        for name in sorted(os.listdir(self.dir)):
            if not name.startswith(TEMP_PREFIX) or name in owed:
                continue
            cid = int(name[len(TEMP_PREFIX):].split(".")[0])
            try:
                cp = self.coord.get_checkpoint(self.job, cid, participant=self.name)
            except (twophase.NotFound, twophase.Gone):
                cp = None
            entry = cp.participant(self.name) if cp is not None else None
            voted = entry is not None and entry.vote == "prepared" and \
                any(isinstance(c, dict) and c.get("temp") == name for c in (entry.committables or []))
            if cp is not None and cp.status == "preparing" and voted:
                continue
            committable = {"temp": name, "final": f"{FINAL_PREFIX}{cid:020d}.jsonl"}
            if cp is not None and cp.status in ("committing", "committed") and voted:
                self.commit(cid, [committable])
            else:
                self.abort(cid, [committable])
                log("recovered: removed an orphan temp file", file=name, status=cp.status if cp else "gone")


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
    logging.basicConfig(level=logging.INFO, format=f"pysink pid={os.getpid()} %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    inbox = Inbox(args.socket, args.name)
    threading.Thread(target=inbox.run, daemon=True).start()
    try:
        coord = twophase.Coordinator(args.coordinator, token=args.token or None, ca_file=args.ca_file,
                                     cert_file=args.client_cert_file, key_file=args.client_key_file, max_backoff=1.0)
        sink = FileSink(coord, args.job, args.name, inbox, args.dir)
        # The vote waits for the decision up to 10 s, and so does the long-poll on pending.
        runner = twophase.Runner(coord, args.job, args.name, prepare=sink.prepare, commit=sink.commit,
                                 abort=sink.abort, recover=sink.recover, wait_ms=10000)
        runner.run(stop)
    except twophase.Fenced:
        log("fenced: a newer instance registered; stopping")
        return 3
    except twophase.Misconfigured as e:
        log(f"stopping: {e}")
        return 2
    except (twophase.Unauthenticated, twophase.Forbidden) as e:
        log(f"stopping: the coordinator refused the request ({e}); check --token")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
