/**
 * What a caller may do after a failure, per {@link Reason} of the proto. The table is
 * typed `Record<Reason, RetryAdvice>` over the generated enum, so a Reason added to the
 * proto and regenerated does not compile until it is classified here (and a test checks
 * every value of the enum's descriptor at run time too).
 */
import { Reason } from "./gen/safewrite/v1/writer_pb.js";

/**
 * - `"retry"`: the same call may succeed later (after `retryDelayMs` when given).
 * - `"retry-with-key"`: a write may have been applied; sending it again is safe only
 *   with the same idempotency key.
 * - `"by-code"`: the API server decided; the gRPC code says (UNAVAILABLE, conflicts
 *   that outlasted the retry policy and INTERNAL are retryable, the rest not).
 * - `"never"`: the same call fails the same way; change the request, the object or the
 *   sidecar's configuration.
 */
export type RetryAdvice = "retry" | "retry-with-key" | "by-code" | "never";

/** The advice for every Reason the proto defines. */
export const REASON_ADVICE: Readonly<Record<Reason, RetryAdvice>> = {
  [Reason.UNSPECIFIED]: "by-code",
  [Reason.INVALID_REQUEST]: "never",
  [Reason.UNKNOWN_KIND]: "never",
  [Reason.PRECONDITION_FAILED]: "never",
  [Reason.INVALID_CEL]: "never",
  [Reason.CEL_BUSY]: "retry",
  [Reason.DEADLINE_EXCEEDED]: "retry-with-key",
  [Reason.MUTATION_DOES_NOT_APPLY]: "never",
  [Reason.RESOURCE_VERSION_MISMATCH]: "never",
  [Reason.API_SERVER_UNREACHABLE]: "retry",
  [Reason.WRITE_OUTCOME_UNKNOWN]: "retry-with-key",
  [Reason.RETRY_BUDGET_EXHAUSTED]: "retry",
  [Reason.CIRCUIT_OPEN]: "retry",
  [Reason.RATE_LIMITED]: "retry",
  [Reason.TRANSACTION_CANCELLED]: "never",
  [Reason.TRANSACTION_IDLE]: "retry",
  [Reason.BAD_ANSWER]: "retry-with-key",
  [Reason.OVERLOADED]: "retry",
  [Reason.REQUEST_TOO_LARGE]: "never",
  [Reason.MALFORMED_REQUEST]: "never",
  [Reason.UNIMPLEMENTED]: "never",
  [Reason.REQUEST_NOT_READ]: "retry",
  [Reason.POLICY_DENIED]: "never",
  [Reason.TOKEN_REQUIRED]: "never",
  [Reason.TOKEN_INVALID]: "never",
  [Reason.FIELD_MANAGER_CONFLICT]: "never",
  [Reason.API_SERVER]: "by-code",
};

/** The advice for a reason; a reason newer than this client is judged by its code. */
export function retryAdvice(reason: Reason): RetryAdvice {
  return REASON_ADVICE[reason] ?? "by-code";
}

/** The name of a Reason as ErrorInfo spells it (without the REASON_ prefix), e.g. "CIRCUIT_OPEN". */
export function reasonName(reason: Reason): string {
  return Reason[reason] ?? `REASON_${reason}`;
}
