/**
 * Retry advice, read from the proto rather than kept here: each {@link Reason} value's
 * `(retry)` option and the enum's `(retry_by_code)` option in
 * proto/safewrite/v1/writer.proto, as the generated code carries them. A Reason added to
 * the proto brings its advice with it when the code is regenerated.
 */
import { getOption } from "@bufbuild/protobuf";
import { status as GrpcStatus } from "@grpc/grpc-js";

import { Reason, Retry } from "./enums.js";
import { Retry as RetryMessage, ReasonSchema, retry, retry_by_code } from "./gen/safewrite/v1/writer_pb.js";

/** What a caller may do after a failure: a {@link Retry} value other than UNSPECIFIED. */
export type RetryAdvice = Retry;

/** The `(retry)` option of a Reason value; BY_CODE when it has none. */
function optionOf(value: (typeof ReasonSchema.values)[number]): RetryAdvice {
  const advice = getOption(value, retry);
  // The numbers are the proto's (see enums.ts).
  return advice === RetryMessage.UNSPECIFIED ? Retry.BY_CODE : (advice as number as Retry);
}

/** The advice of every Reason the proto defines, from its `(retry)` option. */
export const REASON_ADVICE: Readonly<Record<Reason, RetryAdvice>> = Object.freeze(
  Object.fromEntries(ReasonSchema.values.map((value) => [value.number, optionOf(value)])) as Record<Reason, RetryAdvice>,
);

/** The `(retry_by_code)` option of the Reason enum. */
const BY_CODE = getOption(ReasonSchema, retry_by_code);

/** The advice for a reason; a reason newer than this client is judged by its code (BY_CODE). */
export function retryAdvice(reason: Reason): RetryAdvice {
  return REASON_ADVICE[reason] ?? Retry.BY_CODE;
}

/**
 * The advice of a gRPC code, for the reasons whose advice is BY_CODE: WITH_IDEMPOTENCY_KEY,
 * LATER or, for a code the `(retry_by_code)` option lists in neither, NEVER.
 */
export function codeAdvice(code: GrpcStatus): RetryAdvice {
  if (BY_CODE.withIdempotencyKey.includes(code)) {
    return Retry.WITH_IDEMPOTENCY_KEY;
  }
  return BY_CODE.later.includes(code) ? Retry.LATER : Retry.NEVER;
}

/** The name of a Reason as ErrorInfo spells it (without the REASON_ prefix), e.g. "CIRCUIT_OPEN". */
export function reasonName(reason: Reason): string {
  return Reason[reason] ?? `REASON_${reason}`;
}
