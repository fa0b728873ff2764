// The client against real coordinators: every operation, each problem code as its error
// class, retries through a coordinator's SIGKILL, a lost answer, TLS and tokens.
import assert from "node:assert/strict";
import http from "node:http";
import { describe, it } from "node:test";
import * as tp from "../dist/index.js";
import { admin, control, env, eventually, quiet, unique } from "./fixture.mjs";

describe("operations", () => {
  it("every operation", async () => {
    const c = admin();
    assert.equal((await c.info()).store, "postgres");
    const job = unique("ops");
    const created = await c.putJob(job, { participants: ["a", "b"], retention_ms: 0 });
    assert.deepEqual(created.participants, ["a", "b"]);
    assert.equal(created.last_checkpoint, null);
    assert.equal((await c.putJob(job, { participants: ["a", "b"], max_concurrent_checkpoints: 2, retention_ms: 0 })).max_concurrent_checkpoints, 2);
    assert.equal((await c.getJob(job)).name, job);
    for (const x of ["x", "y"]) await c.putJob(`${job}-${x}`, { participants: ["a"] });
    const page = await c.jobs({ limit: 1 });
    assert.equal(page.items.length, 1);
    assert.ok(page.nextCursor);
    const names = [];
    for await (const j of c.allJobs(2)) names.push(j.name);
    for (const n of [job, `${job}-x`, `${job}-y`]) assert.ok(names.includes(n));

    const ra = await c.register(job, "a");
    const rb = await c.register(job, "b");
    assert.deepEqual(ra.pending, []);
    const cp = await c.openCheckpoint(job, { timeoutMs: 30000 });
    assert.deepEqual([cp.job, cp.id, cp.status], [job, 1, "preparing"]);
    assert.deepEqual((await c.pending(job, "a")).items.map((i) => [i.checkpoint, i.action]), [[1, "vote"]]);
    const afterA = await c.vote(job, 1, "a", { epoch: ra.epoch, vote: "prepared", committables: [{ txn: "a-1" }, 2, "three", null] });
    assert.equal(afterA.status, "preparing");
    assert.equal(afterA.participants.find((p) => p.name === "a").committables, undefined); // minimal: not echoed
    assert.deepEqual(afterA.votes, { prepared: 1, abort: 0, missing: 1 });
    const afterB = await c.vote(job, 1, "b", { epoch: rb.epoch, vote: "prepared" }, { minimal: false });
    assert.equal(afterB.status, "committing");
    assert.deepEqual(afterB.participants.find((p) => p.name === "a").committables, [{ txn: "a-1" }, 2, "three", null]);
    const glance = await c.participants(job);
    assert.deepEqual(glance.map((p) => [p.name, p.epoch, p.owed]), [["a", ra.epoch, 1], ["b", rb.epoch, 1]]);
    assert.ok(glance[0].registered_at && glance[0].last_vote_at && glance[0].last_vote_ms >= 0);
    assert.equal(glance[0].last_ack_at, null);
    const owed = await c.pending(job, "a", { waitMs: 1000, epoch: ra.epoch });
    assert.deepEqual(owed.items.map((i) => [i.checkpoint, i.action, i.committables]), [[1, "commit", [{ txn: "a-1" }, 2, "three", null]]]);
    await c.ack(job, 1, "a", ra.epoch);
    assert.equal((await c.getCheckpoint(job, 1)).status, "committing");
    const done = await c.complete(job, 1, "b is gone for good");
    assert.equal(done.status, "committed");
    assert.equal(done.participants.find((p) => p.name === "b").acked_by, "admin");

    const second = await c.openCheckpoint(job);
    const aborted = await c.abort(job, second.id, "by the test");
    assert.deepEqual([aborted.status, aborted.abort_reason, aborted.decision_cause], ["aborted", "by the test", "abort_request"]);
    const waited = await c.getCheckpoint(job, second.id, { waitMs: 50, participant: "a" });
    assert.deepEqual(waited.participants.map((p) => p.name), ["a"]);
    assert.deepEqual((await c.checkpoints(job)).items.map((x) => x.id), [2, 1]);
    assert.deepEqual((await c.checkpoints(job, { status: ["aborted"] })).items.map((x) => x.id), [2]);

    const manual = unique("manual");
    await c.putJob(manual, { participants: ["a"], auto_commit: false });
    const e = (await c.register(manual, "a")).epoch;
    const m1 = await c.openCheckpoint(manual);
    await c.vote(manual, m1.id, "a", { epoch: e, vote: "prepared", committables: [1] });
    assert.deepEqual((await c.openCheckpoints({ job: manual })).items.map((x) => x.id), [m1.id]);
    assert.equal((await c.commit(manual, m1.id, "looks good")).decision_cause, "commit_request");

    const actions = (await c.audit({ job })).items.map((a) => a.action);
    assert.ok(actions.includes("job_created") && actions.includes("checkpoint_completed"), actions.join());

    const tok = await c.createToken({ name: unique("reader"), scopes: ["read"], job });
    assert.ok(tok.token);
    assert.deepEqual((await c.getToken(tok.name)).scopes, ["read"]);
    assert.ok((await c.tokens({ limit: 1000 })).items.some((t) => t.name === tok.name));
    const reader = new tp.Coordinator(env("TWOPHASE_URL"), { token: tok.token, logger: quiet });
    assert.equal((await reader.getJob(job)).name, job);
    await c.revokeToken(tok.name);
    await eventually("the revoked token refused", async () => {
      try {
        await reader.getJob(job);
        return false;
      } catch (err) {
        return err instanceof tp.Unauthenticated;
      }
    });
    await c.deleteJob(`${job}-x`);
    await assert.rejects(c.getJob(`${job}-x`), tp.NotFound);
  });
});

