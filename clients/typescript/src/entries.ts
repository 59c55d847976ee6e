/**
 * Mutations of one entry of a list that controllers share: status conditions
 * ({@link setConditions}, {@link removeConditions}), finalizers ({@link addFinalizer},
 * {@link removeFinalizer}), owner references ({@link setOwnerReference},
 * {@link setControllerReference}, {@link removeOwnerReference}) and entries of keyed
 * lists ({@link upsertListEntry}, {@link removeListEntry}). The sidecar applies each to
 * the fresh object on every attempt, so concurrent writers keep each other's entries,
 * and a change that is already there writes nothing (`Outcome.UNCHANGED`).
 *
 * They take @kubernetes/client-node's types (`V1Condition`, `V1OwnerReference`,
 * `KubernetesObject`), imported as types only: nothing of client-node is loaded at run
 * time. The builders refuse, with a TypeError, what the types forbid (a missing field, a
 * string where a Date belongs); the sidecar judges the values (a status other than
 * True/False/Unknown, a finalizer that is not a qualified name, ...) and refuses them
 * with an `InvalidError` naming the request's field, as it does for every client. One
 * value the call checks itself: an owner object's namespace against the target's.
 */
import { create } from "@bufbuild/protobuf";
import type { KubernetesObject, V1Condition, V1OwnerReference } from "@kubernetes/client-node";

import {
  ConditionSchema,
  MutationSchema,
  OwnerReferenceSchema,
  type Condition as ConditionMessage,
  type OwnerReference as OwnerReferenceMessage,
} from "./gen/safewrite/v1/writer_pb.js";
import { jsonText, makeMutation, type Mutation } from "./mutation.js";
import type { JsonObject } from "./objects.js";

/**
 * A condition to set: client-node's `V1Condition`, whose `lastTransitionTime`,
 * `message` and `observedGeneration` may be left out.
 *
 * - `lastTransitionTime` is used only when the condition is new or its status changes;
 *   absent, the sidecar takes the time of the write. It is sent in whole seconds, as
 *   `metav1.Time` keeps it.
 * - `observedGeneration` absent: the `metadata.generation` of the fresh object the
 *   change is applied to (read again on every attempt); none when the object has none.
 * - `message` absent: empty.
 */
export type ConditionInput = Pick<V1Condition, "type" | "status" | "reason"> &
  Partial<Pick<V1Condition, "message" | "lastTransitionTime" | "observedGeneration">>;

/**
 * An owner: a `V1OwnerReference` as it stands, or the owning object itself — any
 * client-node `KubernetesObject` (a safewrite result's object is one) with `apiVersion`,
 * `kind`, `metadata.name` and, best, `metadata.uid`. When the uid is empty or absent the
 * sidecar reads the owner (in the object's namespace, or cluster-scoped) to learn it.
 */
export type Owner = V1OwnerReference | KubernetesObject;

/** Where a conditions list is: field names joined by dots; absent means "status.conditions". */
export interface ConditionListOptions {
  path?: string;
}

/** The fields of the reference {@link setOwnerReference} makes; each overrides a `V1OwnerReference`'s own. */
export interface OwnerReferenceOptions {
  /** The owner is the object's managing controller (see {@link setControllerReference}). */
  controller?: boolean;
  /** The garbage collector keeps the owner until this object is gone (foreground deletion). */
  blockOwnerDeletion?: boolean;
}

/** A value as a TypeError names it. */
function shown(value: unknown): string {
  if (value === null || value === undefined) {
    return String(value);
  }
  if (value instanceof Date) {
    return "an invalid Date";
  }
  if (Array.isArray(value)) {
    return "a list";
  }
  return typeof value === "string" ? JSON.stringify(value) : `a ${typeof value}`;
}

/** `value` when it is a string; a TypeError naming `field` otherwise. */
function text(value: unknown, field: string): string {
  if (typeof value !== "string") {
    throw new TypeError(`${field} must be a string, not ${shown(value)}`);
  }
  return value;
}

/** `value` when it is a boolean or absent (then false); a TypeError otherwise. */
function flag(value: unknown, field: string): boolean {
  if (value === undefined) {
    return false;
  }
  if (typeof value !== "boolean") {
    throw new TypeError(`${field} must be a boolean, not ${shown(value)}`);
  }
  return value;
}

