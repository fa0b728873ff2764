#!/usr/bin/env node
// A file sink participant of the two-phase-commit coordinator, in Node, built on the
// TypeScript client (clients/typescript, @twophase/coordinator) and its Runner.
//
// It plays the same part as the Go FileSink (e2e/sinks/filesink.go) and the Python sink
// (e2e/sinks/python/pysink.py): it receives events from the pipeline's source over a unix
// socket (e2e/pipeline/stream.go: JSON lines, "reset", events, "barrier"), and for each
// checkpoint writes them to a temp file that it fsyncs (prepare), renames into place
// (commit) or removes (abort). Its committables are
// [{"temp": ".pending-<id>.jsonl", "final": "part-<id>.jsonl", "events": n}], as theirs.
//
// Usage: tssink.mjs --coordinator URL --job JOB --name NAME --socket PATH --dir DIR [--ca-file PEM]
// The token comes from $TSSINK_TOKEN (never logged). Exit 3 when fenced, 2 when the
// coordinator's certificate cannot be verified or the token is refused, 0 on SIGTERM.
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import readline from "node:readline";
import { parseArgs } from "node:util";
import * as tp from "../../../clients/typescript/dist/index.js";

const TEMP_PREFIX = ".pending-";
const FINAL_PREFIX = "part-";
const log = (msg, fields = {}) =>
  process.stderr.write(`tssink pid=${process.pid} ${msg} ${Object.entries(fields).map(([k, v]) => `${k}=${v}`).join(" ")}\n`);
const pad = (id) => String(id).padStart(20, "0");

/** The sink's end of the source's stream (see e2e/pipeline/stream.go). */
class Inbox {
  constructor(socketPath, name) {
    Object.assign(this, { socketPath, name });
    this.open = [];
    this.sealed = []; // [checkpoint, events]
    this.waiters = new Set();
  }
  notify() {
    for (const w of this.waiters) w();
  }
  clear() {
    this.open = [];
    this.sealed = [];
    this.notify();
  }
  async run() {
    for (;;) {
      await new Promise((resolve) => {
        const conn = net.connect(this.socketPath);
        conn.on("error", () => {});
        conn.on("close", () => {
          this.clear(); // the source replays what was not prepared
          setTimeout(resolve, 20);
        });
        conn.on("connect", () => {
          conn.write(JSON.stringify({ hello: this.name }) + "\n");
          readline.createInterface({ input: conn }).on("line", (line) => {
            let frame;
            try {
              frame = JSON.parse(line);
            } catch {
              conn.destroy();
              return;
            }
            if ("reset" in frame) {
              this.open = [];
              this.sealed = [];
            } else if ("barrier" in frame) {
              this.sealed.push([frame.barrier, this.open]);
              this.open = [];
            } else if ("seq" in frame) {
              this.open.push({ seq: frame.seq, payload: frame.payload ?? "" });
            }
            this.notify();
          });
        });
      });
    }
  }
  /** Events up to barrier cid; null when the signal aborts (decided meanwhile) or a
   * higher barrier came first (barrier cid never will). */
  async take(cid, signal) {
    for (;;) {
      for (let i = 0; i < this.sealed.length; i++) {
        const [c] = this.sealed[i];
        if (c >= cid) {
          if (c !== cid) return null;
          const events = this.sealed.slice(0, i + 1).flatMap(([, evs]) => evs);
          this.sealed.splice(0, i + 1);
          return events;
        }
      }
      if (signal.aborted) return null;
      await new Promise((resolve) => {
        const done = () => {
          this.waiters.delete(done);
          signal.removeEventListener("abort", done);
          resolve();
        };
        this.waiters.add(done);
        signal.addEventListener("abort", done, { once: true });
      });
    }
  }
}

