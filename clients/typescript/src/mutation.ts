/**
 * Mutations (the change to make, re-applied by the sidecar to the fresh object on every
 * attempt) and the values a `transact` function may return: a new object, a mutation,
 * or an abort.
 */
import { create } from "@bufbuild/protobuf";
import { status as GrpcStatus } from "@grpc/grpc-js";

import { Reason } from "./enums.js";
import { DOMAIN, InvalidError } from "./errors.js";
import { MutationSchema, type Mutation as MutationMessage } from "./gen/safewrite/v1/writer_pb.js";
import { toJson, type JsonObject } from "./objects.js";
import { reasonName } from "./reasons.js";

/** One RFC 6902 JSON Patch operation. `test` operations are preconditions. */
export interface JsonPatchOp {
  op: "add" | "remove" | "replace" | "move" | "copy" | "test";
  path: string;
  value?: unknown;
  from?: string;
}

/** The kinds of {@link Mutation}: the fields of the proto's `Mutation.kind`, in camelCase. */
export type MutationKind =
  | "cel"
  | "mergePatch"
  | "jsonPatch"
  | "apply"
  | "setCondition"
  | "removeCondition"
  | "finalizer"
  | "ownerReference"
  | "listEntry";

/**
 * What a {@link Mutation} is made of: the request's mutation message, and the namespace of
 * an owner object it references when it sets an owner reference ("" when cluster-scoped).
 */
type MutationParts = [message: MutationMessage, ownerNamespace?: string];

// Set by the class's static block (declared first: it runs as the class is defined).
let make: (...parts: MutationParts) => Mutation;
let partsOf: (mutation: Mutation) => MutationParts;

/**
 * A change for `update`, `patchStatus` or a `transact` proposal. Build one with
 * {@link cel}, {@link mergePatch}, {@link jsonPatch} or {@link apply}, or, for one entry
 * of a list, with `setConditions`, `removeConditions`, `addFinalizer`, `removeFinalizer`,
 * `setOwnerReference`, `setControllerReference`, `removeOwnerReference`,
 * `upsertListEntry` or `removeListEntry`.
 */
export class Mutation {
  readonly #parts: MutationParts;

  /** Use the builders: cel(), mergePatch(), setConditions(), ... */
  private constructor(...parts: MutationParts) {
    this.#parts = parts;
  }

  static {
    // The builders of this module and of entries.ts make mutations; nothing else can.
    make = (...parts) => new Mutation(...parts);
    partsOf = (mutation) => mutation.#parts;
  }

  /** Which kind of mutation this is: "cel", "mergePatch", ..., "setCondition", "finalizer", ... */
  get kind(): MutationKind {
    const kind = this.#parts[0].kind.case;
    if (kind === undefined) {
      throw new TypeError("empty mutation");
    }
    return kind;
  }
}

/** @internal A mutation of its parts (see {@link MutationParts}). */
export function makeMutation(...parts: MutationParts): Mutation {
  return make(...parts);
}

/** @internal The message of a mutation, as it is (for tests: {@link mutationMessage} checks it first). */
export function messageOf(mutation: Mutation): MutationMessage {
  return partsOf(mutation)[0];
}

/** @internal JSON text as it is, or any value turned into JSON text (Dates as RFC 3339). */
export function jsonText(value: unknown, what: string): string {
  if (typeof value === "string") {
    return value;
  }
  const text = toJson(value);
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
  return makeMutation(create(MutationSchema, { kind: { case: "cel", value: { expression } } }));
}

/** An RFC 7386 JSON merge patch: an object, or its JSON text. */
export function mergePatch(patch: JsonObject | string): Mutation {
  return makeMutation(
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
  return makeMutation(
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
  return makeMutation(
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

/**
 * The mutation as a message, for a request to an object in `namespace` ("" for a
 * cluster-scoped one).
 *
 * @throws TypeError when `mutation` was not built by this client's builders.
 * @throws InvalidError when it makes a namespaced owner own an object of another
 *   namespace, which the garbage collector would delete as orphaned.
 */
export function mutationMessage(mutation: Mutation, namespace: string): MutationMessage {
  if (!(mutation instanceof Mutation)) {
    throw new TypeError("mutation must be built with cel(), mergePatch(), jsonPatch(), apply(), setConditions(), addFinalizer(), ...");
  }
  const [message, owner] = partsOf(mutation);
  if (owner !== undefined && owner !== "" && owner !== namespace) {
    const description =
      `the owner is in namespace "${owner}" and the object ${namespace === "" ? "is cluster-scoped" : `in "${namespace}"`}: ` +
      "an owner must be in the object's namespace, or cluster-scoped";
    throw new InvalidError(GrpcStatus.INVALID_ARGUMENT, description, {
      reason: reasonName(Reason.INVALID_REQUEST),
      domain: DOMAIN,
      failureReason: Reason.INVALID_REQUEST,
      fieldViolations: [{ field: "mutation.owner_reference.owner", description }],
    });
  }
  return message;
}