/** One string or a list of them, as a list. */
function texts(value: unknown, field: string): string[] {
  if (typeof value === "string") {
    return [value];
  }
  if (!Array.isArray(value)) {
    throw new TypeError(`${field} must be a string or a list of strings, not ${shown(value)}`);
  }
  return value.map((item, i) => text(item, `${field}[${i}]`));
}

/** A Date as RFC 3339 in UTC, in whole seconds (metav1.Time's precision), e.g. "2026-11-26T15:04:05Z". */
function rfc3339(value: unknown, field: string): string {
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    throw new TypeError(`${field} must be a valid Date, not ${shown(value)}`);
  }
  const iso = value.toISOString();
  if (!/^\d{4}-/.test(iso)) {
    throw new TypeError(`${field} is outside the years RFC 3339 can write (${iso})`);
  }
  return iso.replace(/\.\d+Z$/, "Z");
}

/** A condition as the message, checked for what its type says. */
function conditionMessage(condition: ConditionInput, field: string): ConditionMessage {
  if (condition === null || typeof condition !== "object") {
    throw new TypeError(`${field} must be a condition (type, status, reason, ...), not ${shown(condition)}`);
  }
  const { observedGeneration, lastTransitionTime, message } = condition;
  if (observedGeneration !== undefined && !Number.isSafeInteger(observedGeneration)) {
    throw new TypeError(`${field}.observedGeneration must be an integer, not ${String(observedGeneration)}`);
  }
  return create(ConditionSchema, {
    type: text(condition.type, `${field}.type`),
    status: text(condition.status, `${field}.status`),
    reason: text(condition.reason, `${field}.reason`),
    message: message === undefined ? "" : text(message, `${field}.message`),
    observedGeneration: observedGeneration === undefined ? undefined : BigInt(observedGeneration),
    lastTransitionTime:
      lastTransitionTime === undefined ? "" : rfc3339(lastTransitionTime, `${field}.lastTransitionTime`),
  });
}

/**
 * Sets status conditions as apimachinery's `meta.SetStatusCondition` does, on the fresh
 * object: the entry of the same `type` is updated in place (a new type is appended);
 * its `lastTransitionTime` changes only when its `status` changes; every other entry,
 * and every field this call does not name, is kept where it is. Setting a condition to
 * what it already is writes nothing (`Outcome.UNCHANGED`), so a controller may set its
 * conditions on every sync. Send it with `client.patchStatus` for a kind with a status
 * subresource (`client.update` refuses a `status.` path there), `client.update`
 * otherwise.
 *
 * @param conditions one condition or several (each type at most once); see
 *   {@link ConditionInput} for the fields that may be left out.
 * @param options.path where the list is when not "status.conditions", e.g. "status.gates".
 * @throws TypeError when a field is missing or of the wrong type.
 */
export function setConditions(
  conditions: ConditionInput | readonly ConditionInput[],
  options: ConditionListOptions = {},
): Mutation {
  const what = "setConditions";
  const list = Array.isArray(conditions) ? conditions : [conditions as ConditionInput];
  const messages = list.map((c, i) => conditionMessage(c, `${what}: conditions[${i}]`));
  return makeMutation(
    create(MutationSchema, {
      kind: { case: "setCondition", value: { conditions: messages, path: listPath(options, what) } },
    }),
  );
}

/**
 * Removes the conditions of the given types; the other entries keep their order.
 * Removing a type that is not there writes nothing.
 *
 * @param types one type or several, e.g. "Ready".
 * @param options.path as for {@link setConditions}.
 * @throws TypeError when a type is not a string.
 */
export function removeConditions(types: string | readonly string[], options: ConditionListOptions = {}): Mutation {
  const what = "removeConditions";
  return makeMutation(
    create(MutationSchema, {
      kind: { case: "removeCondition", value: { types: texts(types, `${what}: types`), path: listPath(options, what) } },
    }),
  );
}

function listPath(options: ConditionListOptions, what: string): string {
  return options.path === undefined ? "" : text(options.path, `${what}: path`);
}

/**
 * Adds one finalizer to `metadata.finalizers`, leaving the others as they are; adding
 * one that is there writes nothing. Adding it to an object being deleted (it has a
 * deletionTimestamp) fails with `PreconditionFailedError`, reason `OBJECT_DELETING`.
 *
 * @param name a qualified name, e.g. "example.com/cleanup".
 * @throws TypeError when `name` is not a string.
 */
