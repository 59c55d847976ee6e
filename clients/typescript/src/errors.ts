/**
 * The errors a call rejects with: one {@link SafewriteError} subclass per gRPC code,
 * carrying the rich details the sidecar sends in the `grpc-status-details-bin` trailer
 * (a google.rpc.Status with ErrorInfo, BadRequest, RetryInfo and safewrite.v1.WriteFailure).
 */
import { fromBinary } from "@bufbuild/protobuf";
import { anyIs, anyUnpack, durationMs } from "@bufbuild/protobuf/wkt";
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "./gen/google/rpc/status_pb.js";
import { Reason, Retry } from "./enums.js";
import { WriteFailureSchema, type AttemptRecord as AttemptRecordMessage } from "./gen/safewrite/v1/writer_pb.js";
import { parseObject, type Stored } from "./objects.js";
import { codeAdvice, reasonName, retryAdvice, type RetryAdvice } from "./reasons.js";

/** The ErrorInfo domain of every error the sidecar returns. */
export const DOMAIN = "safewrite.dev";

/** The trailer that carries the serialized google.rpc.Status. */
const DETAILS_KEY = "grpc-status-details-bin";

/** One attempt of the sidecar's loop. */
export interface AttemptRecord {
  /** The attempt's number, starting at 1. */
  number: number;
  /** The resourceVersion of the fresh object this attempt read. */
  resourceVersionRead: string;
  /** The HTTP status of the write (or of a refused read); 0 when nothing was sent or no answer came. */
  httpStatus: number;
  /** The Kubernetes Status reason of the answer (e.g. "Conflict"); empty on success. */
  reason: string;
  /** How long the sidecar slept after this attempt, in milliseconds. */
  backoffMs: number;
  /** How many requests the write carried (1 alone, more when committed together; 0 when none was sent). */
  batchSize: number;
}

/** A field at fault (google.rpc.BadRequest). */
export interface FieldViolation {
  /** The request field, e.g. "target.namespace", "mutation.cel.expression". */
  field: string;
  description: string;
}

/** Converts a safewrite.v1.AttemptRecord message. */
export function attemptRecord(record: AttemptRecordMessage): AttemptRecord {
  return {
    number: record.number,
    resourceVersionRead: record.resourceVersionRead,
    httpStatus: record.httpStatus,
    reason: record.reason,
    backoffMs: record.backoff === undefined ? 0 : durationMs(record.backoff),
    batchSize: record.batchSize,
  };
}

/** What the sidecar's details say about a failure. */
export interface ErrorDetails {
  /** The ErrorInfo reason: a Kubernetes Status reason ("Conflict", "Invalid", ...) or a safewrite one ("PRECONDITION_FAILED"). */
  reason?: string;
  /** The ErrorInfo domain, "safewrite.dev". */
  domain?: string;
  /** The ErrorInfo metadata, e.g. `attempts`, `http_status`. */
  errorMetadata?: Record<string, string>;
  /** WriteFailure.reason; UNSPECIFIED when the status carried no WriteFailure. */
  failureReason?: Reason;
  fieldViolations?: FieldViolation[];
  /** google.rpc.RetryInfo: how long to wait before trying again, in milliseconds. */
  retryDelayMs?: number;
  attemptRecords?: AttemptRecord[];
  /** For precondition failures, the object the check failed on (committed together with others: as it stood at this call's turn). */
  currentObject?: Stored;
  /** The W3C trace id of the sidecar's span for the call. */
  traceId?: string;
}

