"""The Runner against real coordinators: exactly once through its own restarts and the
coordinator's, commits in checkpoint order, acks after the commit, a failing prepare votes
abort, and fencing."""

from __future__ import annotations

import threading
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

import twophase
from tests.fixture import Trigger, admin, control, eventually, unique


class Sink:
    """An application's sink in memory: what was prepared, committed and rolled back, and
    at each commit whether the coordinator had its ack already (it must not)."""

    def __init__(self, coord: twophase.Coordinator, job: str, name: str, fail_prepare: Optional[set] = None) -> None:
        self.coord, self.job, self.name = coord, job, name
        self.fail_prepare = fail_prepare or set()
        self.lock = threading.Lock()
        self.committed: List[int] = []  # every commit call, in order
        self.visible: Dict[int, Any] = {}  # what an idempotent commit made visible
        self.rolled_back: List[int] = []
        self.acked_before_commit: List[int] = []

    def prepare(self, checkpoint: twophase.Preparing) -> list:
        if int(checkpoint) in self.fail_prepare:
            raise RuntimeError(f"disk full at {int(checkpoint)}")
        return [{"rows": f"{self.name}-{int(checkpoint)}"}]

    def commit(self, checkpoint: int, committables: list) -> None:
        cp = self.coord.get_checkpoint(self.job, checkpoint, participant=self.name)
        entry = cp.participant(self.name)
        with self.lock:
            if entry is not None and entry.acked_at is not None:
                self.acked_before_commit.append(checkpoint)
            self.committed.append(checkpoint)
            self.visible[checkpoint] = committables

    def abort(self, checkpoint: int, committables: list) -> None:
        with self.lock:
            self.rolled_back.append(checkpoint)
            self.visible.pop(checkpoint, None)


def start(runner: twophase.Runner) -> Tuple[threading.Event, threading.Thread, list]:
    stop, errors = threading.Event(), []

    def run() -> None:
        try:
            runner.run(stop)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return stop, t, errors