export function addFinalizer(name: string): Mutation {
  return finalizerChange(name, false, "addFinalizer");
}

/**
 * Removes one finalizer from `metadata.finalizers`, leaving the others as they are;
 * removing one that is not there writes nothing. A removal that finds the object gone,
 * or that removes the last finalizer of an object being deleted (so the API server
 * deletes it), resolves with `result.gone` (`Outcome.GONE`): skip the status write that
 * would follow.
 *
 * @throws TypeError when `name` is not a string.
 */
export function removeFinalizer(name: string): Mutation {
  return finalizerChange(name, true, "removeFinalizer");
}

function finalizerChange(name: string, remove: boolean, what: string): Mutation {
  return makeMutation(
    create(MutationSchema, { kind: { case: "finalizer", value: { finalizer: text(name, `${what}: name`), remove } } }),
  );
}

/** A reference to the owner, and the owner's namespace when it is an object that has one. */
function ownerMessage(
  owner: Owner,
  options: OwnerReferenceOptions,
  what: string,
): { reference: OwnerReferenceMessage; namespace: string | undefined } {
  if (owner === null || typeof owner !== "object") {
    throw new TypeError(`${what}: the owner must be a V1OwnerReference or a Kubernetes object, not ${shown(owner)}`);
  }
  let fields: { apiVersion: string; kind: string; name: string; uid: string; controller: boolean; blockOwnerDeletion: boolean };
  let namespace: string | undefined;
  if ("metadata" in owner) {
    const object = owner as KubernetesObject;
    if (typeof object.apiVersion !== "string" || typeof object.kind !== "string") {
      throw new TypeError(
        `${what}: the owner object has no apiVersion or kind (objects in a client-node list carry neither): set them, or give a V1OwnerReference`,
      );
    }
    const uid = object.metadata?.uid;
    namespace = object.metadata?.namespace;
    fields = {
      apiVersion: object.apiVersion,
      kind: object.kind,
      name: text(object.metadata?.name, `${what}: owner.metadata.name`),
      uid: uid === undefined ? "" : text(uid, `${what}: owner.metadata.uid`),
      controller: false,
      blockOwnerDeletion: false,
    };
  } else {
    const ref = owner as Partial<V1OwnerReference>;
    fields = {
      apiVersion: text(ref.apiVersion, `${what}: owner.apiVersion`),
      kind: text(ref.kind, `${what}: owner.kind`),
      name: text(ref.name, `${what}: owner.name`),
      uid: ref.uid === undefined ? "" : text(ref.uid, `${what}: owner.uid`),
      controller: flag(ref.controller, `${what}: owner.controller`),
      blockOwnerDeletion: flag(ref.blockOwnerDeletion, `${what}: owner.blockOwnerDeletion`),
    };
  }
  if (options.controller !== undefined) {
    fields.controller = flag(options.controller, `${what}: controller`);
  }
  if (options.blockOwnerDeletion !== undefined) {
    fields.blockOwnerDeletion = flag(options.blockOwnerDeletion, `${what}: blockOwnerDeletion`);
  }
  return { reference: create(OwnerReferenceSchema, fields), namespace };
}

function ownerChange(owner: Owner, options: OwnerReferenceOptions, remove: boolean, what: string): Mutation {
  const { reference, namespace } = ownerMessage(owner, options, what);
  const message = create(MutationSchema, { kind: { case: "ownerReference", value: { owner: reference, remove } } });
  // A namespaced owner can own only objects of its namespace: the call checks it.
  return makeMutation(message, remove ? undefined : namespace);
}

/**
 * Ensures an owner reference to `owner` in `metadata.ownerReferences`, as
 * controller-runtime's `SetOwnerReference` does. References are matched by API group,
 * kind and name, as controllerutil matches them (not by uid or version): an identical
 * one writes nothing, one of the same owner takes this reference's apiVersion, uid and
 * flags in place (so an owner deleted and recreated under its name adopts the object),
 * and otherwise the reference is appended; every other reference is kept. A `V1OwnerReference` is
 * written as given; for an owner object, `controller` and `blockOwnerDeletion` are unset
 * unless `options` sets them.
 *
 * An owner object in a namespace other than the target's (or a namespaced owner of a
 * cluster-scoped target) is refused by the call with `InvalidError` before anything is
 * sent: the garbage collector would take the owner for absent and delete the object.
 *
 * @param owner a `V1OwnerReference`, or the owning object (see {@link Owner}).
 * @throws TypeError when the owner lacks apiVersion, kind or name, or a field is of the wrong type.
 */
