/**
 * The TypeScript client of safewrite, the sidecar that performs conflict-safe
 * read-modify-write of Kubernetes objects.
 */
export { Client, Leadership, type ClientOptions, type Leader, type LeaderWork, type TransactFn } from "./client.js";
export { ADDRESS_ENV, resolveAddress } from "./address.js";
export {
  Abort,
  abort,
  apply,
  cel,
  jsonPatch,
  mergePatch,
  Mutation,
  type MutationKind,
  type JsonPatchOp,
} from "./mutation.js";
export { refOf, type JsonObject, type ObjectRef, type Stored, type TypeMeta } from "./objects.js";
export {
  addFinalizer,
  removeConditions,
  removeFinalizer,
  removeListEntry,
  removeOwnerReference,
  setConditions,
  setControllerReference,
  setOwnerReference,
  upsertListEntry,
  type ConditionInput,
  type ConditionListOptions,
  type Owner,
  type OwnerReferenceOptions,
} from "./entries.js";
export type {
  CallOptions,
  DeleteOptions,
  Fence,
  GetOptions,
  LeadOptions,
  Preconditions,
  RetryPolicy,
  TransactOptions,
  Versioned,
  WriteOptions,
} from "./options.js";
export type { DeleteResult, GetResult, Result } from "./result.js";
export type { LeadEvent } from "./lead.js";
export { Transaction, type Fresh, type Proposal, type TransactionEvent } from "./transact.js";
export {
  CancelledError,
  ConflictError,
  DeadlineExceededError,
  decodeDetails,
  DOMAIN,
  errorClass,
  fromServiceError,
  InternalError,
  InvalidError,
  NotFoundError,
  OutcomeUnknownError,
  PermissionDeniedError,
  PreconditionFailedError,
  RequestTooLargeError,
  ResourceExhaustedError,
  SafewriteError,
  UnauthenticatedError,
  UnavailableError,
  UnimplementedError,
  type AttemptRecord,
  type ErrorDetails,
  type FieldViolation,
} from "./errors.js";
export { DeleteOutcome, LeadState, NotLeadingReason, Outcome, PropagationPolicy, Reason, Retry } from "./enums.js";
export { codeAdvice, REASON_ADVICE, reasonName, retryAdvice, type RetryAdvice } from "./reasons.js";
export { tracingAvailable } from "./tracing.js";
export { status as GrpcStatus } from "@grpc/grpc-js";
