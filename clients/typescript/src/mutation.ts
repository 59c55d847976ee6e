/**
 * Mutations (the change to make, re-applied by the sidecar to the fresh object on every
 * attempt) and the values a `transact` function may return: a new object, a mutation,
 * or an abort.
 */
import { create } from "@bufbuild/protobuf";

import { MutationSchema, type Mutation as MutationMessage } from "./gen/safewrite/v1/writer_pb.js";

/** A JSON object: a patch, an apply configuration, an object to create. */
export type JsonObject = { [key: string]: unknown };

/** The metadata of a Kubernetes object, with the fields a controller reads most. */
export interface ObjectMeta {
  name: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  [key: string]: unknown;
}

/**
 * A Kubernetes object as the sidecar returned it (parsed JSON): `metadata` is typed, the
 * rest (spec, status, data, ...) is the kind's own and `unknown` here. A call's type
 * parameter says what else you know of it: `client.update<{ data: { n: string } }>(...)`
 * resolves to an object of type `KubeObject & { data: { n: string } }`. Nothing checks
 * that at run time.
 */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  [key: string]: unknown;
}

/** One RFC 6902 JSON Patch operation. `test` operations are preconditions. */
export interface JsonPatchOp {
  op: "add" | "remove" | "replace" | "move" | "copy" | "test";
  path: string;
  value?: unknown;
  from?: string;
}

/**
 * A change for `update`, `patchStatus` or a `transact` proposal. Build one with
 * {@link cel}, {@link mergePatch}, {@link jsonPatch} or {@link apply}.
 */
export class Mutation {
  /** @internal */
  readonly message: MutationMessage;

  /** @internal Use cel(), mergePatch(), jsonPatch() or apply(). */
  constructor(message: MutationMessage) {
    this.message = message;
  }

  /** Which kind of mutation this is: "cel", "mergePatch", "jsonPatch" or "apply". */
  get kind(): "cel" | "mergePatch" | "jsonPatch" | "apply" {
    switch (this.message.kind.case) {
      case "cel":
        return "cel";
      case "mergePatch":
        return "mergePatch";
      case "jsonPatch":
        return "jsonPatch";
      case "apply":
        return "apply";
      case undefined:
        throw new TypeError("empty mutation");
    }
  }
}

/** JSON text as it is, or any value turned into JSON text. */
function jsonText(value: unknown, what: string): string {
  if (typeof value === "string") {
    return value;
  }
  const text = JSON.stringify(value);
  if (text === undefined) {
    throw new TypeError(`${what} must be JSON text or a value that serializes to JSON`);
  }
  return text;
}

/**
 * A CEL expression over `object` (the fresh object) returning a map that is merged into
 * it as a JSON merge patch, e.g. `{"data": {"n": string(int(object.data.n) + 1)}}`.
 */
export function cel(expression: string): Mutation {
  return new Mutation(create(MutationSchema, { kind: { case: "cel", value: { expression } } }));
}

/** An RFC 7386 JSON merge patch: an object, or its JSON text. */
export function mergePatch(patch: JsonObject | string): Mutation {
  return new Mutation(
    create(MutationSchema, {
      kind: { case: "mergePatch", value: { patchJson: jsonText(patch, "mergePatch") } },
    }),
  );
}

/**
 * An RFC 6902 JSON Patch: a list of operations, or its JSON text. Its `test` operations
 * are preconditions: when one fails nothing is written and the call fails with
 * {@link PreconditionFailedError}.
 */
export function jsonPatch(ops: readonly JsonPatchOp[] | string): Mutation {
  return new Mutation(
    create(MutationSchema, {
      kind: { case: "jsonPatch", value: { patchJson: jsonText(ops, "jsonPatch") } },
    }),
  );
}

/**
 * A server-side apply configuration (apiVersion, kind, metadata.name and the fields this
 * manager owns). A conflict with another field manager fails with {@link ConflictError}
 * (reason `FieldManagerConflict`) unless `force` is set. Needs a field manager.
 */
export function apply(configuration: JsonObject | string, options: { force?: boolean } = {}): Mutation {
  return new Mutation(
    create(MutationSchema, {
      kind: {
        case: "apply",
        value: {
          configurationJson: jsonText(configuration, "apply"),
          force: options.force ?? false,
        },
      },
    }),
  );
}

/**
 * Returned (or thrown) by a `transact` function to end the transaction without
 * writing; the result's outcome is then `Outcome.ABORTED`.
 */
export class Abort {
  /** Why the caller aborted, recorded by the sidecar in the result and the trace. */
  readonly reason: string;

  constructor(reason = "") {
    this.reason = reason;
  }
}

/** An {@link Abort} with a reason: `return abort("already done")`. */
export function abort(reason = ""): Abort {
  return new Abort(reason);
}

/** The mutation as a message, for the request. */
export function mutationMessage(mutation: Mutation): MutationMessage {
  if (!(mutation instanceof Mutation)) {
    throw new TypeError("mutation must be built with cel(), mergePatch(), jsonPatch() or apply()");
  }
  return mutation.message;
}