export function setOwnerReference(owner: Owner, options: OwnerReferenceOptions = {}): Mutation {
  return ownerChange(owner, options, false, "setOwnerReference");
}

/**
 * Makes `owner` the object's managing controller, as controller-runtime's
 * `SetControllerReference` does: {@link setOwnerReference} with `controller: true` and
 * `blockOwnerDeletion: true` unless the option (or a `V1OwnerReference`'s own field)
 * says otherwise. When another owner is the object's controller the call fails with
 * `PreconditionFailedError`, reason `ALREADY_OWNED` (nothing is written; `currentObject`
 * shows that controller); not retryable.
 *
 * @throws TypeError as {@link setOwnerReference}.
 */
export function setControllerReference(owner: Owner, options: { blockOwnerDeletion?: boolean } = {}): Mutation {
  const own =
    owner !== null && typeof owner === "object" && !("metadata" in owner)
      ? (owner as Partial<V1OwnerReference>).blockOwnerDeletion
      : undefined;
  const blockOwnerDeletion = options.blockOwnerDeletion ?? own ?? true;
  return ownerChange(owner, { controller: true, blockOwnerDeletion }, false, "setControllerReference");
}

/**
 * Removes the owner reference to `owner`, as controller-runtime's `RemoveOwnerReference`
 * does: the first reference with the owner's API group, kind and name (its uid and
 * version are not compared); every other reference is kept. Removing one that is not there writes
 * nothing, and removing the last one removes the list.
 *
 * @throws TypeError as {@link setOwnerReference}.
 */
export function removeOwnerReference(owner: Owner): Mutation {
  return ownerChange(owner, {}, true, "removeOwnerReference");
}

/**
 * Upserts one entry of a list of objects keyed by some of their fields (a list that is,
 * or should have been, `x-kubernetes-list-type: map`, such as a route's
 * `status.parents`): the entry whose key fields all equal `entry`'s takes `entry` as an
 * RFC 7386 merge patch (a null removes a field); with none, `entry` is appended. Every
 * other entry, and the order of all, is kept; an upsert that changes nothing writes
 * nothing. The list (and the objects on the way to it) is created when missing.
 *
 * @param path where the list is, as field names joined by dots, e.g. "status.parents".
 * @param keys the key fields' names, e.g. "controllerName" or ["name", "port"].
 * @param entry the entry, carrying every key field: an object or its JSON text.
 * @throws TypeError when a key is not a string or `entry` is not an object or JSON text.
 */
export function upsertListEntry(path: string, keys: string | readonly string[], entry: JsonObject | string): Mutation {
  return listEntryChange(path, keys, entry, false, "upsertListEntry");
}

/**
 * Removes the entry of the list at `path` whose key fields equal `entry`'s (only they
 * are read: the entry given to {@link upsertListEntry} will do). Every other entry keeps
 * its place; removing one that is not there writes nothing.
 *
 * @throws TypeError as {@link upsertListEntry}.
 */
export function removeListEntry(path: string, keys: string | readonly string[], entry: JsonObject | string): Mutation {
  return listEntryChange(path, keys, entry, true, "removeListEntry");
}

function listEntryChange(
  path: string,
  keys: string | readonly string[],
  entry: JsonObject | string,
  remove: boolean,
  what: string,
): Mutation {
  if (entry === null || (typeof entry !== "string" && (typeof entry !== "object" || Array.isArray(entry)))) {
    throw new TypeError(`${what}: entry must be an object or its JSON text, not ${shown(entry)}`);
  }
  return makeMutation(
    create(MutationSchema, {
      kind: {
        case: "listEntry",
        value: {
          path: text(path, `${what}: path`),
          keys: texts(keys, `${what}: keys`),
          entryJson: jsonText(entry, `${what}: entry`),
          remove,
        },
      },
    }),
  );
}
