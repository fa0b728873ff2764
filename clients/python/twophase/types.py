"""The coordinator's resources as dataclasses, decoded from its JSON answers. Members that
this version does not know are kept in ``extra``, so a newer coordinator breaks nothing."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")


def parse_time(s: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 timestamp as an aware datetime (Python 3.9's fromisoformat wants no Z
    and at most microseconds)."""
    if s is None:
        return None
    s = s.replace("Z", "+00:00")
    if "." in s:
        head, rest = s.split(".", 1)
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        s = head + "." + (digits + "000000")[:6] + rest
    return datetime.fromisoformat(s)


def _decode(cls: Type[T], raw: Dict[str, Any], times: tuple = (), nested: Optional[Dict[str, Any]] = None) -> T:
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: Dict[str, Any] = {}
    extra: Dict[str, Any] = {}
    for k, v in raw.items():
        if k not in names or k == "extra":
            extra[k] = v
            continue
        if k in times:
            v = parse_time(v)
        elif nested and k in nested and v is not None:
            v = nested[k](v)
        kwargs[k] = v
    if "extra" in names:
        kwargs["extra"] = extra
    return cls(**kwargs)  # type: ignore[call-arg]


@dataclass
class Job:
    name: str
    participants: List[str]
    checkpoint_timeout_ms: int = 60000
    max_concurrent_checkpoints: int = 1
    auto_commit: bool = True
    retention_ms: int = 604800000
    last_checkpoint: Optional[int] = None
    last_committed: Optional[int] = None
    epochs: Dict[str, int] = field(default_factory=dict)
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Job":
        return _decode(cls, raw, times=("created_at", "updated_at"))


@dataclass
class CheckpointParticipant:
    """One expected participant of a checkpoint: its vote, the epoch it voted with, its
    committables (left out of a minimal answer to its own vote or ack) and its ack."""

    name: str
    epoch: Optional[int] = None
    vote: Optional[str] = None
    voted_at: Optional[datetime] = None
    reason: Optional[str] = None
    committables: Optional[List[Any]] = None
    acked_at: Optional[datetime] = None
    acked_by: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "CheckpointParticipant":
        return _decode(cls, raw, times=("voted_at", "acked_at"))


@dataclass
class Checkpoint:
    job: str
    id: int
    status: str
    created_at: Optional[datetime] = None
    deadline: Optional[datetime] = None
    decided_at: Optional[datetime] = None
    completed_at: Optional[datetime] = None
    abort_reason: Optional[str] = None
    decision_cause: Optional[str] = None
    decided_by: Optional[str] = None
    auto_commit: Optional[bool] = None
    votes: Optional[Dict[str, int]] = None
    acks: Optional[Dict[str, int]] = None
    participants: List[CheckpointParticipant] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Checkpoint":
        return _decode(cls, raw, times=("created_at", "deadline", "decided_at", "completed_at"),
                       nested={"participants": lambda ps: [CheckpointParticipant.from_json(p) for p in ps]})

    def participant(self, name: str) -> Optional[CheckpointParticipant]:
        """The entry of participant ``name``, or None if the checkpoint does not expect it."""
        for p in self.participants:
            if p.name == name:
                return p
        return None

    @property
    def decided(self) -> bool:
        return self.status != "preparing"


@dataclass
class PendingItem:
    """Something a participant owes: ``action`` is ``vote``, ``commit`` or ``abort``."""

    checkpoint: int
    status: str
    action: str
    committables: List[Any] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "PendingItem":
        item = _decode(cls, raw)
        if item.committables is None:
            item.committables = []
        return item


@dataclass
class Pending:
    job: str
    participant: str
    epoch: int
    items: List[PendingItem] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Pending":
        return _decode(cls, raw, nested={"items": lambda xs: [PendingItem.from_json(x) for x in xs]})


@dataclass
class Registration:
    job: str
    participant: str
    epoch: int
    pending: List[PendingItem] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Registration":
        return _decode(cls, raw, nested={"pending": lambda xs: [PendingItem.from_json(x) for x in xs]})


@dataclass
class ParticipantView:
    """A participant of a job at a glance (GET /v1/jobs/{job}/participants)."""

    name: str
    epoch: int = 0
    registered_at: Optional[datetime] = None
    last_vote_at: Optional[datetime] = None
    last_vote_ms: Optional[int] = None
    last_ack_at: Optional[datetime] = None
    owed: int = 0
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "ParticipantView":
        return _decode(cls, raw, times=("registered_at", "last_vote_at", "last_ack_at"))


@dataclass
class Token:
    name: str
    scopes: List[str]
    job: Optional[str] = None
    participant: Optional[str] = None
    created_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    token: Optional[str] = field(default=None, repr=False)  # the secret, only when created
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Token":
        return _decode(cls, raw, times=("created_at", "expires_at"))


@dataclass
class AuditEntry:
    id: int
    at: Optional[datetime]
    action: str
    job: Optional[str] = None
    checkpoint: Optional[int] = None
    token: Optional[str] = None
    subject: Optional[str] = None
    reason: Optional[str] = None
    request_id: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "AuditEntry":
        return _decode(cls, raw, times=("at",))


@dataclass
class Page:
    """One page of a list; ``next_cursor`` is None on the last page."""

    items: List[Any]
    next_cursor: Optional[str] = None


@dataclass
class Info:
    version: str
    go_version: str
    store: str
    schema_version: int
    schema_expected: int
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Info":
        return _decode(cls, raw)
