// The Runner against real coordinators: exactly once through its own restarts and the
// coordinator's, commits in checkpoint order, acks after the commit, a failing prepare
// votes abort, fencing, and a prompt stop.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import * as tp from "../dist/index.js";
import { admin, control, eventually, quiet, trigger, unique } from "./fixture.mjs";

/** An application's sink in memory. */
class Sink {
  constructor(coord, job, name, failPrepare = new Set()) {
    Object.assign(this, { coord, job, name, failPrepare });
    this.committed = [];
    this.visible = new Map();
    this.rolledBack = [];
    this.ackedBeforeCommit = [];
  }
  prepare = async (id) => {
    if (this.failPrepare.has(id)) throw new Error(`disk full at ${id}`);
    return [{ rows: `${this.name}-${id}` }];
  };
  commit = async (id, committables) => {
    const cp = await this.coord.getCheckpoint(this.job, id, { participant: this.name });
    const entry = cp.participants.find((p) => p.name === this.name);
    if (entry && entry.acked_at) this.ackedBeforeCommit.push(id);
    this.committed.push(id);
    this.visible.set(id, committables);
  };
  abort = async (id) => {
    this.rolledBack.push(id);
    this.visible.delete(id);
  };
}

function start(runner) {
  const stop = new AbortController();
  const done = runner.run(stop.signal).then(() => undefined, (e) => e);
  return { stop: () => stop.abort(), done };
}

async function statuses(c, job) {
  const out = new Map();
  for await (const cp of c.allCheckpointsOf(job)) out.set(cp.id, cp.status);
  return out;
}

describe("runner", () => {
  it("exactly once through restarts of both", async () => {
    const c = admin();
    const job = unique("runner");
    await c.putJob(job, { participants: ["a", "b"], checkpoint_timeout_ms: 5000 });
    const sinks = { a: new Sink(admin(), job, "a"), b: new Sink(admin(), job, "b") };
    const stopTrigger = trigger(admin(), job, 30);
    for (let round = 0; round < 4; round++) {
      const runs = Object.entries(sinks).map(([n, s]) => start(new tp.Runner(admin(), job, n, s, { waitMs: 5000, logger: quiet })));
      const before = (await c.getJob(job)).last_committed ?? 0;
      await eventually("commits go on", async () => ((await c.getJob(job)).last_committed ?? 0) >= before + 3, 30_000);
      if (round % 2 === 1) {
        await control("restart");
        await eventually("commits go on after the restart", async () => ((await c.getJob(job)).last_committed ?? 0) >= before + 6, 30_000);
      }
      for (const r of runs) {
        r.stop();
        assert.equal(await r.done, undefined);
      }
    }
    await stopTrigger();
    const runs = Object.entries(sinks).map(([n, s]) => start(new tp.Runner(admin(), job, n, s, { waitMs: 2000, logger: quiet })));
    await eventually("every checkpoint final", async () => [...(await statuses(c, job)).values()].every((s) => s === "committed" || s === "aborted"), 30_000);
    for (const r of runs) {
      r.stop();
      assert.equal(await r.done, undefined);
    }
    const all = await statuses(c, job);
    assert.equal(all.size, (await c.getJob(job)).last_checkpoint);
    const committed = [...all].filter(([, s]) => s === "committed").map(([id]) => id).sort((x, y) => x - y);
    assert.ok(committed.length >= 12, `only ${committed.length} committed`);
    for (const [n, s] of Object.entries(sinks)) {
      assert.deepEqual([...s.visible.keys()].sort((x, y) => x - y), committed, `sink ${n}`);
      for (const id of committed) assert.deepEqual(s.visible.get(id), [{ rows: `${n}-${id}` }]);
      for (let i = 1; i < s.committed.length; i++) assert.ok(s.committed[i - 1] <= s.committed[i], `sink ${n} out of order: ${s.committed}`);
      assert.deepEqual(s.ackedBeforeCommit, [], `sink ${n} acked before committing`);
      for (const id of s.rolledBack) assert.equal(all.get(id), "aborted");
    }
  });

  it("a failing prepare votes abort", async () => {
    const c = admin();
    const job = unique("fail");
    await c.putJob(job, { participants: ["a"] });
    const sink = new Sink(admin(), job, "a", new Set([2]));
    const runner = new tp.Runner(admin(), job, "a", sink, { waitMs: 2000, logger: quiet });
    const r = start(runner);
    await eventually("registered", () => runner.epoch > 0);
    for (let i = 0; i < 3; i++) {
      const cp = await c.openCheckpoint(job);
      await eventually(`checkpoint ${cp.id} decided`, async () => (await c.getCheckpoint(job, cp.id)).status !== "preparing");
    }
    await eventually("3 committed", async () => (await c.getCheckpoint(job, 3)).status === "committed");
    r.stop();
    assert.equal(await r.done, undefined);
    const cp2 = await c.getCheckpoint(job, 2);
    assert.deepEqual([cp2.status, cp2.decision_cause], ["aborted", "abort_vote"]);
    assert.match(cp2.abort_reason, /disk full at 2/);
    assert.deepEqual([...sink.visible.keys()].sort(), [1, 3]);
  });

  it("a newer instance fences the runner", async () => {
    const c = admin();
    const job = unique("fence");
    await c.putJob(job, { participants: ["a"] });
    const old = new tp.Runner(admin(), job, "a", new Sink(admin(), job, "a"), { waitMs: 30000, logger: quiet });
    const r = start(old);
    await eventually("registered", () => old.epoch > 0);
    const newer = await c.register(job, "a");
    assert.ok(newer.epoch > old.epoch);
    const err = await Promise.race([r.done, new Promise((res) => setTimeout(() => res("still running"), 10_000))]);
    assert.ok(err instanceof tp.Fenced, String(err));
  });

  it("a stop ends a long-poll at once", async () => {
    const c = admin();
    const job = unique("stop");
    await c.putJob(job, { participants: ["a"] });
    const runner = new tp.Runner(admin(), job, "a", new Sink(admin(), job, "a"), { waitMs: 60000, logger: quiet });
    const r = start(runner);
    await eventually("registered", () => runner.epoch > 0);
    await new Promise((res) => setTimeout(res, 200));
    r.stop();
    const result = await Promise.race([r.done, new Promise((res) => setTimeout(() => res("still running"), 10_000))]);
    assert.equal(result, undefined);
  });

  it("the job must exist", async () => {
    const runner = new tp.Runner(admin(), unique("nojob"), "a", { prepare: () => [], commit() {}, abort() {} }, { logger: quiet });
    await assert.rejects(runner.run(new AbortController().signal), tp.NotFound);
  });
});
