import type { components } from "./schema.js";
type Schemas = components["schemas"];
export type Job = Schemas["Job"];
export type JobConfig = Schemas["JobConfig"];
export type Checkpoint = Schemas["Checkpoint"];
export type CheckpointParticipant = Schemas["CheckpointParticipant"];
export type CheckpointStatus = Schemas["CheckpointStatus"];
export type Pending = Schemas["Pending"];
export type PendingItem = Schemas["PendingItem"];
export type Registration = Schemas["Registration"];
export type Token = Schemas["Token"];
export type TokenCreated = Schemas["TokenCreated"];
export type TokenRequest = Schemas["TokenRequest"];
export type AuditEntry = Schemas["AuditEntry"];
export type Info = Schemas["Info"];
export type ParticipantView = Schemas["ParticipantView"];
export type Scope = Schemas["Scope"];
/** One page of a list; `nextCursor` is undefined on the last page. */
export interface Page<T> {
    items: T[];
    nextCursor?: string;
}
/** Where the client says what it does: retries at debug and, from the third attempt, warn. */
export interface Logger {
    debug(message: string, fields?: Record<string, unknown>): void;
    info(message: string, fields?: Record<string, unknown>): void;
    warn(message: string, fields?: Record<string, unknown>): void;
}
/** A logger that says nothing but warnings, on the console. */
export declare const consoleWarnings: Logger;
export interface CoordinatorOptions {
    /** A bearer token (`tpc_...`). */
    token?: string;
    /** Milliseconds one attempt may take, a long-poll's wait on top (default 10000). */
    timeoutMs?: number;
    /** PEM of the CAs the coordinator's certificate must be signed by (default: Node's). */
    ca?: string | Buffer;
    /** Path of that PEM file, instead of `ca`. */
    caFile?: string;
    /** A client certificate and its key (PEM), for a coordinator that asks for one. */
    cert?: string | Buffer;
    key?: string | Buffer;
    certFile?: string;
    keyFile?: string;
    /** Attempts per call; 0 (the default) retries until the call's signal aborts. */
    maxAttempts?: number;
    /** Bounds of the backoff between attempts, in milliseconds (default 50 and 5000). */
    minBackoffMs?: number;
    maxBackoffMs?: number;
    /** Send `Prefer: return=minimal` on votes and acks (default true). */
    minimal?: boolean;
    logger?: Logger;
}
/** Options of one call: a signal that ends it, and its retries, at once. */
export interface CallOptions {
    signal?: AbortSignal;
}
/**
 * A client of the coordinator: one method per operation of its openapi.yaml (through
 * openapi-fetch, with types generated from it), with the Go client's retries: network
 * errors, 5xx, 408 and 429 are retried with exponential backoff and jitter (a 503's
 * Retry-After honoured), every `openCheckpoint` carries an Idempotency-Key so that a retry
 * never opens two, and a certificate that cannot be verified fails at once.
 *
 * Methods reject with a `CoordinatorError` subclass (`Fenced`, `NotFound`, ...) when the
 * coordinator refuses, `Misconfigured` for a certificate that cannot be verified, the
 * signal's reason when the call's signal aborts, and the last error when `maxAttempts`
 * ran out.
 */