/** The base class of every error a safewrite call rejects with. */
export class SafewriteError extends Error {
  /** The gRPC status code (a value of grpc-js's `status`). */
  readonly code: GrpcStatus;
  /** The ErrorInfo reason, or undefined when the status had none (e.g. the sidecar was unreachable). */
  readonly reason: string | undefined;
  readonly domain: string | undefined;
  readonly errorMetadata: Readonly<Record<string, string>>;
  /** WriteFailure.reason; `Reason.UNSPECIFIED` when the status carried no WriteFailure. */
  readonly failureReason: Reason;
  readonly fieldViolations: readonly FieldViolation[];
  /** Milliseconds to wait before retrying (google.rpc.RetryInfo); undefined when a retry is not advised. */
  readonly retryDelayMs: number | undefined;
  readonly attemptRecords: readonly AttemptRecord[];
  /**
   * For FAILED_PRECONDITION: the object the check failed on, so the caller can decide without
   * another read: as read, or, when the call was committed together with others, as it stood at
   * this call's turn (after the changes of the calls before it).
   */
  readonly currentObject: Stored | undefined;
  /** The W3C trace id of the sidecar's span (32 hex digits); empty when unknown. */
  readonly traceId: string;
  /**
   * Whether the same call may be sent again whatever became of it: it carried an
   * idempotency key (then a write of unknown outcome may be sent again), or it is a
   * `get`, which writes nothing.
   */
  readonly idempotent: boolean;

  constructor(
    code: GrpcStatus,
    message: string,
    details: ErrorDetails = {},
    options: { cause?: unknown; idempotent?: boolean } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.reason = details.reason;
    this.domain = details.domain;
    this.errorMetadata = details.errorMetadata ?? {};
    this.failureReason = details.failureReason ?? Reason.UNSPECIFIED;
    this.fieldViolations = details.fieldViolations ?? [];
    this.retryDelayMs = details.retryDelayMs;
    this.attemptRecords = details.attemptRecords ?? [];
    this.currentObject = details.currentObject;
    this.traceId = details.traceId ?? "";
    this.idempotent = options.idempotent ?? false;
  }

  /** The gRPC code's name, e.g. "ABORTED". */
  get codeName(): string {
    return GrpcStatus[this.code] ?? String(this.code);
  }

  /** The name of {@link failureReason} as ErrorInfo spells it, e.g. "CIRCUIT_OPEN". */
  get failureReasonName(): string {
    return reasonName(this.failureReason);
  }

  /** The attempts made before the failure (0 when none reached the API server). */
  get attempts(): number {
    if (this.attemptRecords.length > 0) {
      return this.attemptRecords.length;
    }
    const counted = Number(this.errorMetadata["attempts"]);
    return Number.isInteger(counted) ? counted : 0;
  }

  /**
   * What the caller may do: the advice of {@link failureReason} (the proto's `(retry)`
   * option), and when that leaves it to the gRPC code, the code's (`(retry_by_code)`).
   * Never `Retry.BY_CODE`.
   */
  get advice(): RetryAdvice {
    const advice = retryAdvice(this.failureReason);
    return advice === Retry.BY_CODE ? codeAdvice(this.code) : advice;
  }

  /**
   * Whether sending the same call again (after {@link retryDelayMs}) may succeed and is
   * safe: {@link advice} LATER, or WITH_IDEMPOTENCY_KEY when the call carried an
   * idempotency key or was a `get` ({@link idempotent}).
   */
  get retryable(): boolean {
    switch (this.advice) {
      case Retry.LATER:
        return true;
      case Retry.WITH_IDEMPOTENCY_KEY:
        return this.idempotent;
      default:
        return false;
    }
  }

  override toString(): string {
    const head = this.reason ? `${this.codeName} (${this.reason})` : this.codeName;
    return `${this.name}: ${head}: ${this.message}`;
  }
}

/** ABORTED: conflicts outlasted the retry policy (or `requeue`), a strict resourceVersion precondition did not match (reason `RESOURCE_VERSION_MISMATCH`), or server-side apply met another manager's fields (`FieldManagerConflict`). */
export class ConflictError extends SafewriteError {}
/** INVALID_ARGUMENT: a malformed request or an object the API server refused (422); see `fieldViolations`. */
export class InvalidError extends SafewriteError {}
/**
 * FAILED_PRECONDITION: nothing was written; see `currentObject`. A precondition was false
 * or a JSON Patch `test` failed (reason `PRECONDITION_FAILED`), the mutation does not
 * apply (`MUTATION_DOES_NOT_APPLY`), a finalizer cannot be added to an object being
 * deleted (`OBJECT_DELETING`), another owner is already the object's controller
 * (`ALREADY_OWNED`), a write with a fence met a later leader's epoch (`FENCED`) or a
 * sidecar not leading under its epoch (`NOT_LEADER`), or the call needs an RPC, a field
 * or an enum value its sidecar does not know (`UNKNOWN_FIELD`: the client is newer than
 * the sidecar; refused before sending by this client, `errorMetadata.refused_by` is
 * "client", or by the sidecar; see docs/compatibility.md).
 */
