/**
 * What a successful call returns: a write's {@link Result}, a get's {@link GetResult}, a
 * delete's {@link DeleteResult}.
 */
import type { KubernetesObject } from "@kubernetes/client-node";

import { DeleteOutcome, Outcome } from "./enums.js";
import type { DeleteResponse, GetResponse, WriteResult } from "./gen/safewrite/v1/writer_pb.js";
import { attemptRecord, type AttemptRecord } from "./errors.js";
import { parseObject, type Stored } from "./objects.js";

/**
 * A finished write; `T` is the object's type as the call's type parameter says it
 * (client-node's `V1ConfigMap`, your own `KubernetesObject & { spec: ... }`).
 */
export interface Result<T extends KubernetesObject = KubernetesObject> {
  /**
   * UPDATED, UNCHANGED (nothing was written), CREATED, ABORTED (a transact function
   * aborted), or GONE (the object does not exist any more; see {@link gone}).
   */
  outcome: Outcome;
  /** The outcome's name, e.g. "UPDATED" (the enum value itself prints as a number). */
  outcomeName: string;
  /**
   * The object as this call left it: as written by the write that carried its change
   * (or as read, when unchanged, aborted or already applied). When the call was
   * committed together with others (`batchSize` above 1), the object right after this
   * call's own change, in the batch's order, without the changes of the calls after
   * it; an unchanged or already applied call gets the object as it stood at its turn.
   * In client-node's shape: date-times as `Date`s (see `Stored`); nothing checks `T` at
   * run time.
   */
  object: Stored<T>;
  /** The resourceVersion of `object`: of the write that carried it, or of the read when it is the object as read. */
  resourceVersion: string;
  /** The attempts made, the last included. */
  attempts: number;
  attemptRecords: AttemptRecord[];
  /** The W3C trace id of the sidecar's span (your trace's id when one was propagated); empty when its tracing is off. */
  traceId: string;
  /** The call's idempotency key was already on the object: nothing was written this time. */
  alreadyApplied: boolean;
  /**
   * The object does not exist any more (`Outcome.GONE`): a finalizer removal found it
   * gone (nothing was written, and `object` is `{}`), or the write removed the last
   * finalizer of an object being deleted, so the API server deleted it (`object` is the
   * object as last written). Skip any status write that would follow.
   */
  gone: boolean;
}

/** Converts a safewrite.v1.WriteResult message. */
export function toResult<T extends KubernetesObject = KubernetesObject>(result: WriteResult | undefined): Result<T> {
  if (result === undefined) {
    throw new Error("the sidecar answered without a result");
  }
  // The numbers are the proto's (see enums.ts).
  const outcome = result.outcome as number as Outcome;
  return {
    outcome,
    outcomeName: Outcome[outcome] ?? String(outcome),
    object: parseObject<T>(result.objectJson),
    resourceVersion: result.resourceVersion,
    attempts: result.attempts,
    attemptRecords: result.attemptRecords.map(attemptRecord),
    traceId: result.traceId,
    alreadyApplied: result.alreadyApplied,
    gone: outcome === Outcome.GONE,
  };
}

/** An object read by `get`; `T` is its type, as for {@link Result}. */
export interface GetResult<T extends KubernetesObject = KubernetesObject> {
  /** The object, at least as new as the call's `atLeast` (or `minResourceVersion`), in client-node's shape. */
  object: Stored<T>;
  /** The resourceVersion of `object`; pass this result as a later call's `atLeast`. */
  resourceVersion: string;
  /**
   * The sidecar answered from its remembered copy (the object as it last read or wrote
   * it, at or past the minimum), without a request to the API server; false for a live read.
   */
  remembered: boolean;
  /** The W3C trace id of the sidecar's span (your trace's id when one was propagated); empty when its tracing is off. */
  traceId: string;
}

/** Converts a safewrite.v1.GetResponse message. */
export function toGetResult<T extends KubernetesObject = KubernetesObject>(response: GetResponse): GetResult<T> {
  if (response.objectJson === "") {
    throw new Error("the sidecar answered a get without an object");
  }
  return {
    object: parseObject<T>(response.objectJson),
    resourceVersion: response.resourceVersion,
    remembered: response.remembered,
    traceId: response.traceId,
  };
}

/** A finished delete; `T` is the object's type, as for {@link Result}. */
export interface DeleteResult<T extends KubernetesObject = KubernetesObject> {
  /**
   * DELETED (the API server deleted it; with `dryRun`, would have), DELETING (it is only
   * marked for deletion: it has finalizers, or foreground or orphan propagation added
   * one; see {@link deletionTimestamp}), or GONE (it was not there: nothing was deleted by
   * this call, which is an answer, not an error).
   */
  outcome: DeleteOutcome;
  /** The outcome's name, e.g. "DELETED". */
  outcomeName: string;
  /**
   * The object as the API server answered the DELETE, in client-node's shape; undefined
   * when it answered a Status instead, and for GONE.
   */
  object: Stored<T> | undefined;
  /** The object's `metadata.deletionTimestamp`, for DELETING; undefined when it has none. */
  deletionTimestamp: Date | undefined;
  /** The attempts made, the last included. */
  attempts: number;
  /** Per attempt: `httpStatus` is the DELETE's, or the read's when the read was refused or found nothing. */
  attemptRecords: AttemptRecord[];
  /** The W3C trace id of the sidecar's span; empty when its tracing is off. */
  traceId: string;
  /** The object was not there (`DeleteOutcome.GONE`). */
  gone: boolean;
}

/** Converts a safewrite.v1.DeleteResponse message. */
export function toDeleteResult<T extends KubernetesObject = KubernetesObject>(response: DeleteResponse): DeleteResult<T> {
  const deletionTimestamp = response.deletionTimestamp === "" ? undefined : new Date(response.deletionTimestamp);
  const outcome = response.outcome as number as DeleteOutcome;
  return {
    outcome,
    outcomeName: DeleteOutcome[outcome] ?? String(outcome),
    object: response.objectJson === "" ? undefined : parseObject<T>(response.objectJson),
    deletionTimestamp:
      deletionTimestamp === undefined || Number.isNaN(deletionTimestamp.getTime()) ? undefined : deletionTimestamp,
    attempts: response.attempts,
    attemptRecords: response.attemptRecords.map(attemptRecord),
    traceId: response.traceId,
    gone: outcome === DeleteOutcome.GONE,
  };
}
