import { consoleWarnings, sleep, type Checkpoint, type Coordinator, type Logger, type PendingItem } from "./coordinator.js";
import { AlreadyDecided, CoordinatorError, DecidedMeanwhile, Fenced, Gone, NotFound, Permanent } from "./errors.js";

/** What `prepare` is given besides the checkpoint's id. */
export interface PrepareContext {
  /**
   * Aborts when the checkpoint is decided while `prepare` runs (a deadline, another
   * participant's abort), or the runner stops. A prepare that waits for input should give up
   * then (throwing DecidedMeanwhile): nothing is voted. The watch costs a long-poll only
   * once `signal` is first read.
   */
  readonly signal: AbortSignal;
}

export interface RunnerCallbacks<C = unknown> {
  /** Makes the checkpoint's writes durable but invisible; returns them as committables
   * (JSON values). A rejection votes abort with its message. */
  prepare(checkpoint: number, context: PrepareContext): Promise<C[]> | C[];
  /** Makes the committables visible. Must be idempotent: after a crash before the ack it
   * runs again. A rejection is retried with backoff (never acked), unless it is Permanent. */
  commit(checkpoint: number, committables: C[]): Promise<void> | void;
  /** Rolls the committables back. Idempotent, retried as commit is. */
  abort(checkpoint: number, committables: C[]): Promise<void> | void;
  /** Optional: called once after registering with what is owed, before anything is
   * applied; the place to clean up leftovers that no item names. */
  recover?(epoch: number, items: PendingItem[]): Promise<void> | void;
}

export interface RunnerOptions {
  /** How long a long-poll waits, 1 to 60000 ms (default 30000). */
  waitMs?: number;
  logger?: Logger;
}

/**
 * Serves the protocol for one participant of one job, as the Go client's Runner does: it
 * registers (fencing older instances), applies what is owed from before (in checkpoint
 * order), then for each checkpoint calls `prepare` and votes, waits for the decision by
 * long-poll (an idle runner costs one request per `waitMs`), calls `commit` or `abort`, and
 * acks only after that resolved.
 *
 * The Coordinator should retry without limit (maxAttempts 0, its default): the Runner relies
 * on it to ride out outages.
 */
export class Runner<C = unknown> {
  readonly coordinator: Coordinator;
  readonly job: string;
  readonly participant: string;
  readonly #cb: RunnerCallbacks<C>;
  readonly #waitMs: number;
  readonly #log: Logger;
  #epoch = 0;
  #inDoubt = new Set<number>();
  #started = false;
  #signal: AbortSignal = new AbortController().signal;

  constructor(coordinator: Coordinator, job: string, participant: string, callbacks: RunnerCallbacks<C>, options: RunnerOptions = {}) {
    const waitMs = options.waitMs ?? 30_000;
    if (!(waitMs >= 1 && waitMs <= 60_000)) throw new RangeError("waitMs must be within 1 and 60000");
    this.coordinator = coordinator;
    this.job = job;
    this.participant = participant;
    this.#cb = callbacks;
    this.#waitMs = waitMs;
    this.#log = options.logger ?? consoleWarnings;
  }

  /** The epoch this instance registered with; 0 before it registered. */
  get epoch(): number {
    return this.#epoch;
  }

