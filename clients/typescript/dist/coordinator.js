import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import createClient from "openapi-fetch";
import { Agent, fetch as undiciFetch } from "undici";
import { CoordinatorError, Misconfigured, errorFor } from "./errors.js";
/** A logger that says nothing but warnings, on the console. */
export const consoleWarnings = {
    debug() { },
    info() { },
    warn(message, fields) {
        console.warn(`twophase: ${message}`, fields ?? "");
    },
};
// From this attempt on, a call that goes on retrying says so at warn.
const warnAfter = 3;
// Errors of certificate verification: retrying cannot fix them.
const certificateCodes = new Set([
    "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
    "UNABLE_TO_GET_ISSUER_CERT",
    "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
    "SELF_SIGNED_CERT_IN_CHAIN",
    "DEPTH_ZERO_SELF_SIGNED_CERT",
    "CERT_HAS_EXPIRED",
    "CERT_NOT_YET_VALID",
    "CERT_UNTRUSTED",
    "CERT_REJECTED",
    "ERR_TLS_CERT_ALTNAME_INVALID",
    "ERR_SSL_WRONG_VERSION_NUMBER",
]);
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
export class Coordinator {
    url;
    #client;
    #timeoutMs;
    #maxAttempts;
    #minBackoff;
    #maxBackoff;
    #minimal;
    #log;
    #dispatcher;
    #headers;
    constructor(url, options = {}) {
        const parsed = new URL(url);
        if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
            throw new Misconfigured(`the coordinator's URL must be http:// or https://, not ${url}`);
        }
        this.url = url.replace(/\/+$/, "");
        this.#timeoutMs = options.timeoutMs ?? 10_000;
        this.#maxAttempts = options.maxAttempts ?? 0;
        this.#minBackoff = options.minBackoffMs ?? 50;
        this.#maxBackoff = options.maxBackoffMs ?? 5000;
        this.#minimal = options.minimal ?? true;
        this.#log = options.logger ?? consoleWarnings;
        const ca = options.ca ?? (options.caFile ? readFileSync(options.caFile) : undefined);
        const cert = options.cert ?? (options.certFile ? readFileSync(options.certFile) : undefined);
        const key = options.key ?? (options.keyFile ? readFileSync(options.keyFile) : undefined);
        if (ca || cert) {
            if (parsed.protocol !== "https:")
                throw new Misconfigured("a CA or client certificate needs an https:// URL");
            this.#dispatcher = new Agent({ connect: { ca, cert, key, minVersion: "TLSv1.2" } });
        }
        const dispatcher = this.#dispatcher;
        const headers = { Accept: "application/json" };
        if (options.token)
            headers.Authorization = `Bearer ${options.token}`;
        this.#headers = headers;
        this.#client = createClient({
            baseUrl: this.url,
            headers,
            fetch: dispatcher
                ? async (request) => {
                    const body = request.body ? await request.arrayBuffer() : undefined;
                    return (await undiciFetch(request.url, {
                        method: request.method,
                        headers: request.headers,
                        body,
                        signal: request.signal,
                        dispatcher,
                    }));
                }
                : undefined,
        });
    }
    /** Closes the connections of a client made with TLS options. */
    async close() {
        await this.#dispatcher?.close();
    }
    /** The delay before attempt+1: exponential, capped, half fixed and half random. */
    backoff(attempt) {
        const d = Math.min(this.#maxBackoff, this.#minBackoff * 2 ** Math.min(attempt - 1, 30));
        return d / 2 + (Math.random() * d) / 2;
    }
    async #call(op, ok, waitMs, opts, send) {
        const caller = opts?.signal;
        let last = new Error(op);
        for (let attempt = 1;; attempt++) {
            caller?.throwIfAborted();
            const timeout = AbortSignal.timeout(this.#timeoutMs + waitMs);
            const signal = caller ? AbortSignal.any([caller, timeout]) : timeout;
            let retryAfter = 0;
            try {
                const answer = await send(signal);
                if (ok.includes(answer.response.status)) {
                    return { data: answer.data, response: answer.response };
                }
                const err = errorOf(op, answer);
                if (!err.transient)
                    throw err;
                last = err;
                retryAfter = (err.retryAfter ?? 0) * 1000;
            }
            catch (e) {
                if (e instanceof CoordinatorError)
                    throw e;
                if (caller?.aborted)
                    throw caller.reason;
                const code = causeCode(e);
                if (code && certificateCodes.has(code)) {
                    throw new Misconfigured(`${op}: the coordinator's TLS certificate cannot be verified (${code}): ` +
                        "give its CA (ca or caFile), and check the URL's host name", { cause: e });
                }
                last = new Error(`${op}: ${code ?? e.message}`, { cause: e });
            }
            if (this.#maxAttempts > 0 && attempt >= this.#maxAttempts)
                throw last;
            const delay = Math.max(this.backoff(attempt), Math.min(retryAfter, this.#maxBackoff));
            (attempt >= warnAfter ? this.#log.warn : this.#log.debug).call(this.#log, "coordinator call failed, retrying", { op, attempt, delayMs: Math.round(delay), error: last.message });
            await sleep(delay, caller);
        }
    }
    #prefer(minimal) {
        return (minimal ?? this.#minimal) ? { Prefer: "return=minimal" } : {};
    }
    // --- jobs ---
    /** Creates the job or replaces its configuration (new checkpoints use it). */
    async putJob(job, config, opts) {
        const { data } = await this.#call("put job", [200, 201], 0, opts, (signal) => this.#client.PUT("/v1/jobs/{job}", { params: { path: { job } }, body: config, signal }));
        return data;
    }
    async getJob(job, opts) {
        const { data } = await this.#call("get job", [200], 0, opts, (signal) => this.#client.GET("/v1/jobs/{job}", { params: { path: { job } }, signal }));
        return data;
    }
    /** One page of jobs, ordered by name (those the token may read). */
    async jobs(query = {}, opts) {
        const { data } = await this.#call("list jobs", [200], 0, opts, (signal) => this.#client.GET("/v1/jobs", { params: { query }, signal }));
        return { items: data.items, nextCursor: data.next_cursor };
    }
    /** Every job, page after page. */
    async *allJobs(limit, opts) {
        yield* pages((cursor) => this.jobs({ limit, cursor }, opts));
    }
    /** Deletes the job when it owes nothing (else JobBusy). */
    async deleteJob(job, opts) {
        await this.#call("delete job", [204], 0, opts, (signal) => this.#client.DELETE("/v1/jobs/{job}", { params: { path: { job } }, signal }));
    }
    // --- participants ---
    /** A new epoch for the participant, higher than any before, and what it owes. */
    async register(job, participant, opts) {
        const { data } = await this.#call("register", [200], 0, opts, (signal) => this.#client.POST("/v1/jobs/{job}/participants/{participant}/register", { params: { path: { job, participant } }, signal }));
        return data;
    }
    /**
     * What the participant owes, oldest first. With waitMs and nothing owed, the coordinator
     * answers as soon as something is, or when waitMs ends; with the caller's epoch it
     * answers at once once that epoch is no longer current.
     */
    async pending(job, participant, options = {}, opts) {
        const waitMs = options.waitMs ?? 0;
        const query = waitMs > 0 ? { wait_ms: waitMs, ...(options.epoch ? { epoch: options.epoch } : {}) } : {};
        const { data } = await this.#call("pending", [200], waitMs, opts, (signal) => this.#client.GET("/v1/jobs/{job}/participants/{participant}/pending", { params: { path: { job, participant }, query }, signal }));
        return data;
    }
    /** Each participant of the job at a glance: epoch, registration, last vote and how long
     * after its checkpoint opened it came, last ack, and how much it owes. */
    async participants(job, opts) {
        const { data } = await this.#call("list participants", [200], 0, opts, (signal) => this.#client.GET("/v1/jobs/{job}/participants", { params: { path: { job } }, signal }));
        return data.items;
    }
    // --- checkpoints ---
    /**
     * Opens the job's next checkpoint (phase one). Every attempt carries the same
     * Idempotency-Key (a new one when none is given), so a retry after a lost answer returns
     * the checkpoint that the first attempt opened. TooManyCheckpoints: as many as the job
     * allows are preparing.
     */
    async openCheckpoint(job, options = {}, opts) {
        const key = options.idempotencyKey ?? `ts-${randomUUID()}`;
        const body = options.timeoutMs === undefined ? {} : { timeout_ms: options.timeoutMs };
        const { data } = await this.#call("open checkpoint", [200, 201], 0, opts, (signal) => this.#client.POST("/v1/jobs/{job}/checkpoints", { params: { path: { job }, header: { "Idempotency-Key": key } }, body, signal }));
        return data;
    }
    /**
     * One checkpoint. waitMs: wait up to that long while it is preparing. With participant,
     * the minimal view: only that participant's entry, and counts.
     */
    async getCheckpoint(job, id, options = {}, opts) {
        const waitMs = options.waitMs ?? 0;
        const query = {};
        if (waitMs > 0)
            query.wait_ms = waitMs;
        if (options.participant)
            query.participant = options.participant;
        const { data } = await this.#call("get checkpoint", [200], waitMs, opts, (signal) => this.#client.GET("/v1/jobs/{job}/checkpoints/{id}", {
            params: { path: { job, id }, query, header: options.participant ? { Prefer: "return=minimal" } : {} }, signal,
        }));
        return data;
    }
    /** One page of the job's checkpoints, newest first, optionally of some statuses. */
    async checkpoints(job, query = {}, opts) {
        const { data } = await this.#call("list checkpoints", [200], 0, opts, (signal) => this.#client.GET("/v1/jobs/{job}/checkpoints", { params: { path: { job }, query }, signal }));
        return { items: data.items, nextCursor: data.next_cursor };
    }
    async *allCheckpointsOf(job, query = {}, opts) {
        yield* pages((cursor) => this.checkpoints(job, { ...query, cursor }, opts));
    }
    /** Operators: checkpoints across jobs, oldest first (default preparing and committing). */
    async openCheckpoints(query = {}, opts) {
        const { olderThanMs, ...rest } = query;
        const q = olderThanMs === undefined ? rest : { ...rest, older_than_ms: olderThanMs };
        const { data } = await this.#call("list open checkpoints", [200], 0, opts, (signal) => this.#client.GET("/v1/checkpoints", { params: { query: q }, signal }));
        return { items: data.items, nextCursor: data.next_cursor };
    }
    /**
     * Votes `prepared` (with committables, JSON values) or `abort` (with a reason). Answers
     * the checkpoint after the vote; with waitMs, once it is decided or the wait ends.
     * Fenced: a newer epoch registered. AlreadyDecided: decided before the vote counted
     * (its `checkpoint` shows whether an earlier attempt was recorded).
     */
    async vote(job, id, participant, vote, options = {}, opts) {
        const waitMs = options.waitMs ?? 0;
        const body = vote.vote === "prepared" ? { ...vote, committables: vote.committables ?? [] } : vote;
        const { data } = await this.#call("vote", [200], waitMs, opts, (signal) => this.#client.PUT("/v1/jobs/{job}/checkpoints/{id}/votes/{participant}", {
            params: { path: { job, id, participant }, query: waitMs > 0 ? { wait_ms: waitMs } : {}, header: this.#prefer(options.minimal) },
            body: body, signal,
        }));
        return data;
    }
    /** The participant applied the decision. Send it only after the apply returned. */
    async ack(job, id, participant, epoch, options = {}, opts) {
        const { data } = await this.#call("ack", [200], 0, opts, (signal) => this.#client.PUT("/v1/jobs/{job}/checkpoints/{id}/acks/{participant}", {
            params: { path: { job, id, participant }, header: this.#prefer(options.minimal) }, body: { epoch }, signal,
        }));
        return data;
    }
    /** Decides commit (for jobs without auto_commit); VotesMissing names who did not vote. */
    async commit(job, id, reason, opts) {
        const { data } = await this.#call("commit", [200], 0, opts, (signal) => this.#client.POST("/v1/jobs/{job}/checkpoints/{id}/commit", { params: { path: { job, id } }, body: reason === undefined ? {} : { reason }, signal }));
        return data;
    }
    /** Decides abort (and aborts every higher checkpoint still preparing). */
    async abort(job, id, reason, opts) {
        const { data } = await this.#call("abort", [200], 0, opts, (signal) => this.#client.POST("/v1/jobs/{job}/checkpoints/{id}/abort", { params: { path: { job, id } }, body: reason === undefined ? {} : { reason }, signal }));
        return data;
    }
    /** Operators: records the acks that participants gone for good will never send. */
    async complete(job, id, reason, opts) {
        const { data } = await this.#call("complete", [200], 0, opts, (signal) => this.#client.POST("/v1/jobs/{job}/checkpoints/{id}/complete", { params: { path: { job, id } }, body: reason === undefined ? {} : { reason }, signal }));
        return data;
    }
    // --- operations ---
    /** Actions taken by request, newest first. */
    async audit(query = {}, opts) {
        const { data } = await this.#call("audit", [200], 0, opts, (signal) => this.#client.GET("/v1/audit", { params: { query }, signal }));
        return { items: data.items, nextCursor: data.next_cursor };
    }
    async info(opts) {
        const { data } = await this.#call("info", [200], 0, opts, (signal) => this.#client.GET("/v1/info", { signal }));
        return data;
    }
    // --- tokens ---
    /** Admin: a new token; its secret is in `.token`, shown this once. */
    async createToken(request, opts) {
        const { data } = await this.#call("create token", [201], 0, opts, (signal) => this.#client.POST("/v1/tokens", { body: request, signal }));
        return data;
    }
    async tokens(query = {}, opts) {
        const { data } = await this.#call("list tokens", [200], 0, opts, (signal) => this.#client.GET("/v1/tokens", { params: { query }, signal }));
        return { items: data.items, nextCursor: data.next_cursor };
    }
    async getToken(name, opts) {
        const { data } = await this.#call("get token", [200], 0, opts, (signal) => this.#client.GET("/v1/tokens/{name}", { params: { path: { name } }, signal }));
        return data;
    }
    async revokeToken(name, opts) {
        await this.#call("revoke token", [204], 0, opts, (signal) => this.#client.DELETE("/v1/tokens/{name}", { params: { path: { name } }, signal }));
    }
    /**
     * A request the typed methods do not make (for tests of what the coordinator refuses,
     * say): sent with the same token, retries and errors.
     */
    async raw(op, method, path, init = {}, opts) {
        const { data } = await this.#call(op, [200, 201, 204], 0, opts, async (signal) => {
            const request = { method, body: init.body, headers: { ...this.#headers, ...init.headers }, signal };
            const response = this.#dispatcher
                ? (await undiciFetch(this.url + path, { ...request, dispatcher: this.#dispatcher }))
                : await fetch(this.url + path, request);
            const text = await response.text();
            let parsed = text;
            try {
                parsed = text ? JSON.parse(text) : undefined;
            }
            catch {
                // not JSON: kept as text
            }
            return response.ok ? { data: parsed, response } : { error: parsed, response };
        });
        return data;
    }
}
function errorOf(op, answer) {
    const { response, error } = answer;
    const type = (response.headers.get("content-type") ?? "").split(";")[0].trim().toLowerCase();
    let problem;
    if (type === "application/problem+json" && error && typeof error === "object" && "status" in error) {
        problem = error;
    }
    const ra = response.headers.get("retry-after");
    const retryAfter = ra && /^\d+$/.test(ra.trim()) ? Number(ra.trim()) : undefined;
    const body = problem ? "" : typeof error === "string" ? error.slice(0, 1024) : error === undefined ? "" : JSON.stringify(error).slice(0, 1024);
    return errorFor(op, response.status, problem, body, retryAfter);
}
function causeCode(e) {
    for (let c = e; c && typeof c === "object"; c = c.cause) {
        const code = c.code;
        if (typeof code === "string")
            return code;
    }
    return undefined;
}
/** Waits ms milliseconds, or rejects with the signal's reason when it aborts. */
export function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted)
            return reject(signal.reason);
        const onAbort = () => {
            clearTimeout(timer);
            reject(signal.reason);
        };
        const timer = setTimeout(() => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
        }, ms);
        signal?.addEventListener("abort", onAbort, { once: true });
    });
}
async function* pages(page) {
    let cursor;
    for (;;) {
        const p = await page(cursor);
        yield* p.items;
        if (!p.nextCursor)
            return;
        cursor = p.nextCursor;
    }
}
