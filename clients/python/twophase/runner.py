"""Runner: a participant of one job, around three callbacks of the application."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, List, Optional, Set

from .client import Cancel, Cancelled, Coordinator
from .errors import AlreadyDecided, CoordinatorError, DecidedMeanwhile, Fenced, Gone, NotFound
from .types import Checkpoint, PendingItem

__all__ = ["Runner", "Preparing", "Permanent"]

Committables = List[Any]


class Permanent(Exception):
    """Raised by (or wrapping the error of) a commit, abort or recover callback that
    retrying cannot cure: the Runner stops and raises it instead of retrying."""


class Preparing(int):
    """The id of the checkpoint being prepared (it is an int), with ``decided``: a
    threading.Event set if the checkpoint is decided while ``prepare`` runs (a deadline,
    another participant's abort). A prepare that waits for its input should give up then,
    by raising DecidedMeanwhile: nothing is voted. The watch costs a long-poll only once
    ``decided`` is first looked at."""

    _runner: "Runner"
    _event: Optional[threading.Event]
    _cancel: Optional[Cancel]

    def __new__(cls, value: int, runner: "Runner") -> "Preparing":
        self = super().__new__(cls, value)
        self._runner = runner
        self._event = None
        self._cancel = None
        return self

    @property
    def decided(self) -> threading.Event:
        if self._event is None:
            self._event = threading.Event()
            self._cancel = Cancel()
            threading.Thread(target=self._runner._watch_decision, args=(int(self), self._event, self._cancel),
                             name=f"twophase-watch-{int(self)}", daemon=True).start()
        return self._event

    def _stop_watch(self) -> None:
        if self._cancel is not None:
            self._cancel.set()


class Runner:
    """Serves the protocol for one participant of one job, as the Go client's Runner does:
    it registers (fencing older instances), applies what is owed from before (in
    checkpoint order), then for each checkpoint calls ``prepare`` and votes, waits for the
    decision by long-poll (an idle runner costs one request per ``wait_ms``), calls
    ``commit`` or ``abort``, and acks only after that returned.

    prepare(checkpoint) -> list: make the checkpoint's writes durable but invisible and
        return them as committables (JSON values). An exception votes abort with its text.
        ``checkpoint`` is a Preparing (an int).
    commit(checkpoint, committables), abort(checkpoint, committables): apply or roll back;
        they must be idempotent (they run again after a crash before the ack). An
        exception is retried with backoff, unless it is a Permanent.
    recover(epoch, items): optional, called once after registering with what is owed,
        before anything is applied: the place to clean up leftovers that no item names
        (prepared work whose vote may not have been recorded).

    The Coordinator should retry without limit (max_attempts=0, its default): the Runner
    relies on it to ride out outages."""

    def __init__(self, coordinator: Coordinator, job: str, participant: str, *,
                 prepare: Callable[[Preparing], Committables],
                 commit: Callable[[int, Committables], None],
                 abort: Callable[[int, Committables], None],
                 recover: Optional[Callable[[int, List[PendingItem]], None]] = None,
                 wait_ms: int = 30000, logger: Optional[logging.Logger] = None) -> None:
        if not 1 <= wait_ms <= 60000:
            raise ValueError("wait_ms must be within 1 and 60000")
        self.coordinator = coordinator
        self.job = job
        self.participant = participant
        self._prepare = prepare
        self._commit = commit
        self._abort = abort
        self._recover = recover
        self.wait_ms = wait_ms
        self.log = logger or logging.getLogger("twophase.runner")
        self._epoch = 0
        self._in_doubt: Set[int] = set()
        self._cancel = Cancel()
        self._started = False

    @property
    def epoch(self) -> int:
        """The epoch this instance registered with; 0 before it registered."""
        return self._epoch

    def run(self, stop_event: threading.Event) -> None:
        """Registers and serves until stop_event is set (then it returns, within moments,
        also from a long-poll), or until something fatal: Fenced (a newer instance of the
        participant registered: this one must stop writing), VoteConflict, a Permanent
        error of a callback, or another refusal that retrying cannot change (NotFound:
        the job does not exist, Forbidden, ...)."""
        if self._started:
            raise RuntimeError("Runner.run called twice: make a new Runner per instance")
        self._started = True
        cancel = self._cancel
        done = threading.Event()

        def watch() -> None:
            # One wake-up every few seconds per runner at most, and none on the network.
            while not done.is_set():
                if stop_event.wait(2.0):
                    cancel.set()
                    return

        watcher = threading.Thread(target=watch, name=f"twophase-stop-{self.participant}", daemon=True)
        watcher.start()
        try:
            self._run(cancel)
        except Cancelled:
            if not stop_event.is_set():
                raise
        finally:
            done.set()
            if stop_event.is_set():
                cancel.set()

    def _run(self, cancel: Cancel) -> None:
        c = self.coordinator
        reg = c.register(self.job, self.participant, cancel=cancel)
        self._epoch = reg.epoch
        self.log.info("registered: job=%s participant=%s epoch=%d owed=%d", self.job, self.participant, reg.epoch, len(reg.pending))
        items = reg.pending
        if self._recover is not None:
            recover = self._recover
            self._retry(0, "recover", lambda: recover(reg.epoch, items))
        first = True
        while True:
            blocked = self._serve(items, first)
            first = False
            # One long-poll on pending waits for the next checkpoint and for the decision on
            # one in doubt alike (the decision makes its commit or abort owed). Only a commit
            # held back behind a lower undecided checkpoint waits for that one first.
            wait = self.wait_ms
            if blocked:
                self._wait_lowest(cancel)
                wait = 0
            pending = c.pending(self.job, self.participant, wait_ms=wait, epoch=self._epoch, cancel=cancel)
            if pending.epoch != self._epoch:
                raise Fenced("pending", 409, {"code": "fenced", "status": 409,
                                             "detail": f"{self.job}/{self.participant}: epoch {self._epoch} is no longer current ({pending.epoch} is)"})
            items = pending.items

    def _serve(self, items: List[PendingItem], first: bool) -> bool:
        for it in sorted(items, key=lambda i: i.checkpoint):
            if it.action == "commit":
                if self._in_doubt and min(self._in_doubt) < it.checkpoint:
                    return True  # commits keep checkpoint order
                self._finish(it.checkpoint, True, it.committables)
            elif it.action == "abort":
                self._finish(it.checkpoint, False, it.committables)
            elif it.action == "vote":
                if first:
                    # Opened before this instance registered: its transaction died with the
                    # previous instance (registration aborts those, so normally none).
                    self._vote_abort(it.checkpoint, "participant restarted: its transaction died with the previous instance")
                else:
                    self._prepare_and_vote(it.checkpoint)
            else:
                self.log.warning("unknown pending action %r for checkpoint %d, ignored", it.action, it.checkpoint)
        return False

    def _wait_lowest(self, cancel: Cancel) -> None:
        low = min(self._in_doubt)
        try:
            self.coordinator.get_checkpoint(self.job, low, wait_ms=self.wait_ms, participant=self.participant, cancel=cancel)
        except (NotFound, Gone):
            self._in_doubt.discard(low)  # the job was deleted (and created again): nothing owed

    def _voted_prepared(self, cp: Optional[Checkpoint]) -> bool:
        p = cp.participant(self.participant) if cp is not None else None
        return p is not None and p.vote == "prepared" and p.epoch == self._epoch

    def _prepare_and_vote(self, checkpoint: int) -> None:
        cancel = self._cancel
        preparing = Preparing(checkpoint, self)
        try:
            committables = self._prepare(preparing)
        except Exception as e:  # noqa: BLE001 - the application's failure is a vote
            if cancel.is_set():
                raise Cancelled() from None
            decided = preparing._event is not None and preparing._event.is_set()
            if isinstance(e, DecidedMeanwhile) or decided:
                self.log.info("prepare stopped, checkpoint %d decided meanwhile: %s", checkpoint, e)
                return
            self.log.info("prepare of checkpoint %d failed, voting abort: %s", checkpoint, e)
            self._vote_abort(checkpoint, str(e) or e.__class__.__name__)
            return
        finally:
            preparing._stop_watch()
        if committables is None:
            committables = []
        if cancel.is_set():
            self._abort_quietly(checkpoint, committables)  # never voted: nobody will ask for them
            raise Cancelled()
        try:
            # The vote waits for the decision, so that no request of its own is needed to
            # learn it; the coordinator ends the wait as soon as this participant owes
            # anything else.
            cp = self.coordinator.vote(self.job, checkpoint, self.participant, self._epoch, "prepared",
                                       committables=committables, wait_ms=self.wait_ms, cancel=cancel)
        except AlreadyDecided as e:
            if self._voted_prepared(e.checkpoint):
                # An earlier attempt was recorded before the decision; the decision will be
                # owed like any other.
                self._in_doubt.add(checkpoint)
                return
            # Not recorded (a deadline passed, someone voted abort): the checkpoint can
            # never commit with these committables, and no pending item will name them.
            self.log.info("vote refused, checkpoint %d already decided: rolling back", checkpoint)
            self._retry(checkpoint, "abort", lambda: self._abort(checkpoint, committables))
            return
        # Fenced, a vote conflict, a cancel: an earlier attempt may have been recorded, so the
        # committables are left alone (owed to the next instance if the checkpoint commits).
        self.log.debug("voted prepared: checkpoint=%d status=%s", checkpoint, cp.status)
        if cp.status in ("committing", "committed"):
            if not self._in_doubt:
                self._finish(checkpoint, True, committables)
                return
        elif cp.status == "aborted":
            self._finish(checkpoint, False, committables)
            return
        self._in_doubt.add(checkpoint)

    def _watch_decision(self, checkpoint: int, decided: threading.Event, cancel: Cancel) -> None:
        while not cancel.is_set():
            try:
                cp = self.coordinator.get_checkpoint(self.job, checkpoint, wait_ms=self.wait_ms,
                                                     participant=self.participant, cancel=cancel)
            except Cancelled:
                break
            except CoordinatorError:
                if cancel.wait(0.5):
                    break
                continue
            except Exception:  # noqa: BLE001 - not knowing is no reason to stop prepare
                if cancel.wait(0.5):
                    break
                continue
            if cp.status != "preparing":
                decided.set()
                break
        self.coordinator.close()

    def _vote_abort(self, checkpoint: int, reason: str) -> None:
        reason = reason[:1024]
        try:
            self.coordinator.vote(self.job, checkpoint, self.participant, self._epoch, "abort", reason=reason,
                                  cancel=self._cancel)
        except AlreadyDecided:
            pass

    def _finish(self, checkpoint: int, commit: bool, committables: Committables) -> None:
        what, apply = ("commit", self._commit) if commit else ("abort", self._abort)
        self._retry(checkpoint, what, lambda: apply(checkpoint, committables))
        try:
            self.coordinator.ack(self.job, checkpoint, self.participant, self._epoch, cancel=self._cancel)
        except (NotFound, Gone):
            self.log.warning("ack: checkpoint %d is gone", checkpoint)
        self._in_doubt.discard(checkpoint)
        self.log.debug("applied and acked: checkpoint=%d decision=%s", checkpoint, what)

    def _retry(self, checkpoint: int, what: str, fn: Callable[[], None]) -> None:
        attempt = 0
        while True:
            attempt += 1
            try:
                fn()
                return
            except Permanent:
                raise
            except Exception as e:  # noqa: BLE001 - the application's failure is retried
                if self._cancel.is_set():
                    raise Cancelled() from None
                delay = self.coordinator.backoff(attempt)
                self.log.warning("%s of checkpoint %d failed, retrying in %.2fs (attempt %d): %s", what, checkpoint, delay, attempt, e)
                if self._cancel.wait(delay):
                    raise Cancelled() from None

    def _abort_quietly(self, checkpoint: int, committables: Committables) -> None:
        try:
            self._abort(checkpoint, committables)
        except Exception as e:  # noqa: BLE001 - best effort: the runner is stopping
            self.log.warning("abort of unvoted checkpoint %d failed: %s", checkpoint, e)
