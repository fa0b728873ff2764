"""Client and participant runner for the two-phase-commit checkpoint coordinator.

    import threading, twophase

    coord = twophase.Coordinator("http://127.0.0.1:8080", token=None)
    runner = twophase.Runner(coord, "orders", "sink-a",
                             prepare=..., commit=..., abort=...)
    runner.run(threading.Event())   # until the event is set; raises twophase.Fenced when replaced

Standard library only; Python 3.9 or later.
"""

from .client import Cancel, Cancelled, Coordinator
from .errors import (
    AlreadyDecided,
    CoordinatorError,
    DecidedMeanwhile,
    Fenced,
    Forbidden,
    Gone,
    IdempotencyConflict,
    InternalError,
    InvalidRequest,
    JobBusy,
    LowerCheckpointOpen,
    MethodNotAllowed,
    Misconfigured,
    MisdirectedRequest,
    NotDecided,
    NotFound,
    NotRegistered,
    PayloadTooLarge,
    TokenExists,
    TooManyCheckpoints,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
    VoteConflict,
    VotesMissing,
)
from .runner import Permanent, Preparing, Runner
from .types import AuditEntry, Checkpoint, CheckpointParticipant, Info, Job, Page, ParticipantView, Pending, PendingItem, Registration, Token

__version__ = "1.0.0"

__all__ = [
    "AlreadyDecided", "AuditEntry", "Cancel", "Cancelled", "Checkpoint", "CheckpointParticipant", "Coordinator",
    "CoordinatorError", "DecidedMeanwhile", "Fenced", "Forbidden", "Gone", "IdempotencyConflict", "Info",
    "InternalError", "InvalidRequest", "Job", "JobBusy", "LowerCheckpointOpen", "MethodNotAllowed", "Misconfigured",
    "MisdirectedRequest", "NotDecided", "NotFound", "NotRegistered", "Page", "ParticipantView", "PayloadTooLarge", "Pending",
    "PendingItem", "Permanent", "Preparing", "Registration", "Runner", "Token", "TokenExists",
    "TooManyCheckpoints", "Unauthenticated", "Unavailable", "UnsupportedMediaType", "VoteConflict", "VotesMissing",
]
