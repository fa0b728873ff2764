// What the contract tests run against: real coordinators on PostgreSQL, started by the Go
// test e2e/TestTypeScriptClient, which hands them over in TWOPHASE_* environment variables.
import { randomUUID } from "node:crypto";
import { Coordinator, TooManyCheckpoints } from "../dist/index.js";

export function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through \`go test -run TestTypeScriptClient ./e2e/\``);
  return value;
}

/** Asks the Go test to act on the first coordinator: restart, kill, start, lose-answers?n=N. */
export async function control(action) {
  const res = await fetch(`${env("TWOPHASE_CONTROL")}/${action}`, { method: "POST" });
  if (res.status !== 204) throw new Error(`control ${action}: HTTP ${res.status}`);
}

export const unique = (prefix) => `${prefix}-${randomUUID().slice(0, 10)}`;

export const quiet = { debug() {}, info() {}, warn() {} };

export function admin(urlVar = "TWOPHASE_URL", options = {}) {
  return new Coordinator(env(urlVar), { token: env("TWOPHASE_ADMIN_TOKEN"), maxBackoffMs: 500, logger: quiet, ...options });
}

export async function eventually(what, fn, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Opens a checkpoint of a job every intervalMs until stopped. */
export function trigger(coord, job, intervalMs = 50) {
  const stop = new AbortController();
  const done = (async () => {
    while (!stop.signal.aborted) {
      try {
        await coord.openCheckpoint(job, {}, { signal: stop.signal });
      } catch (e) {
        if (!(e instanceof TooManyCheckpoints) && !stop.signal.aborted) throw e;
      }
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  })();
  return async () => {
    stop.abort();
    await done.catch(() => {});
  };
}
