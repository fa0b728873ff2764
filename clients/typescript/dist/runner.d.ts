import { type Coordinator, type Logger, type PendingItem } from "./coordinator.js";
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
export declare class Runner<C = unknown> {
    #private;
    readonly coordinator: Coordinator;
    readonly job: string;
    readonly participant: string;
    constructor(coordinator: Coordinator, job: string, participant: string, callbacks: RunnerCallbacks<C>, options?: RunnerOptions);
    /** The epoch this instance registered with; 0 before it registered. */
    get epoch(): number;
    /**
     * Registers and serves until `signal` aborts (then it resolves, at once, also from a
     * long-poll), or until something fatal: it rejects with Fenced when a newer instance of
     * the participant registered (stop writing: the new one resolves what this one
     * prepared), VoteConflict, a Permanent error of a callback, or another refusal that
     * retrying cannot change (NotFound: the job does not exist, Forbidden, ...).
     */
    run(signal: AbortSignal): Promise<void>;
}
