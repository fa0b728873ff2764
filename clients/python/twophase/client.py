"""The coordinator's HTTP API, one method per operation of its openapi.yaml, with the
retries that the Go client makes: connection errors, 5xx, 408 and 429 are retried with
exponential backoff and jitter (a 503's Retry-After honoured), an Idempotency-Key goes with
every open_checkpoint so that a retry never opens two, and a certificate that cannot be
verified fails at once."""

from __future__ import annotations

import http.client
import json
import logging
import random
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from .errors import CoordinatorError, Misconfigured, error_for
from .types import AuditEntry, Checkpoint, Info, Job, Page, ParticipantView, Pending, Registration, Token

__all__ = ["Coordinator", "Cancel", "Cancelled"]

T = TypeVar("T")

log = logging.getLogger("twophase")

# From this attempt on, a call that goes on retrying says so at WARNING: one failure is a
# glitch, several in a row something an operator should see.
WARN_AFTER = 3


class Cancelled(Exception):
    """The call was cancelled (its Cancel was set) before it succeeded."""


class Cancel:
    """Ends calls at once from another thread: their backoff sleeps and the request in
    flight (a long-poll, say) stop, and they raise Cancelled. One Cancel may serve many
    calls made one after the other (a Runner's)."""

    def __init__(self, event: Optional[threading.Event] = None) -> None:
        self.event = event or threading.Event()
        self._lock = threading.Lock()
        self._conns: set = set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self) -> None:
        self.event.set()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _shutdown(c)

    def wait(self, seconds: float) -> bool:
        return self.event.wait(seconds)

    def _track(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._conns.add(conn)
        if self.event.is_set():
            _shutdown(conn)

    def _untrack(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._conns.discard(conn)


def _shutdown(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _q(part: Any) -> str:
    return urllib.parse.quote(str(part), safe="")


class _Answer:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Coordinator:
    """A client of one coordinator (or of several behind one URL).

    url: ``http://host:port`` or ``https://...``. token: a bearer token (``tpc_...``).
    timeout: seconds one attempt may take, a long-poll's wait on top. ca_file: PEM file of
    the CAs the coordinator's certificate must be signed by (default: the system's).
    cert_file, key_file: a client certificate, for a coordinator that asks for one.
    max_attempts: attempts per call, 0 to retry until the call's Cancel is set (the
    default: as the Go client with a context without deadline, for a Runner that must
    outlive any outage). min_backoff, max_backoff: bounds of the backoff in seconds; a
    Retry-After is honoured up to max_backoff. minimal: send ``Prefer: return=minimal``
    on votes and acks, whose answers then leave the caller's committables out.

    Methods raise a CoordinatorError subclass (``Fenced``, ``NotFound``, ...) when the
    coordinator refuses, ``Misconfigured`` for a certificate that cannot be verified,
    ``Cancelled`` when their Cancel is set, and the last error when ``max_attempts`` ran out.
    A Coordinator may be shared by threads: each thread keeps its own connection."""

    def __init__(self, url: str, token: Optional[str] = None, *, timeout: float = 10.0,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 max_attempts: int = 0, min_backoff: float = 0.05, max_backoff: float = 5.0,
                 minimal: bool = True, logger: Optional[logging.Logger] = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise Misconfigured(f"the coordinator's URL must be http:// or https://host[:port], not {url!r}")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.minimal = minimal
        self.log = logger or log
        self._ssl: Optional[ssl.SSLContext] = None
        if self._https:
            ctx = ssl.create_default_context(cafile=ca_file)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            if cert_file:
                ctx.load_cert_chain(cert_file, key_file)
            self._ssl = ctx
        elif ca_file or cert_file:
            raise Misconfigured("ca_file and cert_file need an https:// URL")
        self._local = threading.local()

    def __repr__(self) -> str:  # never the token
        return f"Coordinator({self.url!r})"

    # --- transport ---

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port, context=self._ssl)
            else:
                conn = http.client.HTTPConnection(self._host, self._port)
            self._local.conn = conn
        return conn

    def _drop_conn(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        """Closes this thread's connection (others close when their threads end)."""
        self._drop_conn()

    def _attempt(self, method: str, path: str, body: Optional[bytes], headers: Dict[str, str], timeout: float,
                 cancel: Optional[Cancel]) -> _Answer:
        conn = self._conn()
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        if cancel is not None:
            cancel._track(conn)
        try:
            conn.request(method, self._prefix + path, body=body, headers=headers)
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            resp = conn.getresponse()
            data = resp.read()
            if resp.getheader("Connection", "").lower() == "close":
                self._drop_conn()
            return _Answer(resp.status, resp.headers, data)
        except BaseException:
            self._drop_conn()
            raise
        finally:
            if cancel is not None:
                cancel._untrack(conn)

    def backoff(self, attempt: int) -> float:
        """The delay before attempt+1: exponential from min_backoff, capped at max_backoff,
        half fixed and half random ("equal jitter"), so that participants that failed
        together do not retry together."""
        d = min(self.max_backoff, self.min_backoff * (2 ** min(attempt - 1, 30)))
        return d / 2 + random.random() * d / 2

    def _call(self, op: str, method: str, path: str, *, body: Any = None, query: Optional[Dict[str, Any]] = None,
              headers: Optional[Dict[str, str]] = None, wait_ms: int = 0, cancel: Optional[Cancel] = None,
              ok: Sequence[int] = (200,)) -> _Answer:
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                path += "?" + urllib.parse.urlencode(q)
        hdrs = {"Accept": "application/json"}
        if self._token:
            hdrs["Authorization"] = "Bearer " + self._token
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            hdrs["Content-Type"] = "application/json"
        if headers:
            hdrs.update(headers)
        timeout = self.timeout + wait_ms / 1000.0
        attempt = 0
        while True:
            attempt += 1
            if cancel is not None and cancel.is_set():
                raise Cancelled(op)
            retry_after = 0.0
            try:
                ans = self._attempt(method, path, data, hdrs, timeout, cancel)
            except ssl.SSLCertVerificationError as e:
                raise Misconfigured(f"{op}: the coordinator's certificate cannot be verified "
                                    f"({e.verify_message}): check ca_file and the URL's host name") from None
            except (OSError, http.client.HTTPException) as e:
                if cancel is not None and cancel.is_set():
                    raise Cancelled(op) from None
                last: Exception = ConnectionError(f"{op}: {e.__class__.__name__}: {e}")
            else:
                if ans.status in ok:
                    return ans
                err = self._error(op, ans)
                if not err.transient:
                    raise err
                last = err
                retry_after = err.retry_after or 0.0
            if self.max_attempts and attempt >= self.max_attempts:
                raise last
            delay = max(self.backoff(attempt), min(retry_after, self.max_backoff))
            level = logging.WARNING if attempt >= WARN_AFTER else logging.DEBUG
            self.log.log(level, "coordinator call failed, retrying: op=%s attempt=%d delay=%.3fs error=%s",
                         op, attempt, delay, last)
            if cancel is not None:
                if cancel.wait(delay):
                    raise Cancelled(op)
            else:
                time.sleep(delay)

    @staticmethod
    def _error(op: str, ans: _Answer) -> CoordinatorError:
        problem = None
        ctype = (ans.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype == "application/problem+json":
            try:
                doc = json.loads(ans.body)
                if isinstance(doc, dict) and doc.get("status"):
                    problem = doc
            except ValueError:
                pass
        retry_after = None
        ra = ans.headers.get("Retry-After")
        if ra and ra.strip().isdigit():
            retry_after = float(ra.strip())
        body = "" if problem else ans.body[:1024].decode("utf-8", "replace")
        return error_for(op, ans.status, problem, body, retry_after)

    def _prefer(self, minimal: Optional[bool]) -> Dict[str, str]:
        return {"Prefer": "return=minimal"} if (self.minimal if minimal is None else minimal) else {}

    # --- jobs ---

    def put_job(self, job: str, participants: Sequence[str], *, checkpoint_timeout_ms: Optional[int] = None,
                max_concurrent_checkpoints: Optional[int] = None, auto_commit: Optional[bool] = None,
                retention_ms: Optional[int] = None) -> Job:
        """Creates the job or replaces its configuration (new checkpoints use it)."""
        body: Dict[str, Any] = {"participants": list(participants)}
        for k, v in (("checkpoint_timeout_ms", checkpoint_timeout_ms), ("max_concurrent_checkpoints", max_concurrent_checkpoints),
                     ("auto_commit", auto_commit), ("retention_ms", retention_ms)):
            if v is not None:
                body[k] = v
        ans = self._call("put job", "PUT", f"/v1/jobs/{_q(job)}", body=body, ok=(200, 201))
        return Job.from_json(ans.json())

    def get_job(self, job: str) -> Job:
        return Job.from_json(self._call("get job", "GET", f"/v1/jobs/{_q(job)}").json())

    def jobs(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page:
        """One page of jobs, ordered by name (only those the token may read)."""
        raw = self._call("list jobs", "GET", "/v1/jobs", query={"limit": limit, "cursor": cursor}).json()
        return Page([Job.from_json(j) for j in raw["items"]], raw.get("next_cursor"))

    def iter_jobs(self, *, limit: Optional[int] = None) -> Iterator[Job]:
        """Every job, page after page."""
        return self._iterate(lambda cursor: self.jobs(limit=limit, cursor=cursor))

    def delete_job(self, job: str) -> None:
        """Deletes the job when it owes nothing (else JobBusy)."""
        self._call("delete job", "DELETE", f"/v1/jobs/{_q(job)}", ok=(204,))

    # --- participants ---

    def register(self, job: str, participant: str, *, cancel: Optional[Cancel] = None) -> Registration:
        """A new epoch for the participant, higher than any before, and what it owes."""
        ans = self._call("register", "POST", f"/v1/jobs/{_q(job)}/participants/{_q(participant)}/register", cancel=cancel)
        return Registration.from_json(ans.json())

    def pending(self, job: str, participant: str, *, wait_ms: int = 0, epoch: Optional[int] = None,
                cancel: Optional[Cancel] = None) -> Pending:
        """What the participant owes, oldest first. With wait_ms and nothing owed, the
        coordinator answers as soon as something is, or when wait_ms ends; with the
        caller's epoch it answers at once once that epoch is no longer current."""
        query: Dict[str, Any] = {}
        if wait_ms:
            query["wait_ms"] = wait_ms
            if epoch:
                query["epoch"] = epoch
        ans = self._call("pending", "GET", f"/v1/jobs/{_q(job)}/participants/{_q(participant)}/pending",
                         query=query, wait_ms=wait_ms, cancel=cancel)
        return Pending.from_json(ans.json())

    def participants(self, job: str) -> List[ParticipantView]:
        """Each participant of the job at a glance: epoch, registration, last vote and how
        long after its checkpoint opened it came, last ack, and how much it owes."""
        raw = self._call("list participants", "GET", f"/v1/jobs/{_q(job)}/participants").json()
        return [ParticipantView.from_json(p) for p in raw["items"]]

    # --- checkpoints ---

    def open_checkpoint(self, job: str, *, timeout_ms: Optional[int] = None, idempotency_key: Optional[str] = None,
                        cancel: Optional[Cancel] = None) -> Checkpoint:
        """Opens the job's next checkpoint (phase one). Every attempt carries the same
        Idempotency-Key (a new one when none is given), so a retry after a lost answer
        returns the checkpoint that the first attempt opened. TooManyCheckpoints: as many
        as the job allows are preparing."""
        key = idempotency_key or "py-" + uuid.uuid4().hex
        body = {} if timeout_ms is None else {"timeout_ms": timeout_ms}
        ans = self._call("open checkpoint", "POST", f"/v1/jobs/{_q(job)}/checkpoints", body=body,
                         headers={"Idempotency-Key": key}, ok=(200, 201), cancel=cancel)
        return Checkpoint.from_json(ans.json())

    def get_checkpoint(self, job: str, checkpoint: int, *, wait_ms: int = 0, participant: Optional[str] = None,
                       cancel: Optional[Cancel] = None) -> Checkpoint:
        """One checkpoint. wait_ms: wait up to that long while it is preparing. With
        participant, the minimal view: only that participant's entry, and counts."""
        headers = {"Prefer": "return=minimal"} if participant else None
        ans = self._call("get checkpoint", "GET", f"/v1/jobs/{_q(job)}/checkpoints/{int(checkpoint)}",
                         query={"wait_ms": wait_ms or None, "participant": participant}, headers=headers,
                         wait_ms=wait_ms, cancel=cancel)
        return Checkpoint.from_json(ans.json())

    def checkpoints(self, job: str, *, status: Optional[Sequence[str]] = None, limit: Optional[int] = None,
                    cursor: Optional[str] = None) -> Page:
        """One page of the job's checkpoints, newest first, optionally of some statuses."""
        raw = self._call("list checkpoints", "GET", f"/v1/jobs/{_q(job)}/checkpoints",
                         query={"status": ",".join(status) if status else None, "limit": limit, "cursor": cursor}).json()
        return Page([Checkpoint.from_json(c) for c in raw["items"]], raw.get("next_cursor"))

    def iter_checkpoints(self, job: str, *, status: Optional[Sequence[str]] = None, limit: Optional[int] = None) -> Iterator[Checkpoint]:
        return self._iterate(lambda cursor: self.checkpoints(job, status=status, limit=limit, cursor=cursor))

    def all_checkpoints(self, *, status: Optional[Sequence[str]] = None, job: Optional[str] = None,
                        older_than_ms: Optional[int] = None, limit: Optional[int] = None,
                        cursor: Optional[str] = None) -> Page:
        """Operators: checkpoints across jobs, oldest first (default statuses preparing and
        committing); job is a name or a prefix ending in ``*``."""
        raw = self._call("list open checkpoints", "GET", "/v1/checkpoints",
                         query={"status": ",".join(status) if status else None, "job": job,
                                "older_than_ms": older_than_ms, "limit": limit, "cursor": cursor}).json()
        return Page([Checkpoint.from_json(c) for c in raw["items"]], raw.get("next_cursor"))

    def vote(self, job: str, checkpoint: int, participant: str, epoch: int, vote: str = "prepared", *,
             committables: Optional[List[Any]] = None, reason: Optional[str] = None, wait_ms: int = 0,
             minimal: Optional[bool] = None, cancel: Optional[Cancel] = None) -> Checkpoint:
        """Votes ``prepared`` (with committables, JSON values) or ``abort`` (with a reason).
        Answers the checkpoint after the vote; with wait_ms, once it is decided or the wait
        ends. Fenced: a newer epoch registered. AlreadyDecided: decided before the vote
        counted (its ``checkpoint`` shows whether an earlier attempt was recorded)."""
        body: Dict[str, Any] = {"epoch": epoch, "vote": vote}
        if vote == "prepared":
            body["committables"] = list(committables) if committables is not None else []
        elif reason is not None:
            body["reason"] = reason
        ans = self._call("vote", "PUT", f"/v1/jobs/{_q(job)}/checkpoints/{int(checkpoint)}/votes/{_q(participant)}",
                         body=body, query={"wait_ms": wait_ms or None}, headers=self._prefer(minimal),
                         wait_ms=wait_ms, cancel=cancel)
        return Checkpoint.from_json(ans.json())

    def ack(self, job: str, checkpoint: int, participant: str, epoch: int, *, minimal: Optional[bool] = None,
            cancel: Optional[Cancel] = None) -> Checkpoint:
        """The participant applied the decision. Send it only after the apply returned."""
        ans = self._call("ack", "PUT", f"/v1/jobs/{_q(job)}/checkpoints/{int(checkpoint)}/acks/{_q(participant)}",
                         body={"epoch": epoch}, headers=self._prefer(minimal), cancel=cancel)
        return Checkpoint.from_json(ans.json())

    def commit(self, job: str, checkpoint: int, reason: Optional[str] = None) -> Checkpoint:
        """Decides commit (for jobs without auto_commit); VotesMissing names who did not vote."""
        return self._decide("commit", job, checkpoint, reason)

    def abort(self, job: str, checkpoint: int, reason: Optional[str] = None, *, cancel: Optional[Cancel] = None) -> Checkpoint:
        """Decides abort (and aborts every higher checkpoint still preparing)."""
        return self._decide("abort", job, checkpoint, reason, cancel)

    def complete(self, job: str, checkpoint: int, reason: Optional[str] = None) -> Checkpoint:
        """Operators: records the acks that participants gone for good will never send."""
        return self._decide("complete", job, checkpoint, reason)

    def _decide(self, what: str, job: str, checkpoint: int, reason: Optional[str], cancel: Optional[Cancel] = None) -> Checkpoint:
        body = {} if reason is None else {"reason": reason}
        ans = self._call(what, "POST", f"/v1/jobs/{_q(job)}/checkpoints/{int(checkpoint)}/{what}", body=body, cancel=cancel)
        return Checkpoint.from_json(ans.json())

    # --- operations ---

    def audit(self, *, job: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page:
        """Actions taken by request, newest first."""
        raw = self._call("audit", "GET", "/v1/audit", query={"job": job, "limit": limit, "cursor": cursor}).json()
        return Page([AuditEntry.from_json(a) for a in raw["items"]], raw.get("next_cursor"))

    def iter_audit(self, *, job: Optional[str] = None, limit: Optional[int] = None) -> Iterator[AuditEntry]:
        return self._iterate(lambda cursor: self.audit(job=job, limit=limit, cursor=cursor))

    def info(self) -> Info:
        return Info.from_json(self._call("info", "GET", "/v1/info").json())

    def ready(self) -> bool:
        """Whether the coordinator is ready (its database answers and can be written)."""
        try:
            self._call("ready", "GET", "/readyz")
            return True
        except CoordinatorError:
            return False

    # --- tokens ---

    def create_token(self, name: str, scopes: Sequence[str], *, job: Optional[str] = None,
                     participant: Optional[str] = None, expires_at: Optional[str] = None) -> Token:
        """Admin: a new token; its secret is in ``.token``, shown this once."""
        body: Dict[str, Any] = {"name": name, "scopes": list(scopes)}
        for k, v in (("job", job), ("participant", participant), ("expires_at", expires_at)):
            if v is not None:
                body[k] = v
        ans = self._call("create token", "POST", "/v1/tokens", body=body, ok=(201,))
        return Token.from_json(ans.json())

    def tokens(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page:
        raw = self._call("list tokens", "GET", "/v1/tokens", query={"limit": limit, "cursor": cursor}).json()
        return Page([Token.from_json(t) for t in raw["items"]], raw.get("next_cursor"))

    def get_token(self, name: str) -> Token:
        return Token.from_json(self._call("get token", "GET", f"/v1/tokens/{_q(name)}").json())

    def revoke_token(self, name: str) -> None:
        self._call("revoke token", "DELETE", f"/v1/tokens/{_q(name)}", ok=(204,))

    @staticmethod
    def _iterate(page: Callable[[Optional[str]], Page]) -> Iterator[Any]:
        cursor: Optional[str] = None
        while True:
            p = page(cursor)
            yield from p.items
            if not p.next_cursor:
                return
            cursor = p.next_cursor