describe("problem codes", () => {
  async function check(cls, status, code, fn) {
    let caught;
    try {
      await fn();
    } catch (e) {
      caught = e;
    }
    assert.ok(caught instanceof cls, `want ${cls.name}, got ${caught}`);
    assert.ok(caught instanceof tp.CoordinatorError);
    assert.deepEqual([caught.status, caught.code, caught.problem.code], [status, code, code]);
    assert.ok(caught.detail);
    return caught;
  }

  it("each code raises its class", async () => {
    const c = admin("TWOPHASE_URL", { maxAttempts: 3 });
    const job = unique("codes");
    const err = await check(tp.InvalidRequest, 400, "invalid_request", () => c.putJob(job, { participants: ["not a name"] }));
    assert.ok(err.problem.errors.length > 0);
    await check(tp.NotFound, 404, "not_found", () => c.getJob(unique("missing")));
    await c.putJob(job, { participants: ["a", "b"], max_concurrent_checkpoints: 2, auto_commit: false });
    await c.openCheckpoint(job);
    await check(tp.NotRegistered, 409, "not_registered", () => c.vote(job, 1, "a", { epoch: 0, vote: "prepared" }));
    const old = (await c.register(job, "a")).epoch;
    const now = (await c.register(job, "a")).epoch;
    const eb = (await c.register(job, "b")).epoch;
    await check(tp.Fenced, 409, "fenced", () => c.vote(job, 1, "a", { epoch: old, vote: "prepared" }));
    const cp = await c.openCheckpoint(job);
    await c.vote(job, cp.id, "a", { epoch: now, vote: "prepared", committables: ["x"] });
    await check(tp.VoteConflict, 409, "vote_conflict", () => c.vote(job, cp.id, "a", { epoch: now, vote: "prepared", committables: ["y"] }));
    await check(tp.NotDecided, 409, "not_decided", () => c.ack(job, cp.id, "a", now));
    const missing = await check(tp.VotesMissing, 409, "votes_missing", () => c.commit(job, cp.id));
    assert.deepEqual(missing.problem.missing, ["b"]);
    const higher = await c.openCheckpoint(job);
    await check(tp.TooManyCheckpoints, 409, "too_many_checkpoints", () => c.openCheckpoint(job));
    await c.vote(job, higher.id, "a", { epoch: now, vote: "prepared" });
    await c.vote(job, higher.id, "b", { epoch: eb, vote: "prepared" });
    await check(tp.LowerCheckpointOpen, 409, "lower_checkpoint_open", () => c.commit(job, higher.id));
    await check(tp.JobBusy, 409, "job_busy", () => c.deleteJob(job));
    await c.abort(job, cp.id, "cascade");
    const decided = await check(tp.AlreadyDecided, 409, "already_decided", () => c.vote(job, cp.id, "b", { epoch: eb, vote: "abort", reason: "late" }));
    assert.equal(decided.checkpoint.status, "aborted");

    const idem = unique("idem");
    await c.putJob(idem, { participants: ["a"] });
    await c.openCheckpoint(idem, { idempotencyKey: "k-1", timeoutMs: 5000 });
    await check(tp.IdempotencyConflict, 409, "idempotency_conflict", () => c.openCheckpoint(idem, { idempotencyKey: "k-1", timeoutMs: 6000 }));
    const name = unique("tok");
    await c.createToken({ name, scopes: ["read"], job: "*" });
    await check(tp.TokenExists, 409, "token_exists", () => c.createToken({ name, scopes: ["read"], job: "*" }));

    const stranger = new tp.Coordinator(env("TWOPHASE_URL"), { token: "tpc_not-a-token-of-this-coordinator", maxAttempts: 2, logger: quiet });
    await check(tp.Unauthenticated, 401, "unauthenticated", () => stranger.getJob(job));
    const reader = await c.createToken({ name: unique("reader"), scopes: ["read"], job });
    const ro = new tp.Coordinator(env("TWOPHASE_URL"), { token: reader.token, maxAttempts: 2, logger: quiet });
    const forbidden = await check(tp.Forbidden, 403, "forbidden", () => ro.putJob(job, { participants: ["a"] }));
    assert.match(forbidden.detail, /operator/);

    await check(tp.PayloadTooLarge, 413, "payload_too_large", () => c.vote(idem, 1, "a", { epoch: 1, vote: "prepared", committables: ["x".repeat(1 << 20)] }));
    await check(tp.UnsupportedMediaType, 415, "unsupported_media_type", () =>
      c.raw("put job", "PUT", `/v1/jobs/${job}`, { body: '{"participants":["a"]}', headers: { "Content-Type": "text/plain" } }));
    await check(tp.MethodNotAllowed, 405, "method_not_allowed", () => c.raw("patch", "PATCH", `/v1/jobs/${job}`));
  });

  it("gone, after retention", async () => {
    const c = admin();
    const job = unique("gone");
    await c.putJob(job, { participants: ["a"], retention_ms: 1000 });
    const e = (await c.register(job, "a")).epoch;
    for (let i = 0; i < 2; i++) {
      const cp = await c.openCheckpoint(job);
      await c.vote(job, cp.id, "a", { epoch: e, vote: "prepared" });
      await c.ack(job, cp.id, "a", e);
    }
    await new Promise((r) => setTimeout(r, 1200));
    await control("restart"); // the start-up pass of retention deletes checkpoint 1
    await eventually("checkpoint 1 deleted", async () => {
      try {
        await c.getCheckpoint(job, 1);
        return false;
      } catch (err) {
        if (!(err instanceof tp.Gone)) throw err;
        assert.deepEqual([err.status, err.code], [410, "gone"]);
        return true;
      }
    }, 30_000);
    assert.equal((await c.getJob(job)).last_checkpoint, 2);
  });
});

