/**
 * Version skew (docs/compatibility.md): what a request needs of its sidecar, and the
 * client's refusal of a request its sidecar cannot serve.
 *
 * What was added after 0.1.0 carries, in the proto, the first version that has it: an
 * RPC its `(method_since)` option, a field its `(since)`, an enum value its
 * `(value_since)`. They are read here from the generated descriptors (no table is kept),
 * once, into the set of such features and the fields worth visiting to find them in a
 * request. A request that uses none of them (what 0.1.0 already had) needs nothing of
 * the sidecar and costs one lookup; one that does is checked against what the sidecar
 * says it knows (rpc Capabilities, asked once per client and kept; UNIMPLEMENTED is a
 * sidecar older than 0.2.0, which knows only what has no such option). When that cannot
 * be learned, the call fails closed ({@link unlearned}): nothing is sent.
 */
import { EventEmitter } from "node:events";

import { create, getOption, toBinary, type DescEnum, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { nestedTypes, reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { anyPack } from "@bufbuild/protobuf/wkt";
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "./gen/google/rpc/status_pb.js";
import {
  file_safewrite_v1_writer,
  method_since,
  Reason as ReasonMessage,
  since,
  value_since,
  WriteFailureSchema,
  WriterService,
  type CapabilitiesResponse,
} from "./gen/safewrite/v1/writer_pb.js";

/** Something a request may use that a sidecar may lack: an RPC, a field or an enum value. */
export interface Feature {
  kind: "rpc" | "field" | "enum value";
  /**
   * Its full name, as rpc Capabilities lists it: "safewrite.v1.WriterService/Lead",
   * "safewrite.v1.WriteOptions.fence",
   * "safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN".
   */
  name: string;
  /** The first version that has it. */
  since: string;
  /** What the refusal's ErrorInfo metadata says of it besides its name (as the sidecar's). */
  metadata: Record<string, string>;
}

/** What a sidecar knows: its Capabilities answer, or none (older than 0.2.0). */
export interface Known {
  /** Its version; undefined for a sidecar older than 0.2.0 (it answered UNIMPLEMENTED). */
  version: string | undefined;
  methods: ReadonlySet<string>;
  fields: ReadonlySet<string>;
  enumValues: ReadonlySet<string>;
}

/** A sidecar older than 0.2.0: it has no rpc Capabilities and knows nothing that has a since option. */
export const OLDER: Known = Object.freeze({
  version: undefined,
  methods: new Set<string>(),
  fields: new Set<string>(),
  enumValues: new Set<string>(),
});

/** What a Capabilities answer says the sidecar knows. */
export function known(answer: CapabilitiesResponse): Known {
  return {
    version: answer.version,
    methods: new Set(answer.methods),
    fields: new Set(answer.fields),
    enumValues: new Set(answer.enumValues),
  };
}

/** The RPCs with a `(method_since)` option, by path without the leading slash. */
const METHODS = new Map<string, Feature>();
/** The fields with a `(since)` option. */
const FIELDS = new Map<DescField, Feature>();
/** The enum values with a `(value_since)` option, by enum and number. */
const VALUES = new Map<DescEnum, Map<number, Feature>>();
/**
 * Per message that can hold a feature (itself or through its fields), the fields worth
 * visiting: those with a since option, and those holding a message or enum that can.
 */
const VISIT = new Map<DescMessage, DescField[]>();

for (const method of WriterService.methods) {
  const first = getOption(method, method_since);
  if (first !== "") {
    const name = `${WriterService.typeName}/${method.name}`;
    METHODS.set(name, { kind: "rpc", name, since: first, metadata: {} });
  }
}
for (const type of nestedTypes(file_safewrite_v1_writer)) {
  if (type.kind === "message") {
    for (const field of type.fields) {
      const first = getOption(field, since);
      if (first !== "") {
        FIELDS.set(field, {
          kind: "field",
          name: `${type.typeName}.${field.name}`,
          since: first,
          metadata: { message: type.typeName, number: String(field.number) },
        });
      }
    }
  } else if (type.kind === "enum") {
    for (const value of type.values) {
      const first = getOption(value, value_since);
      if (first !== "") {
        const values = VALUES.get(type) ?? new Map<number, Feature>();
        values.set(value.number, {
          kind: "enum value",
          name: `${type.typeName}.${value.name}`,
          since: first,
          metadata: { enum: type.typeName, value: value.name },
        });
        VALUES.set(type, values);
      }
    }
  }
}

/** The message a field holds (alone, in a list or as a map's value), if any. */
const messageOf = (field: DescField): DescMessage | undefined =>
  field.fieldKind === "message" ||
  (field.fieldKind === "list" && field.listKind === "message") ||
  (field.fieldKind === "map" && field.mapKind === "message")
    ? field.message
    : undefined;

/** The enum a field holds (alone, in a list or as a map's value), if any. */
const enumOf = (field: DescField): DescEnum | undefined =>
  field.fieldKind === "enum" ||
  (field.fieldKind === "list" && field.listKind === "enum") ||
  (field.fieldKind === "map" && field.mapKind === "enum")
    ? field.enum
    : undefined;

// The messages that can hold a feature, to a fixed point (messages may nest each other).
{
  const messages = [...nestedTypes(file_safewrite_v1_writer)].filter((t): t is DescMessage => t.kind === "message");
  const holds = new Set<DescMessage>();
  for (let changed = true; changed; ) {
    changed = false;
    for (const message of messages) {
      if (holds.has(message)) {
        continue;
      }
      const worth = message.fields.some((field) => {
        const inner = messageOf(field);
        const values = enumOf(field);
        return FIELDS.has(field) || (inner !== undefined && holds.has(inner)) || (values !== undefined && VALUES.has(values));
      });
      if (worth) {
        holds.add(message);
        changed = true;
      }
    }
  }
  for (const message of holds) {
    VISIT.set(
      message,
      message.fields.filter((field) => {
        const inner = messageOf(field);
        const values = enumOf(field);
        return FIELDS.has(field) || (inner !== undefined && holds.has(inner)) || (values !== undefined && VALUES.has(values));
      }),
    );
  }
}

/** Whether a message of this type can hold a feature (then {@link featuresOf} has work to do). */
export const mayHoldFeatures = (schema: DescMessage): boolean => VISIT.has(schema);

/**
 * The features a call needs: its RPC's (`method` as "safewrite.v1.WriterService/Lead")
 * and those of every field and enum value set in `request`, recursively.
 */
export function featuresOf(method: string, schema: DescMessage, request: Message): Feature[] {
  const found: Feature[] = [];
  const rpc = METHODS.get(method);
  if (rpc !== undefined) {
    found.push(rpc);
  }
  if (VISIT.has(schema)) {
    visit(reflect(schema, request, false), found);
  }
  return found;
}

function visit(message: ReflectMessage, found: Feature[]): void {
  for (const field of VISIT.get(message.desc) ?? []) {
    if (!message.isSet(field)) {
      continue;
    }
    const feature = FIELDS.get(field);
    if (feature !== undefined && !found.includes(feature)) {
      found.push(feature);
    }
    const values = enumOf(field) === undefined ? undefined : VALUES.get(field.enum!);
    const value = (v: unknown): void => {
      const used = values?.get(v as number);
      if (used !== undefined && !found.includes(used)) {
        found.push(used);
      }
    };
    const inner = (v: unknown): void => {
      if (VISIT.has((v as ReflectMessage).desc)) {
        visit(v as ReflectMessage, found);
      }
    };
    const each = messageOf(field) !== undefined ? inner : value;
    switch (field.fieldKind) {
      case "list":
        for (const item of message.get(field)) {
          each(item);
        }
        break;
      case "map":
        for (const [, item] of message.get(field)) {
          each(item);
        }
        break;
      case "message":
      case "enum":
        each(message.get(field));
        break;
      default:
        break;
    }
  }
}

/** The first of `features` the sidecar lacks; undefined when it has them all. */
export function lacking(sidecar: Known, features: readonly Feature[]): Feature | undefined {
  return features.find((feature) => {
    switch (feature.kind) {
      case "rpc":
        return !sidecar.methods.has(feature.name);
      case "field":
        return !sidecar.fields.has(feature.name);
      default:
        return !sidecar.enumValues.has(feature.name);
    }
  });
}

/** What the refusal says of the sidecar's version. */
const versionOf = (sidecar: Known): string =>
  sidecar.version === undefined
    ? "this sidecar is 0.1.x (older than 0.2.0: it has no rpc Capabilities)"
    : `this sidecar is ${sidecar.version}`;

/** A gRPC status as grpc-js fails a call with it. */
export function statusError(code: GrpcStatus, details: string, metadata: Metadata = new Metadata()): ServiceError {
  return Object.assign(new Error(`${code} ${GrpcStatus[code]}: ${details}`), { code, details, metadata });
}

/**
 * The client's refusal of a call that needs `feature`, which `sidecar` lacks, as the
 * sidecar's own refusal of an unknown field comes: FAILED_PRECONDITION, ErrorInfo
 * (domain safewrite.dev, reason UNKNOWN_FIELD) and WriteFailure in the status details,
 * so it decodes to the same error (a PreconditionFailedError, never retryable).
 */
export function refusal(feature: Feature, sidecar: Known): ServiceError {
  const what = feature.kind === "rpc" ? `rpc ${feature.name}` : feature.name;
  const message =
    `${what} needs a sidecar of ${feature.since} or newer; ${versionOf(sidecar)}; nothing was sent; ` +
    "upgrade the sidecar, or leave the feature unused (docs/compatibility.md)";
  const info = create(ErrorInfoSchema, {
    reason: "UNKNOWN_FIELD",
    domain: "safewrite.dev",
    metadata: {
      field: feature.name,
      ...feature.metadata,
      since: feature.since,
      sidecar_version: sidecar.version ?? "",
      refused_by: "client",
    },
  });
  const status = create(StatusSchema, {
    code: GrpcStatus.FAILED_PRECONDITION,
    message,
    details: [
      anyPack(ErrorInfoSchema, info),
      anyPack(WriteFailureSchema, create(WriteFailureSchema, { reason: ReasonMessage.UNKNOWN_FIELD })),
    ],
  });
  const metadata = new Metadata();
  metadata.set("grpc-status-details-bin", Buffer.from(toBinary(StatusSchema, status)));
  return statusError(GrpcStatus.FAILED_PRECONDITION, message, metadata);
}

/**
 * The failure of a call that needs a feature added after 0.1.0 when what its sidecar
 * knows could not be learned (`why`): the call fails closed, having sent nothing, with
 * `code` and `metadata` (rpc Capabilities' own, its rich details kept), so it decodes
 * to the client's usual error for that status, retryable or not as any call failing
 * with it. Sent unchecked, it could reach a sidecar older than 0.2.0, which drops what
 * it does not know (a write's fence) and serves the rest (an unfenced write).
 */
export function unlearned(code: GrpcStatus, why: string, metadata?: Metadata): ServiceError {
  return statusError(code, `the sidecar's features could not be learned (${why}); nothing was sent`, metadata);
}

/** How long the Capabilities call may take at most, whatever the call it is made for. */
export const CAPABILITIES_TIMEOUT_MS = 10_000;

/**
 * What the sidecar knows, once `asking` (rpc Capabilities, perhaps asked for another
 * call) answers; or why it could not be learned ({@link unlearned}): Capabilities failed
 * (otherwise than UNIMPLEMENTED, which `asking` answers as {@link OLDER}), or the call's
 * own `deadline` passed or its `signal` fired first (DEADLINE_EXCEEDED, CANCELLED). The
 * asking goes on then, for the calls that share it.
 */
export function learn(
  asking: Promise<Known | ServiceError>,
  deadline: Date | undefined,
  signal: AbortSignal | undefined,
): Promise<Known | ServiceError> {
  const answered = asking.then((answer) =>
    answer instanceof Error
      ? unlearned(answer.code, `rpc Capabilities: ${answer.details || answer.message}`, answer.metadata)
      : answer,
  );
  if (deadline === undefined && signal === undefined) {
    return answered;
  }
  return new Promise((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    const end = (answer: Known | ServiceError): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(answer);
    };
    const onAbort = (): void =>
      end(unlearned(GrpcStatus.CANCELLED, "the call's AbortSignal fired while waiting for rpc Capabilities"));
    if (signal?.aborted) {
      onAbort();
      return;
    }
    signal?.addEventListener("abort", onAbort, { once: true });
    if (deadline !== undefined) {
      const passed = (): void =>
        end(unlearned(GrpcStatus.DEADLINE_EXCEEDED, "the call's deadline passed while waiting for rpc Capabilities"));
      // setTimeout's longest delay (about 24.8 days); the asking ends long before.
      timer = setTimeout(passed, Math.min(Math.max(0, deadline.getTime() - Date.now()), 2 ** 31 - 1));
    }
    void answered.then(end);
  });
}

/** What a Leadership uses of its (server-streaming) call. */
export interface ReadCall {
  // The listeners' arguments are those of grpc-js's streams.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  on(event: string, listener: (...args: any[]) => void): unknown;
  cancel(): void;
}

/** What a Transaction uses of its (bidirectional) call. */
export interface StreamCall<W> extends ReadCall {
  write(message: W): unknown;
  end(): unknown;
}

/**
 * A stream call opened once `ready` says the sidecar can serve it: messages written
 * before are sent then; a refusal, a failure to learn what the sidecar knows (or a
 * cancel() before) ends it with that error, having sent nothing, as the sidecar's
 * refusal would end it.
 */
export class PendingCall<W> extends EventEmitter implements StreamCall<W> {
  /** The call once opened; a server-streaming one (Lead) is never written to. */
  #call: (ReadCall & Partial<StreamCall<W>>) | undefined;
  readonly #writes: W[] = [];
  #ended = false;
  #done = false;

  constructor(ready: Promise<ServiceError | undefined>, open: () => ReadCall & Partial<StreamCall<W>>) {
    super();
    void ready.then((refused) => {
      if (this.#done) {
        return;
      }
      if (refused !== undefined) {
        this.#fail(refused);
        return;
      }
      const call = open();
      this.#call = call;
      for (const event of ["metadata", "data", "error", "status", "end"]) {
        call.on(event, (...args: unknown[]) => this.emit(event, ...args));
      }
      for (const message of this.#writes.splice(0)) {
        call.write?.(message);
      }
      if (this.#ended) {
        call.end?.();
      }
    });
  }

  write(message: W): boolean {
    if (this.#call !== undefined) {
      this.#call.write?.(message);
    } else if (!this.#done) {
      this.#writes.push(message);
    }
    return true;
  }

  end(): void {
    this.#ended = true;
    this.#call?.end?.();
  }

  cancel(): void {
    if (this.#call !== undefined) {
      this.#call.cancel();
      return;
    }
    this.#fail(statusError(GrpcStatus.CANCELLED, "Cancelled on client"));
  }

  /** Ends the call with `err` (once), as grpc-js ends a failed one: 'error', then 'status'. */
  #fail(err: ServiceError): void {
    if (this.#done) {
      return;
    }
    this.#done = true;
    process.nextTick(() => {
      this.emit("error", err);
      this.emit("status", { code: err.code, details: err.details, metadata: err.metadata });
    });
  }
}
