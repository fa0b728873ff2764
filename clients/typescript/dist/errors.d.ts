import type { components } from "./schema.js";
/** A problem document (RFC 9457) as the coordinator sends it. */
export type Problem = components["schemas"]["Problem"];
/** The stable machine codes of problems. */
export type ProblemCode = components["schemas"]["ProblemCode"];
type Checkpoint = components["schemas"]["Checkpoint"];
/**
 * The coordinator refused a request with a problem document, or answered an error that
 * carried none (then `code` is undefined and `body` holds the start of what was said).
 */
export declare class CoordinatorError extends Error {
    /** The HTTP status. */
    readonly status: number;
    /** The problem's machine code (`fenced`, `already_decided`, ...). */
    readonly code: ProblemCode | (string & {}) | undefined;
    /** The problem's explanation for people. */
    readonly detail: string | undefined;
    /** The whole problem document, if there was one. */
    readonly problem: Problem | undefined;
    /** The start of the body when it was no problem document (a proxy's page, say). */
    readonly body: string;
    /** Seconds to wait before retrying, from `Retry-After`. */
    readonly retryAfter: number | undefined;
    /** The operation that failed. */
    readonly op: string;
    constructor(op: string, status: number, problem?: Problem, body?: string, retryAfter?: number);
    /** The checkpoint as it stands, carried by problems about a checkpoint. */
    get checkpoint(): Checkpoint | undefined;
    /** Whether the same request may succeed later: 5xx, 408 and 429. */
    get transient(): boolean;
}
/** 400 `invalid_request`: the request is wrong; `problem.errors` says where. */
export declare class InvalidRequest extends CoordinatorError {
}
/** 401 `unauthenticated`: no token, or one that is unknown, revoked or expired. */
export declare class Unauthenticated extends CoordinatorError {
}
/** 403 `forbidden`: the token does not allow this; `detail` names the scope that would. */
export declare class Forbidden extends CoordinatorError {
}
/** 404 `not_found`: no such job, checkpoint, participant of the job, or token. */
export declare class NotFound extends CoordinatorError {
}
/** 405 `method_not_allowed`. */
export declare class MethodNotAllowed extends CoordinatorError {
}
/** 409 `vote_conflict`: this participant voted differently before. */
export declare class VoteConflict extends CoordinatorError {
}
/** 409 `fenced`: a newer instance of the participant registered; this one must stop. */
export declare class Fenced extends CoordinatorError {
}
/** 409 `not_registered`: epoch 0, the participant never registered. */
export declare class NotRegistered extends CoordinatorError {
}
/** 409 `already_decided`: the checkpoint was decided; `checkpoint` shows how. */
export declare class AlreadyDecided extends CoordinatorError {
}
/** 409 `not_decided`: the checkpoint is still preparing. */
export declare class NotDecided extends CoordinatorError {
}
/** 409 `votes_missing`: a commit without every prepared vote; `problem.missing`. */
export declare class VotesMissing extends CoordinatorError {
}
/** 409 `lower_checkpoint_open`: a lower checkpoint of the job is still preparing. */
export declare class LowerCheckpointOpen extends CoordinatorError {
}
/** 409 `too_many_checkpoints`: as many as the job allows are preparing. */
export declare class TooManyCheckpoints extends CoordinatorError {
}
/** 409 `idempotency_conflict`: the Idempotency-Key was used with another body. */
export declare class IdempotencyConflict extends CoordinatorError {
}
/** 409 `job_busy`: the job still owes something and cannot be deleted. */
export declare class JobBusy extends CoordinatorError {
}
/** 409 `token_exists`: a token of that name exists. */
export declare class TokenExists extends CoordinatorError {
}
/** 410 `gone`: retention deleted the checkpoint (it was final and owed nothing). */
export declare class Gone extends CoordinatorError {
}
/** 413 `payload_too_large`. */
export declare class PayloadTooLarge extends CoordinatorError {
}
/** 415 `unsupported_media_type`. */
export declare class UnsupportedMediaType extends CoordinatorError {
}
/** 421 `misdirected_request`: a Host the coordinator does not serve. */
export declare class MisdirectedRequest extends CoordinatorError {
}
/** 503 `unavailable`: retried by the client; thrown when its attempts ran out. */
export declare class Unavailable extends CoordinatorError {
}
/** 500 `internal`. */
export declare class InternalError extends CoordinatorError {
}
/** What retrying cannot fix, thrown at once: a certificate that cannot be verified. */
export declare class Misconfigured extends Error {
    constructor(message: string, options?: {
        cause?: unknown;
    });
}
/** Thrown by a `prepare` that gives up because the checkpoint was decided meanwhile. */
export declare class DecidedMeanwhile extends Error {
    constructor(message?: string);
}
/** Thrown by (or wrapping the error of) a commit or abort that retrying cannot cure. */
export declare class Permanent extends Error {
    constructor(message: string, options?: {
        cause?: unknown;
    });
}
/** The error for an answer: the class of its code, or CoordinatorError for a code this
 * version does not know and for an answer without a problem document. */
export declare function errorFor(op: string, status: number, problem: Problem | undefined, body: string, retryAfter?: number): CoordinatorError;
export {};
