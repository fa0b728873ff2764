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
export class CoordinatorError extends Error {
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

  constructor(op: string, status: number, problem?: Problem, body = "", retryAfter?: number) {
    let msg = `${op}: HTTP ${status}`;
    if (problem?.code) {
      msg += ` ${problem.code}`;
      if (problem.detail) msg += `: ${problem.detail}`;
    } else if (body) {
      msg += ` (not a problem document): ${JSON.stringify(body)}`;
    }
    super(msg);
    this.name = new.target.name;
    this.op = op;
    this.status = status;
    this.problem = problem;
    this.code = problem?.code;
    this.detail = problem?.detail;
    this.body = body;
    this.retryAfter = retryAfter;
  }

  /** The checkpoint as it stands, carried by problems about a checkpoint. */
  get checkpoint(): Checkpoint | undefined {
    return this.problem?.checkpoint;
  }

  /** Whether the same request may succeed later: 5xx, 408 and 429. */
  get transient(): boolean {
    return this.status >= 500 || this.status === 408 || this.status === 429;
  }
}

/** 400 `invalid_request`: the request is wrong; `problem.errors` says where. */
export class InvalidRequest extends CoordinatorError {}
/** 401 `unauthenticated`: no token, or one that is unknown, revoked or expired. */
export class Unauthenticated extends CoordinatorError {}
/** 403 `forbidden`: the token does not allow this; `detail` names the scope that would. */
export class Forbidden extends CoordinatorError {}
/** 404 `not_found`: no such job, checkpoint, participant of the job, or token. */
export class NotFound extends CoordinatorError {}
/** 405 `method_not_allowed`. */
export class MethodNotAllowed extends CoordinatorError {}
/** 409 `vote_conflict`: this participant voted differently before. */
export class VoteConflict extends CoordinatorError {}
/** 409 `fenced`: a newer instance of the participant registered; this one must stop. */
export class Fenced extends CoordinatorError {}
/** 409 `not_registered`: epoch 0, the participant never registered. */
export class NotRegistered extends CoordinatorError {}
/** 409 `already_decided`: the checkpoint was decided; `checkpoint` shows how. */
export class AlreadyDecided extends CoordinatorError {}
/** 409 `not_decided`: the checkpoint is still preparing. */
export class NotDecided extends CoordinatorError {}
/** 409 `votes_missing`: a commit without every prepared vote; `problem.missing`. */
export class VotesMissing extends CoordinatorError {}
/** 409 `lower_checkpoint_open`: a lower checkpoint of the job is still preparing. */
export class LowerCheckpointOpen extends CoordinatorError {}
/** 409 `too_many_checkpoints`: as many as the job allows are preparing. */
export class TooManyCheckpoints extends CoordinatorError {}
/** 409 `idempotency_conflict`: the Idempotency-Key was used with another body. */
export class IdempotencyConflict extends CoordinatorError {}
/** 409 `job_busy`: the job still owes something and cannot be deleted. */
export class JobBusy extends CoordinatorError {}
/** 409 `token_exists`: a token of that name exists. */
export class TokenExists extends CoordinatorError {}
/** 410 `gone`: retention deleted the checkpoint (it was final and owed nothing). */
export class Gone extends CoordinatorError {}
/** 413 `payload_too_large`. */
export class PayloadTooLarge extends CoordinatorError {}
/** 415 `unsupported_media_type`. */
export class UnsupportedMediaType extends CoordinatorError {}
/** 421 `misdirected_request`: a Host the coordinator does not serve. */
export class MisdirectedRequest extends CoordinatorError {}
/** 503 `unavailable`: retried by the client; thrown when its attempts ran out. */
export class Unavailable extends CoordinatorError {}
/** 500 `internal`. */
export class InternalError extends CoordinatorError {}

/** What retrying cannot fix, thrown at once: a certificate that cannot be verified. */
export class Misconfigured extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "Misconfigured";
  }
}

/** Thrown by a `prepare` that gives up because the checkpoint was decided meanwhile. */
export class DecidedMeanwhile extends Error {
  constructor(message = "the checkpoint was decided while it prepared") {
    super(message);
    this.name = "DecidedMeanwhile";
  }
}

/** Thrown by (or wrapping the error of) a commit or abort that retrying cannot cure. */
export class Permanent extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "Permanent";
  }
}

const classes: Record<ProblemCode, typeof CoordinatorError> = {
  invalid_request: InvalidRequest,
  not_found: NotFound,
  method_not_allowed: MethodNotAllowed,
  vote_conflict: VoteConflict,
  fenced: Fenced,
  not_registered: NotRegistered,
  already_decided: AlreadyDecided,
  not_decided: NotDecided,
  votes_missing: VotesMissing,
  lower_checkpoint_open: LowerCheckpointOpen,
  too_many_checkpoints: TooManyCheckpoints,
  idempotency_conflict: IdempotencyConflict,
  job_busy: JobBusy,
  token_exists: TokenExists,
  unauthenticated: Unauthenticated,
  forbidden: Forbidden,
  gone: Gone,
  payload_too_large: PayloadTooLarge,
  unsupported_media_type: UnsupportedMediaType,
  misdirected_request: MisdirectedRequest,
  unavailable: Unavailable,
  internal: InternalError,
};

/** The error for an answer: the class of its code, or CoordinatorError for a code this
 * version does not know and for an answer without a problem document. */
export function errorFor(op: string, status: number, problem: Problem | undefined, body: string, retryAfter?: number): CoordinatorError {
  const cls = (problem?.code && classes[problem.code as ProblemCode]) || CoordinatorError;
  return new cls(op, status, problem, body, retryAfter);
}