export declare class Coordinator {
    #private;
    readonly url: string;
    constructor(url: string, options?: CoordinatorOptions);
    /** Closes the connections of a client made with TLS options. */
    close(): Promise<void>;
    /** The delay before attempt+1: exponential, capped, half fixed and half random. */
    backoff(attempt: number): number;
    /** Creates the job or replaces its configuration (new checkpoints use it). */
    putJob(job: string, config: JobConfig, opts?: CallOptions): Promise<Job>;
    getJob(job: string, opts?: CallOptions): Promise<Job>;
    /** One page of jobs, ordered by name (those the token may read). */
    jobs(query?: {
        limit?: number;
        cursor?: string;
    }, opts?: CallOptions): Promise<Page<Job>>;
    /** Every job, page after page. */
    allJobs(limit?: number, opts?: CallOptions): AsyncGenerator<Job>;
    /** Deletes the job when it owes nothing (else JobBusy). */
    deleteJob(job: string, opts?: CallOptions): Promise<void>;
    /** A new epoch for the participant, higher than any before, and what it owes. */
    register(job: string, participant: string, opts?: CallOptions): Promise<Registration>;
    /**
     * What the participant owes, oldest first. With waitMs and nothing owed, the coordinator
     * answers as soon as something is, or when waitMs ends; with the caller's epoch it
     * answers at once once that epoch is no longer current.
     */
    pending(job: string, participant: string, options?: {
        waitMs?: number;
        epoch?: number;
    }, opts?: CallOptions): Promise<Pending>;
    /** Each participant of the job at a glance: epoch, registration, last vote and how long
     * after its checkpoint opened it came, last ack, and how much it owes. */
    participants(job: string, opts?: CallOptions): Promise<ParticipantView[]>;
    /**
     * Opens the job's next checkpoint (phase one). Every attempt carries the same
     * Idempotency-Key (a new one when none is given), so a retry after a lost answer returns
     * the checkpoint that the first attempt opened. TooManyCheckpoints: as many as the job
     * allows are preparing.
     */
    openCheckpoint(job: string, options?: {
        timeoutMs?: number;
        idempotencyKey?: string;
    }, opts?: CallOptions): Promise<Checkpoint>;
    /**
     * One checkpoint. waitMs: wait up to that long while it is preparing. With participant,
     * the minimal view: only that participant's entry, and counts.
     */
    getCheckpoint(job: string, id: number, options?: {
        waitMs?: number;
        participant?: string;
    }, opts?: CallOptions): Promise<Checkpoint>;
    /** One page of the job's checkpoints, newest first, optionally of some statuses. */
    checkpoints(job: string, query?: {
        status?: CheckpointStatus[];
        limit?: number;
        cursor?: string;
    }, opts?: CallOptions): Promise<Page<Checkpoint>>;
    allCheckpointsOf(job: string, query?: {
        status?: CheckpointStatus[];
        limit?: number;
    }, opts?: CallOptions): AsyncGenerator<Checkpoint>;
    /** Operators: checkpoints across jobs, oldest first (default preparing and committing). */
    openCheckpoints(query?: {
        status?: CheckpointStatus[];
        job?: string;
        olderThanMs?: number;
        limit?: number;
        cursor?: string;
    }, opts?: CallOptions): Promise<Page<Checkpoint>>;
    /**
     * Votes `prepared` (with committables, JSON values) or `abort` (with a reason). Answers
     * the checkpoint after the vote; with waitMs, once it is decided or the wait ends.
     * Fenced: a newer epoch registered. AlreadyDecided: decided before the vote counted
     * (its `checkpoint` shows whether an earlier attempt was recorded).
     */
    vote(job: string, id: number, participant: string, vote: {
        epoch: number;
        vote: "prepared";
        committables?: unknown[];
    } | {
        epoch: number;
        vote: "abort";
        reason?: string;
    }, options?: {
        waitMs?: number;
        minimal?: boolean;
    }, opts?: CallOptions): Promise<Checkpoint>;
    /** The participant applied the decision. Send it only after the apply returned. */
    ack(job: string, id: number, participant: string, epoch: number, options?: {
        minimal?: boolean;
    }, opts?: CallOptions): Promise<Checkpoint>;
    /** Decides commit (for jobs without auto_commit); VotesMissing names who did not vote. */
    commit(job: string, id: number, reason?: string, opts?: CallOptions): Promise<Checkpoint>;
    /** Decides abort (and aborts every higher checkpoint still preparing). */
    abort(job: string, id: number, reason?: string, opts?: CallOptions): Promise<Checkpoint>;
    /** Operators: records the acks that participants gone for good will never send. */
    complete(job: string, id: number, reason?: string, opts?: CallOptions): Promise<Checkpoint>;
    /** Actions taken by request, newest first. */
    audit(query?: {
        job?: string;
        limit?: number;
        cursor?: string;
    }, opts?: CallOptions): Promise<Page<AuditEntry>>;
    info(opts?: CallOptions): Promise<Info>;
    /** Admin: a new token; its secret is in `.token`, shown this once. */
    createToken(request: TokenRequest, opts?: CallOptions): Promise<TokenCreated>;
    tokens(query?: {
        limit?: number;
        cursor?: string;
    }, opts?: CallOptions): Promise<Page<Token>>;
    getToken(name: string, opts?: CallOptions): Promise<Token>;
    revokeToken(name: string, opts?: CallOptions): Promise<void>;
    /**
     * A request the typed methods do not make (for tests of what the coordinator refuses,
     * say): sent with the same token, retries and errors.
     */
    raw(op: string, method: string, path: string, init?: {
        body?: string;
        headers?: Record<string, string>;
    }, opts?: CallOptions): Promise<unknown>;
}
/** Waits ms milliseconds, or rejects with the signal's reason when it aborts. */
export declare function sleep(ms: number, signal?: AbortSignal): Promise<void>;
export {};
