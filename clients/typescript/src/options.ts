/**
 * What a call takes besides its target and mutation: preconditions, retry policy, write
 * options, deadline and cancellation, a delete's and a campaign's options, and their
 * conversion into the request messages.
 */
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";

import {
  DeleteRequestSchema,
  FenceSchema,
  GetRequestSchema,
  LeadRequestSchema,
  ObjectRefSchema,
  PreconditionsSchema,
  PropagationPolicy as PropagationPolicyMessage,
  RetryPolicySchema,
  WriteOptionsSchema,
  type DeleteRequest,
  type Fence as FenceMessage,
  type GetRequest,
  type LeadRequest,
  type ObjectRef as ObjectRefMessage,
  type Preconditions as PreconditionsMessage,
  type RetryPolicy as RetryPolicyMessage,
  type WriteOptions as WriteOptionsMessage,
} from "./gen/safewrite/v1/writer_pb.js";
import { PropagationPolicy } from "./enums.js";
import type { JsonObject, ObjectRef } from "./objects.js";

/**
 * Checked by the sidecar on the fresh object before every write. When one is false
 * nothing is written and the call fails with {@link PreconditionFailedError} (or
 * {@link ConflictError} with reason `RESOURCE_VERSION_MISMATCH` for `resourceVersion`).
 */
export interface Preconditions {
  /** metadata.uid must equal this. */
  uid?: string;
  /** Strict compare-and-swap: metadata.resourceVersion must equal this; not retried. */
  resourceVersion?: string;
  /** A CEL expression over `object` that must return true. */
  cel?: string;
}

/**
 * The leadership a write is made under: a write with a fence is one a deposed leader
 * cannot make. The sidecar refuses it with {@link PreconditionFailedError}, reason
 * `NOT_LEADER`, unless it leads under this Lease and epoch, and reason `FENCED` when the
 * object records a later epoch of the Lease (a later leader wrote it); nothing is
 * written, and neither is ever retried.
 */
export interface Fence {
  /** The Lease's namespace. */
  leaseNamespace: string;
  /** The Lease's name. */
  leaseName: string;
  /** The caller's epoch of that Lease, as the Lead RPC answered it (`LeadResponse.epoch`); not 0. */
  epoch: bigint | number;
}

/** Bounds the sidecar's retry loop; unset fields take the sidecar's defaults. */
export interface RetryPolicy {
  /** The most attempts, the first included. */
  maxAttempts?: number;
  /** The backoff before the second attempt, in milliseconds. */
  initialBackoffMs?: number;
  /** The cap on any single backoff, in milliseconds. */
  maxBackoffMs?: number;
  /** One attempt only: a conflict fails at once with {@link ConflictError}. */
  requeue?: boolean;
}

/** Deadline and cancellation of one call. */
export interface CallOptions {
  /**
   * The call's time budget in milliseconds; it travels to the sidecar as the gRPC
   * deadline, and the sidecar never sleeps past it. Defaults to the client's
   * `timeoutMs`.
   */
  timeoutMs?: number;
  /** An absolute deadline (a Date or milliseconds since the epoch); the sooner of this and `timeoutMs` wins. */
  deadline?: Date | number;
  /** Cancels the call: it fails with {@link CancelledError}, and a transaction writes nothing more. */
  signal?: AbortSignal;
  /** Extra gRPC metadata to send. */
  metadata?: Record<string, string>;
}

/** The options of `update`, `patchStatus` and `transact`. */
export interface WriteOptions extends CallOptions {
  /**
   * Write the object's status subresource instead of its main resource (PatchStatus;
   * `patchStatus` sets it). Only the change's effect on `status` is written.
   */
  status?: boolean;
  preconditions?: Preconditions;
  retryPolicy?: RetryPolicy;
  /** The field manager recorded in managedFields; required for server-side apply. */
  fieldManager?: string;
  /** Ask the API server to admit the write without persisting it. */
  dryRun?: boolean;
  /**
   * The object to create (an object or its JSON text) when the target does not exist;
   * the mutation is applied to it first. apiVersion, kind, name and namespace come from
   * the target when absent. Not for the status subresource.
   */
  createIfMissing?: JsonObject | string;
  /**
   * Makes a read-dependent change exactly-once across lost answers: 1 to 128 characters
   * of [A-Za-z0-9._:-], one per intended change (e.g. `crypto.randomUUID()`). Not for
   * server-side apply nor the status subresource.
   */
  idempotencyKey?: string;
  /** Send this write on its own instead of committing it together with concurrent writes to the object. */
  writeAlone?: boolean;
  /** Makes the write one a deposed leader cannot make; see {@link Fence}. */
  fence?: Fence;
}