function fsyncDir(dir) {
  const fd = fs.openSync(dir, "r");
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

class FileSink {
  constructor(coord, job, name, inbox, dir) {
    Object.assign(this, { coord, job, name, inbox, dir });
  }
  prepare = async (cid, context) => {
    const events = await this.inbox.take(cid, context.signal);
    if (events === null) throw new Error("barrier never came"); // the Runner votes abort, unless decided
    if (events.length === 0) return [];
    const temp = `${TEMP_PREFIX}${pad(cid)}.jsonl`;
    const fd = fs.openSync(path.join(this.dir, temp), "w");
    try {
      fs.writeSync(fd, events.map((e) => JSON.stringify(e) + "\n").join(""));
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fsyncDir(this.dir);
    return [{ temp, final: `${FINAL_PREFIX}${pad(cid)}.jsonl`, events: events.length }];
  };
  commit = async (cid, committables) => {
    for (const c of committables) {
      try {
        fs.renameSync(path.join(this.dir, c.temp), path.join(this.dir, c.final));
      } catch (e) {
        if (e.code !== "ENOENT" || !fs.existsSync(path.join(this.dir, c.final))) {
          throw new tp.Permanent(`checkpoint ${cid}: ${c.temp} is neither pending nor committed`);
        }
      }
    }
    fsyncDir(this.dir);
  };
  abort = async (cid, committables) => {
    for (const c of committables) fs.rmSync(path.join(this.dir, c.temp), { force: true });
    fsyncDir(this.dir);
  };
  /** Temp files that no pending item names: left by a process that died between writing
   * them and voting, or before it applied a decision. */
  recover = async (epoch, pending) => {
    log("registered", { epoch, owed: pending.length });
    const owed = new Set(pending.flatMap((it) => (it.committables ?? []).map((c) => c?.temp)));
    for (const name of fs.readdirSync(this.dir).sort()) {
      if (!name.startsWith(TEMP_PREFIX) || owed.has(name)) continue;
      const cid = Number(name.slice(TEMP_PREFIX.length).split(".")[0]);
      let cp = null;
      try {
        cp = await this.coord.getCheckpoint(this.job, cid, { participant: this.name });
      } catch (e) {
        if (!(e instanceof tp.NotFound || e instanceof tp.Gone)) throw e;
      }
      const entry = cp?.participants.find((p) => p.name === this.name);
      const voted = entry?.vote === "prepared" && (entry.committables ?? []).some((c) => c?.temp === name);
      if (cp?.status === "preparing" && voted) continue;
      const committable = { temp: name, final: `${FINAL_PREFIX}${pad(cid)}.jsonl` };
      if ((cp?.status === "committing" || cp?.status === "committed") && voted) {
        await this.commit(cid, [committable]);
      } else {
        await this.abort(cid, [committable]);
        log("recovered: removed an orphan temp file", { file: name, status: cp?.status ?? "gone" });
      }
    }
  };
}

const { values: args } = parseArgs({
  options: {
    coordinator: { type: "string" }, job: { type: "string" }, name: { type: "string" },
    socket: { type: "string" }, dir: { type: "string" }, "ca-file": { type: "string" },
  },
});
for (const required of ["coordinator", "job", "name", "socket", "dir"]) {
  if (!args[required]) {
    process.stderr.write(`tssink: --${required} is required\n`);
    process.exit(2);
  }
}
const stop = new AbortController();
process.on("SIGTERM", () => stop.abort());
process.on("SIGINT", () => stop.abort());
const inbox = new Inbox(args.socket, args.name);
void inbox.run();
const logger = { debug() {}, info: (m, f) => log(m, f), warn: (m, f) => log(m, f) };
try {
  const coord = new tp.Coordinator(args.coordinator, {
    token: process.env.TSSINK_TOKEN || undefined, caFile: args["ca-file"], maxBackoffMs: 1000, logger,
  });
  const sink = new FileSink(coord, args.job, args.name, inbox, args.dir);
  // The vote waits for the decision up to 10 s, and so does the long-poll on pending.
  await new tp.Runner(coord, args.job, args.name, sink, { waitMs: 10000, logger }).run(stop.signal);
  process.exit(0);
} catch (e) {
  if (e instanceof tp.Fenced) {
    log("fenced: a newer instance registered; stopping");
    process.exit(3);
  }
  if (e instanceof tp.Misconfigured || e instanceof tp.Unauthenticated || e instanceof tp.Forbidden) {
    log(`stopping: ${e.message}`);
    process.exit(2);
  }
  throw e;
}