class RunnerTests(unittest.TestCase):
    def test_exactly_once_through_restarts_of_both(self) -> None:
        c = admin()
        job = unique("runner")
        c.put_job(job, ["a", "b"], checkpoint_timeout_ms=5000)
        sinks = {n: Sink(admin(), job, n) for n in ("a", "b")}
        with Trigger(admin(), job, interval=0.03):
            for round_ in range(4):
                runners = {n: twophase.Runner(admin(), job, n, prepare=s.prepare, commit=s.commit, abort=s.abort, wait_ms=5000)
                           for n, s in sinks.items()}
                started = {n: start(r) for n, r in runners.items()}
                before = c.get_job(job).last_committed or 0
                eventually("commits go on", lambda: (c.get_job(job).last_committed or 0) >= before + 3, 30)
                if round_ % 2 == 1:
                    control("restart")  # the coordinator dies under the runners
                    eventually("commits go on after the restart",
                               lambda: (c.get_job(job).last_committed or 0) >= before + 6, 30)
                # Each participant process "restarts": stopped, and a new Runner next round.
                for n, (stop, thread, errors) in started.items():
                    stop.set()
                    thread.join(15)
                    self.assertFalse(thread.is_alive(), f"runner {n} did not stop within 15 s")
                    self.assertEqual(errors, [], f"runner {n}")
        # Settle: one more runner each, until nothing is owed.
        runners = {n: twophase.Runner(admin(), job, n, prepare=s.prepare, commit=s.commit, abort=s.abort, wait_ms=2000)
                   for n, s in sinks.items()}
        started = {n: start(r) for n, r in runners.items()}
        last = c.get_job(job).last_checkpoint
        eventually("every checkpoint final", lambda: all(
            cp.status in ("committed", "aborted") for cp in c.iter_checkpoints(job)), 30)
        for stop, thread, errors in started.values():
            stop.set()
            thread.join(15)
            self.assertEqual(errors, [])

        statuses = {cp.id: cp.status for cp in c.iter_checkpoints(job)}
        self.assertEqual(len(statuses), last)
        committed = sorted(i for i, s in statuses.items() if s == "committed")
        self.assertGreaterEqual(len(committed), 12)
        for n, s in sinks.items():
            # Exactly once: what is visible is every committed checkpoint, and nothing else.
            self.assertEqual(sorted(s.visible), committed, f"sink {n}")
            for i in committed:
                self.assertEqual(s.visible[i], [{"rows": f"{n}-{i}"}])
            # Commits in checkpoint order (a repeat after a restart is allowed: idempotent).
            for x, y in zip(s.committed, s.committed[1:]):
                self.assertLessEqual(x, y, f"sink {n} committed {y} after {x}: {s.committed}")
            self.assertEqual(s.acked_before_commit, [], f"sink {n} acked before committing")
            for i in s.rolled_back:
                self.assertEqual(statuses[i], "aborted")

    def test_a_failing_prepare_votes_abort(self) -> None:
        c = admin()
        job = unique("fail")
        c.put_job(job, ["a"])
        sink = Sink(admin(), job, "a", fail_prepare={2})
        runner = twophase.Runner(admin(), job, "a", prepare=sink.prepare, commit=sink.commit, abort=sink.abort, wait_ms=2000)
        stop, thread, errors = start(runner)
        eventually("registered", lambda: runner.epoch > 0)
        for _ in range(3):
            cp = c.open_checkpoint(job)
            eventually(f"checkpoint {cp.id} decided", lambda: c.get_checkpoint(job, cp.id).status != "preparing")
        eventually("3 committed", lambda: c.get_checkpoint(job, 3).status == "committed")
        stop.set()
        thread.join(15)
        self.assertEqual(errors, [])
        cp2 = c.get_checkpoint(job, 2)
        self.assertEqual((cp2.status, cp2.decision_cause), ("aborted", "abort_vote"))
        self.assertIn("disk full at 2", cp2.abort_reason or "")
        self.assertEqual(sorted(sink.visible), [1, 3])

    def test_a_newer_instance_fences_the_runner(self) -> None:
        c = admin()
        job = unique("fence")
        c.put_job(job, ["a"])
        sink = Sink(admin(), job, "a")
        old = twophase.Runner(admin(), job, "a", prepare=sink.prepare, commit=sink.commit, abort=sink.abort, wait_ms=30000)
        stop, thread, errors = start(old)
        eventually("registered", lambda: old.epoch > 0)
        newer = c.register(job, "a")
        self.assertGreater(newer.epoch, old.epoch)
        # The old runner's long-poll (30 s) ends at once: its epoch is no longer current.
        thread.join(10)
        self.assertFalse(thread.is_alive(), "the fenced runner did not stop")
        self.assertEqual(len(errors), 1)
        self.assertIsInstance(errors[0], twophase.Fenced)
        stop.set()

    def test_stop_ends_a_long_poll_at_once(self) -> None:
        c = admin()
        job = unique("stop")
        c.put_job(job, ["a"])
        sink = Sink(admin(), job, "a")
        runner = twophase.Runner(admin(), job, "a", prepare=sink.prepare, commit=sink.commit, abort=sink.abort, wait_ms=60000)
        stop, thread, errors = start(runner)
        eventually("registered", lambda: runner.epoch > 0)
        time.sleep(0.2)  # in its long-poll now
        stop.set()
        thread.join(10)
        self.assertFalse(thread.is_alive(), "run did not return after the stop event")
        self.assertEqual(errors, [])

    def test_the_job_must_exist(self) -> None:
        runner = twophase.Runner(admin(), unique("nojob"), "a", prepare=lambda c: [], commit=lambda c, x: None,
                                 abort=lambda c, x: None)
        with self.assertRaises(twophase.NotFound):
            runner.run(threading.Event())


if __name__ == "__main__":
    unittest.main()