/** The options of `transact`: those of every write. */
export type TransactOptions = WriteOptions;

/**
 * The options of `delete`. The delete is always safe to send again (a DELETE already
 * applied finds the object gone or being deleted), so its errors count it as idempotent.
 */
export interface DeleteOptions extends CallOptions {
  /**
   * Checked on the object read live before every DELETE: `uid` (the object you mean, not
   * one recreated under its name), an exact `resourceVersion` (not retried), a `cel`
   * condition over `object`. When one is false nothing is deleted.
   */
  preconditions?: Preconditions;
  /** What happens to the object's dependents; unset: the API server's default for the kind (usually background). */
  propagationPolicy?: PropagationPolicy;
  /** Ask the API server to admit the delete without persisting it. */
  dryRun?: boolean;
  retryPolicy?: RetryPolicy;
  /**
   * Makes the delete one a deposed leader cannot make, as for a write (see {@link Fence});
   * a delete records nothing on the object.
   */
  fence?: Fence;
}

/**
 * What `lead` campaigns for: a coordination.k8s.io/v1 Lease, and the campaign's timings
 * (client-go's rule: lease duration > renew deadline > 1.2 x retry period). The sidecar
 * judges them: a value it refuses fails the campaign with {@link InvalidError}, its
 * `fieldViolations` naming the request's field (`name`, `lease_duration`, ...).
 *
 * A campaign has no deadline: neither the client's `timeoutMs` nor any other bounds it.
 * It lasts until `close()`, `signal`, or the sidecar's shutdown.
 */
export interface LeadOptions {
  /** The Lease's namespace: a DNS-1123 label. */
  namespace: string;
  /** The Lease's name: a DNS-1123 subdomain. */
  name: string;
  /**
   * The Lease's holder identity while this campaign leads, e.g. the pod's name: 1 to 253
   * printable ASCII characters, no spaces. Unset: the sidecar makes one unique to this
   * campaign. Two campaigns given the same identity never both lead: the second waits
   * the Lease out.
   */
  identity?: string;
  /** How long the Lease lasts after its last renewal, as others see it, in milliseconds: whole seconds, 1 s to 1 h. Unset: 15 s. */
  leaseDurationMs?: number;
  /** How long the leader leads without a successful renewal, in milliseconds. Unset: 10 s. */
  renewDeadlineMs?: number;
  /** How often the sidecar tries to acquire or renew the Lease, in milliseconds; at least 10. Unset: 2 s. */
  retryPeriodMs?: number;
  /** Ends the campaign as `close()` does (the Lease is released): not a failure. */
  signal?: AbortSignal;
  /** Extra gRPC metadata to send. */
  metadata?: Record<string, string>;
}

/** What names a resourceVersion: a write's {@link Result}, a get's {@link GetResult}. */
export interface Versioned {
  readonly resourceVersion: string;
}

/** The options of `get`. */
export interface GetOptions extends CallOptions {
  /**
   * Answer with the object at least as new as this: the result of your own write (or of
   * an earlier get), whose `resourceVersion` the answer is at or past. The sidecar
   * answers from its remembered copy when that copy is new enough, else reads live.
   */
  atLeast?: Versioned;
  /** The same as a resourceVersion string; give this or `atLeast`, not both. Empty: read live. */
  minResourceVersion?: string;
}

/**
 * The GetRequest of `get(ref, options)`.
 *
 * @throws TypeError when both `atLeast` and `minResourceVersion` are given, or either is
 *   not a string (nothing is sent).
 */
export function getRequest(ref: ObjectRef, options: GetOptions): GetRequest {
  const { atLeast, minResourceVersion } = options;
  if (atLeast !== undefined && minResourceVersion !== undefined) {
    throw new TypeError("get: give atLeast or minResourceVersion, not both");
  }
  const min = atLeast === undefined ? minResourceVersion : atLeast.resourceVersion;
  if (min !== undefined && typeof min !== "string") {
    const name = atLeast === undefined ? "minResourceVersion" : "atLeast.resourceVersion";
    throw new TypeError(`get: ${name} must be a string, not ${typeof min}`);
  }
  return create(GetRequestSchema, { target: targetMessage(ref), minResourceVersion: min ?? "" });
}

/** The parts of a request message built from the options. */
export interface RequestParts {
  target: ObjectRefMessage;
  preconditions?: PreconditionsMessage;
  retryPolicy?: RetryPolicyMessage;
  options?: WriteOptionsMessage;
}

/** The ObjectRef message of a target. */
function targetMessage(ref: ObjectRef): ObjectRefMessage {
  return create(ObjectRefSchema, {
    apiVersion: ref.apiVersion,
    kind: ref.kind,
    namespace: ref.namespace ?? "",
    name: ref.name,
  });
}