  /**
   * Registers and serves until `signal` aborts (then it resolves, at once, also from a
   * long-poll), or until something fatal: it rejects with Fenced when a newer instance of
   * the participant registered (stop writing: the new one resolves what this one
   * prepared), VoteConflict, a Permanent error of a callback, or another refusal that
   * retrying cannot change (NotFound: the job does not exist, Forbidden, ...).
   */
  async run(signal: AbortSignal): Promise<void> {
    if (this.#started) throw new Error("Runner.run called twice: make a new Runner per instance");
    this.#started = true;
    this.#signal = signal;
    try {
      await this.#run();
    } catch (e) {
      if (signal.aborted && !(e instanceof CoordinatorError) && !(e instanceof Permanent)) return;
      throw e;
    }
  }

  async #run(): Promise<void> {
    const c = this.coordinator;
    const opts = { signal: this.#signal };
    const reg = await c.register(this.job, this.participant, opts);
    this.#epoch = reg.epoch;
    this.#log.info("registered", { job: this.job, participant: this.participant, epoch: reg.epoch, owed: reg.pending.length });
    if (this.#cb.recover) {
      const recover = this.#cb.recover.bind(this.#cb);
      await this.#retry(0, "recover", () => recover(reg.epoch, reg.pending));
    }
    let items = reg.pending;
    for (let first = true; ; first = false) {
      const blocked = await this.#serve(items, first);
      // One long-poll on pending waits for the next checkpoint and for the decision on one
      // in doubt alike (the decision makes its commit or abort owed). Only a commit held
      // back behind a lower undecided checkpoint waits for that one first.
      let waitMs = this.#waitMs;
      if (blocked) {
        await this.#waitLowest();
        waitMs = 0;
      }
      const pending = await c.pending(this.job, this.participant, { waitMs, epoch: this.#epoch }, opts);
      if (pending.epoch !== this.#epoch) {
        throw new Fenced("pending", 409, {
          type: "/problems/fenced", title: "Fenced: stale epoch", status: 409, code: "fenced",
          detail: `${this.job}/${this.participant}: epoch ${this.#epoch} is no longer current (${pending.epoch} is)`,
        });
      }
      items = pending.items;
    }
  }

  async #serve(items: PendingItem[], first: boolean): Promise<boolean> {
    const sorted = [...items].sort((a, b) => a.checkpoint - b.checkpoint);
    for (const it of sorted) {
      const committables = (it.committables ?? []) as C[];
      if (it.action === "commit") {
        if (this.#inDoubt.size > 0 && Math.min(...this.#inDoubt) < it.checkpoint) return true; // commits keep checkpoint order
        await this.#finish(it.checkpoint, true, committables);
      } else if (it.action === "abort") {
        await this.#finish(it.checkpoint, false, committables);
      } else if (it.action === "vote") {
        if (first) {
          // Opened before this instance registered: its transaction died with the previous one.
          await this.#voteAbort(it.checkpoint, "participant restarted: its transaction died with the previous instance");
        } else {
          await this.#prepareAndVote(it.checkpoint);
        }
      } else {
        this.#log.warn("unknown pending action, ignored", { checkpoint: it.checkpoint, action: it.action });
      }
    }
    return false;
  }

  async #waitLowest(): Promise<void> {
    const low = Math.min(...this.#inDoubt);
    try {
      await this.coordinator.getCheckpoint(this.job, low, { waitMs: this.#waitMs, participant: this.participant }, { signal: this.#signal });
    } catch (e) {
      if (e instanceof NotFound || e instanceof Gone) {
        this.#inDoubt.delete(low); // the job was deleted (and created again): nothing owed
        return;
      }
      throw e;
    }
  }

  #votedPrepared(cp: Checkpoint | undefined): boolean {
    const p = cp?.participants.find((x) => x.name === this.participant);
    return p !== undefined && p.vote === "prepared" && p.epoch === this.#epoch;
  }

  async #prepareAndVote(id: number): Promise<void> {
    const decided = new AbortController();
    const stopWatch = new AbortController();
    let watching = false;
    const onStop = () => decided.abort(this.#signal.reason);
    this.#signal.addEventListener("abort", onStop, { once: true });
    const context: PrepareContext = {
      get signal() {
        if (!watching) {
          watching = true;
          void watch();
        }
        return decided.signal;
      },
    };
    const watch = async () => {
      const signal = AbortSignal.any([stopWatch.signal, this.#signal]);
      while (!signal.aborted) {
        try {
          const cp = await this.coordinator.getCheckpoint(this.job, id, { waitMs: this.#waitMs, participant: this.participant }, { signal });
          if (cp.status !== "preparing") {
            decided.abort(new DecidedMeanwhile());
            return;
          }
        } catch {
          // Not knowing is no reason to stop prepare.
          await sleep(500, signal).catch(() => {});
        }
      }
    };
    let committables: C[];
    try {
      committables = (await this.#cb.prepare(id, context)) ?? [];
    } catch (e) {
      if (this.#signal.aborted) throw this.#signal.reason;
      if (e instanceof DecidedMeanwhile || decided.signal.aborted) {
        this.#log.info("prepare stopped: checkpoint decided meanwhile", { checkpoint: id });
        return;
      }
      const reason = e instanceof Error ? e.message || e.name : String(e);
      this.#log.info("prepare failed, voting abort", { checkpoint: id, error: reason });
      await this.#voteAbort(id, reason);
      return;
    } finally {
      stopWatch.abort();
      this.#signal.removeEventListener("abort", onStop);
    }
    if (this.#signal.aborted) {
      await this.#abortQuietly(id, committables); // never voted: nobody will ask for them
      throw this.#signal.reason;
    }
    let cp: Checkpoint;
    try {
      // The vote waits for the decision, so that no request of its own is needed to learn
      // it; the coordinator ends the wait as soon as this participant owes anything else.
      cp = await this.coordinator.vote(this.job, id, this.participant, { epoch: this.#epoch, vote: "prepared", committables },
        { waitMs: this.#waitMs }, { signal: this.#signal });
    } catch (e) {
      if (e instanceof AlreadyDecided) {
        if (this.#votedPrepared(e.checkpoint)) {
          this.#inDoubt.add(id); // an earlier attempt was recorded; the decision will be owed
          return;
        }
        // Not recorded: no pending item will ever name these committables. Roll back here.
        this.#log.info("vote refused, checkpoint already decided: rolling back", { checkpoint: id });
        await this.#retry(id, "abort", () => this.#cb.abort(id, committables));
        return;
      }
      // Fenced, a vote conflict, a stop: an earlier attempt may have been recorded, so the
      // committables are left alone.
      throw e;
    }
    this.#log.debug("voted prepared", { checkpoint: id, status: cp.status });
    if (cp.status === "committing" || cp.status === "committed") {
      if (this.#inDoubt.size === 0) {
        await this.#finish(id, true, committables);
        return;
      }
    } else if (cp.status === "aborted") {
      await this.#finish(id, false, committables);
      return;
    }
    this.#inDoubt.add(id);
  }

  async #voteAbort(id: number, reason: string): Promise<void> {
    try {
      await this.coordinator.vote(this.job, id, this.participant, { epoch: this.#epoch, vote: "abort", reason: reason.slice(0, 1024) }, {},
        { signal: this.#signal });
    } catch (e) {
      if (!(e instanceof AlreadyDecided)) throw e;
    }
  }

  async #finish(id: number, commit: boolean, committables: C[]): Promise<void> {
    const what = commit ? "commit" : "abort";
    await this.#retry(id, what, () => (commit ? this.#cb.commit(id, committables) : this.#cb.abort(id, committables)));
    try {
      await this.coordinator.ack(this.job, id, this.participant, this.#epoch, {}, { signal: this.#signal });
    } catch (e) {
      if (!(e instanceof NotFound || e instanceof Gone)) throw e;
      this.#log.warn("ack: checkpoint gone", { checkpoint: id });
    }
    this.#inDoubt.delete(id);
    this.#log.debug("applied and acked", { checkpoint: id, decision: what });
  }

  async #retry(id: number, what: string, fn: () => Promise<void> | void): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await fn();
        return;
      } catch (e) {
        if (e instanceof Permanent) throw e;
        if (this.#signal.aborted) throw this.#signal.reason;
        const delay = this.coordinator.backoff(attempt);
        this.#log.warn(`${what} failed, retrying`, { checkpoint: id, attempt, delayMs: Math.round(delay), error: String(e) });
        await sleep(delay, this.#signal);
      }
    }
  }

  async #abortQuietly(id: number, committables: C[]): Promise<void> {
    try {
      await this.#cb.abort(id, committables);
    } catch (e) {
      this.#log.warn("abort of an unvoted checkpoint failed", { checkpoint: id, error: String(e) });
    }
  }
}