describe("answers that are not the coordinator's own", () => {
  function serve(answers) {
    const seen = [];
    const srv = http.createServer((req, res) => {
      seen.push(Date.now());
      const [status, headers, body] = answers.length > 1 ? answers.shift() : answers[0];
      res.writeHead(status, headers);
      res.end(body);
    });
    return new Promise((resolve) => srv.listen(0, "127.0.0.1", () => resolve({ url: `http://127.0.0.1:${srv.address().port}`, seen, srv })));
  }

  it("503 honours Retry-After, then raises Unavailable", async () => {
    const problem = JSON.stringify({ type: "/problems/unavailable", title: "x", status: 503, code: "unavailable", detail: "the database is away" });
    const { url, seen, srv } = await serve([[503, { "Content-Type": "application/problem+json", "Retry-After": "1" }, problem]]);
    try {
      const c = new tp.Coordinator(url, { maxAttempts: 2, minBackoffMs: 10, maxBackoffMs: 5000, logger: quiet });
      const err = await c.getJob("x").catch((e) => e);
      assert.ok(err instanceof tp.Unavailable, String(err));
      assert.equal(err.retryAfter, 1);
      assert.equal(seen.length, 2);
      assert.ok(seen[1] - seen[0] >= 950, `retried after ${seen[1] - seen[0]} ms`);
    } finally {
      srv.close();
    }
  });

  it("internal, unknown codes, and no problem document", async () => {
    const { url, srv } = await serve([
      [500, { "Content-Type": "application/problem+json" }, JSON.stringify({ type: "/problems/internal", title: "x", status: 500, code: "internal" })],
      [409, { "Content-Type": "application/problem+json" }, JSON.stringify({ type: "/problems/new", title: "x", status: 409, code: "a_code_of_tomorrow" })],
      [502, { "Content-Type": "text/html" }, "<h1>bad gateway</h1>"],
    ]);
    try {
      const c = new tp.Coordinator(url, { maxAttempts: 1, logger: quiet });
      assert.ok((await c.getJob("x").catch((e) => e)) instanceof tp.InternalError);
      const future = await c.getJob("x").catch((e) => e);
      assert.equal(future.constructor, tp.CoordinatorError);
      assert.equal(future.code, "a_code_of_tomorrow");
      const html = await c.getJob("x").catch((e) => e);
      assert.equal(html.code, undefined);
      assert.match(html.body, /bad gateway/);
    } finally {
      srv.close();
    }
  });

  it("retries 5xx, 429 and 408 until success", async () => {
    const { url, seen, srv } = await serve([[502, {}, ""], [429, {}, ""], [408, {}, ""],
      [200, { "Content-Type": "application/json" }, JSON.stringify({ name: "x", participants: ["a"] })]]);
    try {
      const c = new tp.Coordinator(url, { minBackoffMs: 10, maxBackoffMs: 50, logger: quiet });
      assert.equal((await c.getJob("x")).name, "x");
      assert.equal(seen.length, 4);
    } finally {
      srv.close();
    }
  });
});