export class PreconditionFailedError extends SafewriteError {}
/**
 * UNAVAILABLE: the API server or the sidecar is unreachable or throttling, the circuit
 * breaker is open, or a get's minimum resourceVersion is one the API server has not
 * reached yet (reason `RESOURCE_VERSION_TOO_LARGE`); retry after `retryDelayMs`.
 */
export class UnavailableError extends SafewriteError {}
/** RESOURCE_EXHAUSTED: the sidecar is shedding load or its rate limit would outlast the deadline; retry after `retryDelayMs`. */
export class ResourceExhaustedError extends SafewriteError {}
/** PERMISSION_DENIED: the sidecar's policy (reason `POLICY_DENIED`) or the API server (403) refused the write. */
export class PermissionDeniedError extends SafewriteError {}
/** UNAUTHENTICATED: the sidecar wants a token (`TOKEN_REQUIRED`, `TOKEN_INVALID`) or the API server refused its credentials (401). */
export class UnauthenticatedError extends SafewriteError {}
/** NOT_FOUND: the object does not exist (see `createIfMissing`), or its kind is unknown (reason `UNKNOWN_KIND`). */
export class NotFoundError extends SafewriteError {}
/**
 * DEADLINE_EXCEEDED: the call's deadline passed with no write in doubt (a deadline that cut
 * off a write's answer is an {@link OutcomeUnknownError} when the call carried no
 * idempotency key); `attemptRecords` holds the attempts so far.
 */
export class DeadlineExceededError extends SafewriteError {}
/** CANCELLED: the call was cancelled (its AbortSignal fired, or the transaction ended early). */
export class CancelledError extends SafewriteError {}
/**
 * UNKNOWN with reason `WRITE_OUTCOME_UNKNOWN`: a write was sent but its answer was lost (or the
 * call's deadline cut it off); it may have been applied. `retryable` is true only when the call carried an idempotency key (then the
 * same call with the same key applies the change at most once); without one, read the object
 * before deciding, or make such calls with an `idempotencyKey`.
 */
export class OutcomeUnknownError extends SafewriteError {}
/** INTERNAL or DATA_LOSS: e.g. a failing admission webhook, or an answer the sidecar could not read. */
export class InternalError extends SafewriteError {}
/** UNIMPLEMENTED: the sidecar does not serve this RPC. */
export class UnimplementedError extends SafewriteError {}
/** OUT_OF_RANGE: the request is larger than the sidecar accepts (reason `REQUEST_TOO_LARGE`). */
export class RequestTooLargeError extends SafewriteError {}

type ErrorClass = new (
  code: GrpcStatus,
  message: string,
  details?: ErrorDetails,
  options?: { cause?: unknown; idempotent?: boolean },
) => SafewriteError;

const BY_CODE: Partial<Record<GrpcStatus, ErrorClass>> = {
  [GrpcStatus.ABORTED]: ConflictError,
  [GrpcStatus.INVALID_ARGUMENT]: InvalidError,
  [GrpcStatus.FAILED_PRECONDITION]: PreconditionFailedError,
  [GrpcStatus.UNAVAILABLE]: UnavailableError,
  [GrpcStatus.RESOURCE_EXHAUSTED]: ResourceExhaustedError,
  [GrpcStatus.PERMISSION_DENIED]: PermissionDeniedError,
  [GrpcStatus.UNAUTHENTICATED]: UnauthenticatedError,
  [GrpcStatus.NOT_FOUND]: NotFoundError,
  [GrpcStatus.DEADLINE_EXCEEDED]: DeadlineExceededError,
  [GrpcStatus.CANCELLED]: CancelledError,
  [GrpcStatus.INTERNAL]: InternalError,
  [GrpcStatus.DATA_LOSS]: InternalError,
  [GrpcStatus.UNIMPLEMENTED]: UnimplementedError,
  [GrpcStatus.OUT_OF_RANGE]: RequestTooLargeError,
};

