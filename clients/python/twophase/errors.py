"""Errors: one exception class per problem code of the coordinator's contract."""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class CoordinatorError(Exception):
    """The coordinator refused a request with an RFC 9457 problem document, or answered
    with an error that carried none (then ``code`` is ``None`` and ``body`` holds the start
    of what was said: a proxy's page, say).

    ``status`` is the HTTP status, ``code`` the problem's stable machine code, ``detail``
    its human explanation and ``problem`` the whole document as a dict."""

    def __init__(self, op: str, status: int, problem: Optional[Dict[str, Any]] = None, body: str = "",
                 retry_after: Optional[float] = None) -> None:
        self.op = op
        self.status = status
        self.problem: Dict[str, Any] = problem or {}
        self.code: Optional[str] = self.problem.get("code")
        self.detail: Optional[str] = self.problem.get("detail")
        self.body = body
        self.retry_after = retry_after
        msg = f"{op}: HTTP {status}"
        if self.code:
            msg += f" {self.code}"
            if self.detail:
                msg += f": {self.detail}"
        elif body:
            msg += f" (not a problem document): {body!r}"
        super().__init__(msg)

    @property
    def checkpoint(self):  # -> Optional[Checkpoint]
        """The checkpoint as it stands, carried by problems about a checkpoint
        (``already_decided``, ``vote_conflict``, ...); ``None`` otherwise."""
        from .types import Checkpoint

        raw = self.problem.get("checkpoint")
        return Checkpoint.from_json(raw) if isinstance(raw, dict) else None

    @property
    def transient(self) -> bool:
        """Whether the same request may succeed later: 5xx, 408 and 429."""
        return self.status >= 500 or self.status in (408, 429)


class InvalidRequest(CoordinatorError):
    """400 ``invalid_request``: the request is wrong; ``problem["errors"]`` says where."""


class Unauthenticated(CoordinatorError):
    """401 ``unauthenticated``: no token, or one that is unknown, revoked or expired."""


class Forbidden(CoordinatorError):
    """403 ``forbidden``: the token does not allow this; ``detail`` names the scope that would."""


class NotFound(CoordinatorError):
    """404 ``not_found``: no such job, checkpoint, participant of the job, or token."""


class MethodNotAllowed(CoordinatorError):
    """405 ``method_not_allowed``."""


class VoteConflict(CoordinatorError):
    """409 ``vote_conflict``: this participant voted differently before."""


class Fenced(CoordinatorError):
    """409 ``fenced``: a newer instance of the participant registered; this one must stop."""


class NotRegistered(CoordinatorError):
    """409 ``not_registered``: epoch 0, the participant never registered."""


class AlreadyDecided(CoordinatorError):
    """409 ``already_decided``: the checkpoint was decided; ``checkpoint`` shows how."""


class NotDecided(CoordinatorError):
    """409 ``not_decided``: the checkpoint is still preparing."""


class VotesMissing(CoordinatorError):
    """409 ``votes_missing``: a commit without every prepared vote; ``problem["missing"]``."""


class LowerCheckpointOpen(CoordinatorError):
    """409 ``lower_checkpoint_open``: a lower checkpoint of the job is still preparing."""


class TooManyCheckpoints(CoordinatorError):
    """409 ``too_many_checkpoints``: as many as the job allows are preparing."""


class IdempotencyConflict(CoordinatorError):
    """409 ``idempotency_conflict``: the Idempotency-Key was used with another body."""


class JobBusy(CoordinatorError):
    """409 ``job_busy``: the job still owes something and cannot be deleted."""


class TokenExists(CoordinatorError):
    """409 ``token_exists``: a token of that name exists."""


class Gone(CoordinatorError):
    """410 ``gone``: retention deleted the checkpoint (it was final and owed nothing)."""


class PayloadTooLarge(CoordinatorError):
    """413 ``payload_too_large``."""


class UnsupportedMediaType(CoordinatorError):
    """415 ``unsupported_media_type``."""


class MisdirectedRequest(CoordinatorError):
    """421 ``misdirected_request``: a Host the coordinator does not serve."""


class Unavailable(CoordinatorError):
    """503 ``unavailable``: the database is away or a limit was reached; retried by the
    client, raised only when its attempts ran out."""


class InternalError(CoordinatorError):
    """500 ``internal``."""


class Misconfigured(Exception):
    """What retrying cannot fix, raised at once: a certificate that cannot be verified
    (unknown authority, wrong name, expired), or a URL that is not http(s)."""


class DecidedMeanwhile(Exception):
    """Raised by a ``prepare`` callback that gives up because the checkpoint was decided
    while it prepared (``checkpoint.decided`` was set): the Runner votes nothing."""


CLASSES: Dict[str, Type[CoordinatorError]] = {
    "invalid_request": InvalidRequest,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "vote_conflict": VoteConflict,
    "fenced": Fenced,
    "not_registered": NotRegistered,
    "already_decided": AlreadyDecided,
    "not_decided": NotDecided,
    "votes_missing": VotesMissing,
    "lower_checkpoint_open": LowerCheckpointOpen,
    "too_many_checkpoints": TooManyCheckpoints,
    "idempotency_conflict": IdempotencyConflict,
    "job_busy": JobBusy,
    "token_exists": TokenExists,
    "unauthenticated": Unauthenticated,
    "forbidden": Forbidden,
    "gone": Gone,
    "payload_too_large": PayloadTooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "misdirected_request": MisdirectedRequest,
    "unavailable": Unavailable,
    "internal": InternalError,
}


def error_for(op: str, status: int, problem: Optional[Dict[str, Any]], body: str,
              retry_after: Optional[float]) -> CoordinatorError:
    """The exception for an error answer: the class of its code, or the base class for a
    code this version does not know, or for an answer without a problem document."""
    cls = CLASSES.get((problem or {}).get("code") or "", CoordinatorError)
    return cls(op, status, problem, body, retry_after)