/** The Preconditions message of a call's preconditions. */
function preconditionsMessage(p: Preconditions): PreconditionsMessage {
  return create(PreconditionsSchema, { uid: p.uid ?? "", resourceVersion: p.resourceVersion ?? "", cel: p.cel ?? "" });
}

/** The RetryPolicy message of a call's retry policy. */
function retryPolicyMessage(r: RetryPolicy): RetryPolicyMessage {
  return create(RetryPolicySchema, {
    maxAttempts: r.maxAttempts ?? 0,
    requeue: r.requeue ?? false,
    ...(r.initialBackoffMs !== undefined && { initialBackoff: durationFromMs(r.initialBackoffMs) }),
    ...(r.maxBackoffMs !== undefined && { maxBackoff: durationFromMs(r.maxBackoffMs) }),
  });
}

/** The Fence message of a call's fence. */
function fenceMessage(fence: Fence): FenceMessage {
  return create(FenceSchema, {
    leaseNamespace: fence.leaseNamespace,
    leaseName: fence.leaseName,
    epoch: BigInt(fence.epoch),
  });
}

/** Builds the request fields shared by every write RPC. */
export function requestParts(ref: ObjectRef, options: WriteOptions): RequestParts {
  const parts: RequestParts = { target: targetMessage(ref) };
  if (options.preconditions !== undefined) {
    parts.preconditions = preconditionsMessage(options.preconditions);
  }
  if (options.retryPolicy !== undefined) {
    parts.retryPolicy = retryPolicyMessage(options.retryPolicy);
  }
  const { fieldManager, dryRun, createIfMissing, idempotencyKey, writeAlone, fence } = options;
  if (
    fieldManager !== undefined ||
    dryRun !== undefined ||
    createIfMissing !== undefined ||
    idempotencyKey !== undefined ||
    writeAlone !== undefined ||
    fence !== undefined
  ) {
    parts.options = create(WriteOptionsSchema, {
      fieldManager: fieldManager ?? "",
      dryRun: dryRun ?? false,
      createIfMissingJson:
        createIfMissing === undefined
          ? ""
          : typeof createIfMissing === "string"
            ? createIfMissing
            : JSON.stringify(createIfMissing),
      idempotencyKey: idempotencyKey ?? "",
      writeAlone: writeAlone ?? false,
      ...(fence !== undefined && { fence: fenceMessage(fence) }),
    });
  }
  return parts;
}

/** The DeleteRequest of `delete(ref, options)`. */
export function deleteRequest(ref: ObjectRef, options: DeleteOptions): DeleteRequest {
  const { preconditions, propagationPolicy, dryRun, retryPolicy, fence } = options;
  return create(DeleteRequestSchema, {
    target: targetMessage(ref),
    // The numbers are the proto's (see enums.ts).
    propagationPolicy: (propagationPolicy ?? PropagationPolicy.UNSPECIFIED) as number as PropagationPolicyMessage,
    dryRun: dryRun ?? false,
    ...(preconditions !== undefined && { preconditions: preconditionsMessage(preconditions) }),
    ...(retryPolicy !== undefined && { retryPolicy: retryPolicyMessage(retryPolicy) }),
    ...(fence !== undefined && { fence: fenceMessage(fence) }),
  });
}

/** The LeadRequest of `lead(options)`; the sidecar judges the values. */
export function leadRequest(options: LeadOptions): LeadRequest {
  const { namespace, name, identity, leaseDurationMs, renewDeadlineMs, retryPeriodMs } = options;
  return create(LeadRequestSchema, {
    namespace,
    name,
    identity: identity ?? "",
    ...(leaseDurationMs !== undefined && { leaseDuration: durationFromMs(leaseDurationMs) }),
    ...(renewDeadlineMs !== undefined && { renewDeadline: durationFromMs(renewDeadlineMs) }),
    ...(retryPeriodMs !== undefined && { retryPeriod: durationFromMs(retryPeriodMs) }),
  });
}

/**
 * The call's gRPC deadline: the sooner of `deadline` and now + `timeoutMs` (falling
 * back to the client's default timeout); undefined when there is none.
 */
export function callDeadline(options: CallOptions, defaultTimeoutMs: number | undefined): Date | undefined {
  const timeoutMs = options.timeoutMs ?? (options.deadline === undefined ? defaultTimeoutMs : undefined);
  const candidates: number[] = [];
  if (timeoutMs !== undefined) {
    candidates.push(Date.now() + timeoutMs);
  }
  if (options.deadline !== undefined) {
    candidates.push(options.deadline instanceof Date ? options.deadline.getTime() : options.deadline);
  }
  return candidates.length === 0 ? undefined : new Date(Math.min(...candidates));
}