describe("faults", () => {
  it("retries through a coordinator kill", async () => {
    const c = admin();
    const job = unique("kill");
    await c.putJob(job, { participants: ["a"] });
    const e = (await c.register(job, "a")).epoch;
    await control("restart");
    const cp = await c.openCheckpoint(job);
    await control("restart");
    assert.equal((await c.vote(job, cp.id, "a", { epoch: e, vote: "prepared", committables: ["k"] })).status, "committing");
    await control("restart");
    assert.equal((await c.ack(job, cp.id, "a", e)).status, "committed");
    assert.equal((await c.getJob(job)).last_checkpoint, cp.id);
  });

  it("a lost answer opens one checkpoint", async () => {
    const c = admin("TWOPHASE_PROXY_URL");
    const job = unique("lost");
    await c.putJob(job, { participants: ["a"] });
    await control("lose-answers?n=2");
    const cp = await c.openCheckpoint(job);
    assert.equal(cp.id, 1);
    assert.equal((await c.getJob(job)).last_checkpoint, 1);
    assert.deepEqual((await c.checkpoints(job)).items.map((x) => x.id), [1]);
    const e = (await c.register(job, "a")).epoch;
    const cp2 = await c.openCheckpoint(job);
    await control("lose-answers?n=1");
    assert.equal((await c.vote(job, cp2.id, "a", { epoch: e, vote: "prepared", committables: ["once"] })).status, "committing");
  });
});

describe("transport", () => {
  it("TLS with a client certificate", async () => {
    const c = new tp.Coordinator(env("TWOPHASE_TLS_URL"), {
      token: env("TWOPHASE_ADMIN_TOKEN"), caFile: env("TWOPHASE_CA_FILE"),
      certFile: env("TWOPHASE_CLIENT_CERT"), keyFile: env("TWOPHASE_CLIENT_KEY"), logger: quiet,
    });
    const job = unique("tls");
    assert.equal((await c.putJob(job, { participants: ["a"] })).name, job);
    assert.equal((await c.register(job, "a")).epoch, 1);
    await c.close();
  });

  it("an untrusted certificate is not retried", async () => {
    const c = new tp.Coordinator(env("TWOPHASE_TLS_URL"), { token: env("TWOPHASE_ADMIN_TOKEN"), logger: quiet });
    const err = await c.info({ signal: AbortSignal.timeout(20_000) }).catch((e) => e);
    assert.ok(err instanceof tp.Misconfigured, String(err));
    assert.match(err.message, /certificate/);
  });

  it("the token never shows in an error", async () => {
    const err = await admin().getJob(unique("nothing")).catch((e) => e);
    assert.ok(err instanceof tp.NotFound);
    assert.ok(!String(err).includes(env("TWOPHASE_ADMIN_TOKEN")) && !JSON.stringify(err).includes(env("TWOPHASE_ADMIN_TOKEN")));
  });
});