/** The class of the error for a code and, where it matters, the failure reason. */
export function errorClass(code: GrpcStatus, failureReason: Reason, reason?: string): ErrorClass {
  if (
    code === GrpcStatus.UNKNOWN &&
    (failureReason === Reason.WRITE_OUTCOME_UNKNOWN || reason === "WRITE_OUTCOME_UNKNOWN")
  ) {
    return OutcomeUnknownError;
  }
  return BY_CODE[code] ?? SafewriteError;
}

/** Decodes a serialized google.rpc.Status (the `grpc-status-details-bin` trailer). */
export function decodeDetails(bytes: Uint8Array): ErrorDetails & { message?: string } {
  const status = fromBinary(StatusSchema, bytes);
  const details: ErrorDetails & { message?: string } = {
    message: status.message,
    fieldViolations: [],
  };
  for (const any of status.details) {
    if (anyIs(any, ErrorInfoSchema)) {
      const info = anyUnpack(any, ErrorInfoSchema);
      if (info !== undefined) {
        details.reason = info.reason;
        details.domain = info.domain;
        details.errorMetadata = { ...info.metadata };
      }
    } else if (anyIs(any, BadRequestSchema)) {
      for (const v of anyUnpack(any, BadRequestSchema)?.fieldViolations ?? []) {
        details.fieldViolations!.push({ field: v.field, description: v.description });
      }
    } else if (anyIs(any, RetryInfoSchema)) {
      const delay = anyUnpack(any, RetryInfoSchema)?.retryDelay;
      if (delay !== undefined) {
        details.retryDelayMs = durationMs(delay);
      }
    } else if (anyIs(any, WriteFailureSchema)) {
      const failure = anyUnpack(any, WriteFailureSchema);
      if (failure !== undefined) {
        // The numbers are the proto's (see enums.ts).
        details.failureReason = failure.reason as number as Reason;
        details.attemptRecords = failure.attemptRecords.map(attemptRecord);
        details.traceId = failure.traceId;
        if (failure.currentObjectJson !== "") {
          try {
            details.currentObject = parseObject(failure.currentObjectJson);
          } catch {
            // Not JSON: leave it out rather than fail the decoding of the rest.
          }
        }
      }
    }
  }
  return details;
}

/** Builds the error for a code, message and the status's details. */
export function makeError(
  code: GrpcStatus,
  message: string,
  details: ErrorDetails,
  options: { cause?: unknown; idempotent?: boolean } = {},
): SafewriteError {
  const cls = errorClass(code, details.failureReason ?? Reason.UNSPECIFIED, details.reason);
  // The sidecar's advice names the proto's field; the caller sets this client's option.
  const own = message.replaceAll("options.create_if_missing_json", "the createIfMissing option");
  return new cls(code, own, details, options);
}

/** Converts an error of a grpc-js call, decoding the rich details of its trailers. */
export function fromServiceError(err: ServiceError, idempotent: boolean): SafewriteError {
  let details: ErrorDetails & { message?: string } = {};
  const raw = err.metadata instanceof Metadata ? err.metadata.get(DETAILS_KEY)[0] : undefined;
  if (raw !== undefined) {
    try {
      details = decodeDetails(typeof raw === "string" ? Buffer.from(raw, "base64") : raw);
    } catch {
      // A malformed trailer: keep the code and message.
    }
  }
  const message = err.details || details.message || err.message;
  return makeError(err.code ?? GrpcStatus.UNKNOWN, message, details, { cause: err, idempotent });
}
