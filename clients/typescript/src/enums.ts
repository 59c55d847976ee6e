/**
 * The enums of this client's API: what a call did ({@link Outcome}, {@link DeleteOutcome}),
 * why it failed ({@link Reason}) and what the caller may do then ({@link Retry}), a
 * campaign's state ({@link LeadState}, {@link NotLeadingReason}), and a delete's
 * {@link PropagationPolicy}.
 *
 * Each is the proto's enum of the same name (safewrite/v1/writer.proto), its values
 * named as the proto's without their prefix (`REASON_NOT_LEADER` is `Reason.NOT_LEADER`)
 * and numbered as the proto numbers them, so a value the sidecar sends is this client's
 * value as it is. test/enums.test.ts fails when the proto has a value these lack, or
 * the other way round. A value newer than this client comes through as its number.
 */

/** What a successful write did. */
export enum Outcome {
  /** Never sent. */
  UNSPECIFIED = 0,
  /** The object was changed and written. */
  UPDATED = 1,
  /** The mutation left the object as it was: nothing was written. */
  UNCHANGED = 2,
  /** The object did not exist and was created from `createIfMissing`. */
  CREATED = 3,
  /** A transact function aborted: nothing was written. */
  ABORTED = 4,
  /**
   * The object does not exist any more: a finalizer removal found it gone, or the write
   * removed the last finalizer of an object being deleted. See `Result.gone`.
   */
  GONE = 5,
}

/** What a successful delete did. */
export enum DeleteOutcome {
  /** Never sent. */
  UNSPECIFIED = 0,
  /** The API server deleted the object (with `dryRun`, would have). */
  DELETED = 1,
  /** The object is only marked for deletion: it has finalizers (see `DeleteResult.deletionTimestamp`). */
  DELETING = 2,
  /** The object was not there: nothing was deleted by this call. */
  GONE = 3,
}

/** What happens to a deleted object's dependents (the `propagationPolicy` of `delete`). */
export enum PropagationPolicy {
  /** The API server's default for the kind. */
  UNSPECIFIED = 0,
  /** The object is deleted at once; the garbage collector deletes its dependents after. */
  BACKGROUND = 1,
  /** The object is kept, being deleted, until its blocking dependents are deleted. */
  FOREGROUND = 2,
  /** The object is deleted; its dependents are kept, their owner references to it removed. */
  ORPHAN = 3,
}

/** Whether a campaign's caller leads (`LeadEvent.state`). */
export enum LeadState {
  /** Not used. */
  UNSPECIFIED = 0,
  /** The caller holds the Lease, under `LeadEvent.epoch`. */
  LEADING = 1,
  /** The caller does not hold the Lease; `LeadEvent.reason` says why. */
  NOT_LEADING = 2,
}

/** Why a campaign's caller does not lead (`LeadEvent.reason`). */
export enum NotLeadingReason {
  /** Not used (the caller leads). */
  UNSPECIFIED = 0,
  /** Another holder holds the Lease; `LeadEvent.holder` names it. */
  OTHER_HOLDER = 1,
  /** No renewal within the renew deadline: stop acting as the leader. The campaign goes on. */
  LOST_RENEWAL = 2,
  /** The sidecar released the Lease (it is shutting down); the campaign ends. */
  RELEASED = 3,
}

/**
 * Why a call failed (`SafewriteError.failureReason`), as the proto's Reason documents each
 * value; ErrorInfo spells it without the prefix (`reasonName`), e.g. "CIRCUIT_OPEN".
 */
export enum Reason {
  /** No safewrite details (e.g. the sidecar was not reached). */
  UNSPECIFIED = 0,
  INVALID_REQUEST = 1,
  UNKNOWN_KIND = 2,
  PRECONDITION_FAILED = 3,
  INVALID_CEL = 4,
  CEL_BUSY = 5,
  DEADLINE_EXCEEDED = 6,
  MUTATION_DOES_NOT_APPLY = 7,
  RESOURCE_VERSION_MISMATCH = 8,
  API_SERVER_UNREACHABLE = 9,
  WRITE_OUTCOME_UNKNOWN = 10,
  RETRY_BUDGET_EXHAUSTED = 11,
  CIRCUIT_OPEN = 12,
  RATE_LIMITED = 13,
  TRANSACTION_CANCELLED = 14,
  TRANSACTION_IDLE = 15,
  BAD_ANSWER = 16,
  OVERLOADED = 17,
  REQUEST_TOO_LARGE = 18,
  MALFORMED_REQUEST = 19,
  UNIMPLEMENTED = 20,
  REQUEST_NOT_READ = 21,
  POLICY_DENIED = 22,
  TOKEN_REQUIRED = 23,
  TOKEN_INVALID = 24,
  FIELD_MANAGER_CONFLICT = 25,
  /** The API server's answer decided the failure; `SafewriteError.reason` is its Status reason. */
  API_SERVER = 26,
  OBJECT_DELETING = 27,
  ALREADY_OWNED = 28,
  RESOURCE_VERSION_TOO_LARGE = 29,
  FENCED = 30,
  NOT_LEADER = 31,
  /**
   * The request carries a field, an enum value or an RPC the sidecar does not know (the
   * client is newer): refused before sending by this client, or by a sidecar of 0.2.0 or
   * newer. Nothing was sent.
   */
  UNKNOWN_FIELD = 32,
}

/**
 * What a caller may do after a failure (`SafewriteError.advice`, the proto's `Retry`).
 *
 * - `Retry.LATER`: the same call may succeed later (after `retryDelayMs` when given).
 * - `Retry.WITH_IDEMPOTENCY_KEY`: a write may have been applied; sending it again is
 *   safe only with the same idempotency key.
 * - `Retry.BY_CODE`: the gRPC code decides (see `codeAdvice`).
 * - `Retry.NEVER`: the same call fails the same way; change the request, the object or
 *   the sidecar's configuration.
 */
export enum Retry {
  /** Never set on a Reason. */
  UNSPECIFIED = 0,
  NEVER = 1,
  LATER = 2,
  WITH_IDEMPOTENCY_KEY = 3,
  BY_CODE = 4,
}
