/**
 * Version skew without a sidecar: what a request needs (read from the proto's since
 * options), and the client against a fake sidecar on loopback whose Capabilities answer
 * is made up (a sidecar that lacks the fence, one older than 0.2.0, one whose
 * Capabilities fails or is slow): the call it cannot serve is refused before anything
 * is sent, as the sidecar's own UNKNOWN_FIELD refusal comes, and Capabilities is asked
 * once; a call whose sidecar's features cannot be learned fails closed, nothing sent.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { create, fromBinary, toBinary, type DescMessage, type Message } from "@bufbuild/protobuf";
import { anyPack, durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  Metadata,
  Server,
  ServerCredentials,
  status as GrpcStatus,
  type ServerUnaryCall,
  type ServiceDefinition,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import {
  CancelledError,
  Client,
  DeadlineExceededError,
  InternalError,
  mergePatch,
  PreconditionFailedError,
  Reason,
  ResourceExhaustedError,
  Retry,
  UnavailableError,
  type Fence,
  type SafewriteError,
} from "@safewrite/client";
import {
  CapabilitiesRequestSchema,
  CapabilitiesResponseSchema,
  DeleteRequestSchema,
  DeleteResponseSchema,
  LeadRequestSchema,
  PropagationPolicy as PropagationPolicyMessage,
  Reason as ReasonMessage,
  TransactProposalSchema,
  TransactRequestSchema,
  UpdateWithRetryRequestSchema,
  UpdateWithRetryResponseSchema,
  WriteFailureSchema,
  WriteOptionsSchema,
  type CapabilitiesResponse,
} from "#gen/safewrite/v1/writer_pb";
import { ErrorInfoSchema, RetryInfoSchema } from "#gen/google/rpc/error_details_pb";
import { StatusSchema } from "#gen/google/rpc/status_pb";
import { featuresOf, lacking, mayHoldFeatures, OLDER } from "#internal/skew";

import { capabilitiesOf } from "./support.js";

const FENCE_FIELD = "safewrite.v1.WriteOptions.fence";
const DELETE_RPC = "safewrite.v1.WriterService/Delete";
const fence: Fence = { leaseNamespace: "ns", leaseName: "leader", epoch: 3 };
const ref = { apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "cm" };

describe("what a request needs", () => {
  const names = (method: string, schema: DescMessage, init: Record<string, unknown>): string[] =>
    featuresOf(method, schema, create(schema, init as never)).map((f) => `${f.name} ${f.since}`);

  it("nothing, for a request with what 0.1.0 had", () => {
    assert.deepEqual(
      names("safewrite.v1.WriterService/UpdateWithRetry", UpdateWithRetryRequestSchema, {
        target: { name: "cm" },
        options: { fieldManager: "m", dryRun: true },
      }),
      [],
    );
  });

  it("the fence field, found inside the options, with its since option", () => {
    assert.deepEqual(
      names("safewrite.v1.WriterService/UpdateWithRetry", UpdateWithRetryRequestSchema, {
        options: { fence: { leaseName: "l", epoch: 1n } },
      }),
      [`${FENCE_FIELD} 0.2.0`],
    );
    assert.deepEqual(
      names("safewrite.v1.WriterService/Transact", TransactRequestSchema, {
        message: { case: "begin", value: { options: { fence: { epoch: 1n } } } },
      }),
      [`${FENCE_FIELD} 0.2.0`],
    );
  });

  it("the RPCs added after 0.1.0, whatever their request", () => {
    assert.deepEqual(names(DELETE_RPC, DeleteRequestSchema, {}), [`${DELETE_RPC} 0.2.0`]);
    assert.deepEqual(names("safewrite.v1.WriterService/Lead", LeadRequestSchema, { name: "l" }), [
      "safewrite.v1.WriterService/Lead 0.2.0",
    ]);
    // DeleteRequest came with 0.2.0, its fence with it (no since option of its own); an
    // enum value without a since option needs nothing either.
    assert.deepEqual(
      names(DELETE_RPC, DeleteRequestSchema, { fence: { epoch: 1n }, propagationPolicy: PropagationPolicyMessage.ORPHAN }),
      [`${DELETE_RPC} 0.2.0`],
    );
  });

  it("visits only the messages that can hold a feature", () => {
    assert.ok(mayHoldFeatures(UpdateWithRetryRequestSchema));
    assert.ok(mayHoldFeatures(WriteOptionsSchema));
    assert.ok(!mayHoldFeatures(CapabilitiesRequestSchema));
  });

  it("a Transact proposal can hold none (the check reads a stream's first message only; extend it when this fails)", () => {
    assert.ok(!mayHoldFeatures(TransactProposalSchema));
    assert.ok(mayHoldFeatures(TransactRequestSchema), "through the begin's options");
  });

  it("a sidecar older than 0.2.0 lacks every feature; one that lists a feature has it", () => {
    const fenced = featuresOf("safewrite.v1.WriterService/UpdateWithRetry", UpdateWithRetryRequestSchema, create(UpdateWithRetryRequestSchema, {
      options: { fence: { epoch: 1n } },
    }));
    assert.equal(lacking(OLDER, fenced)?.name, FENCE_FIELD);
    const all = capabilitiesOf("0.2.0");
    const knows = { version: all.version, methods: new Set(all.methods), fields: new Set(all.fields), enumValues: new Set(all.enumValues) };
    assert.equal(lacking(knows, fenced), undefined);
    assert.equal(lacking({ ...knows, fields: new Set(all.fields.filter((f) => f !== FENCE_FIELD)) }, fenced)?.name, FENCE_FIELD);
  });
});

/** The UNKNOWN_FIELD refusal as a sidecar of 0.2.0 sends it (ErrorInfo and WriteFailure). */
function sidecarRefusal(): { code: GrpcStatus; details: string; metadata: Metadata } {
  const details = "field 77 of safewrite.v1.WriteOptions is unknown (safewrite 0.2.0): the client is newer than this sidecar";
  const status = create(StatusSchema, {
    code: GrpcStatus.FAILED_PRECONDITION,
    message: details,
    details: [
      anyPack(
        ErrorInfoSchema,
        create(ErrorInfoSchema, {
          reason: "UNKNOWN_FIELD",
          domain: "safewrite.dev",
          metadata: { field: "options", message: "safewrite.v1.WriteOptions", number: "77", sidecar_version: "0.2.0" },
        }),
      ),
      anyPack(WriteFailureSchema, create(WriteFailureSchema, { reason: ReasonMessage.UNKNOWN_FIELD })),
    ],
  });
  const metadata = new Metadata();
  metadata.set("grpc-status-details-bin", Buffer.from(toBinary(StatusSchema, status)));
  return { code: GrpcStatus.FAILED_PRECONDITION, details, metadata };
}

/**
 * The RESOURCE_EXHAUSTED a sidecar sheds load with (--max-in-flight): ErrorInfo reason
 * OVERLOADED, RetryInfo, WriteFailure.
 */
function overloaded(): { code: GrpcStatus; details: string; metadata: Metadata } {
  const details = "safewrite already has 1 RPCs in flight (--max-in-flight); nothing was sent; retry after the RetryInfo delay";
  const status = create(StatusSchema, {
    code: GrpcStatus.RESOURCE_EXHAUSTED,
    message: details,
    details: [
      anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { reason: "OVERLOADED", domain: "safewrite.dev" })),
      anyPack(RetryInfoSchema, create(RetryInfoSchema, { retryDelay: durationFromMs(100) })),
      anyPack(WriteFailureSchema, create(WriteFailureSchema, { reason: ReasonMessage.OVERLOADED })),
    ],
  });
  const metadata = new Metadata();
  metadata.set("grpc-status-details-bin", Buffer.from(toBinary(StatusSchema, status)));
  return { code: GrpcStatus.RESOURCE_EXHAUSTED, details, metadata };
}

/**
 * A fake sidecar on loopback: Capabilities answers `answer` (a message, a gRPC code to
 * fail with, UNIMPLEMENTED as a sidecar older than 0.2.0 does, or a whole status) after
 * `delayMs`, UpdateWithRetry and Delete answer GONE (or the sidecar's own UNKNOWN_FIELD
 * refusal for the name "refuse"), and every call is counted; Transact and Lead are not
 * served (a call that reached them would fail UNIMPLEMENTED, and be counted).
 */
class FakeSidecar {
  answer: CapabilitiesResponse | GrpcStatus | { code: GrpcStatus; details: string; metadata: Metadata } =
    GrpcStatus.UNIMPLEMENTED;
  delayMs = 0;
  readonly calls: string[] = [];
  readonly #server = new Server();
  address = "";

  async start(): Promise<void> {
    const unary = (name: string, input: DescMessage, output: DescMessage) => ({
      path: `/safewrite.v1.WriterService/${name}`,
      requestStream: false,
      responseStream: false,
      requestSerialize: () => Buffer.alloc(0),
      requestDeserialize: (bytes: Buffer) => {
        this.calls.push(name);
        return fromBinary(input, bytes);
      },
      responseSerialize: (message: Message) => Buffer.from(toBinary(output, message)),
      responseDeserialize: () => undefined,
    });
    const service: ServiceDefinition = {
      Capabilities: unary("Capabilities", CapabilitiesRequestSchema, CapabilitiesResponseSchema),
      UpdateWithRetry: unary("UpdateWithRetry", UpdateWithRetryRequestSchema, UpdateWithRetryResponseSchema),
      Delete: unary("Delete", DeleteRequestSchema, DeleteResponseSchema),
    };
    type Done = (err: object | null, res?: unknown) => void;
    const implementation: UntypedServiceImplementation = {
      Capabilities: (_call: unknown, done: Done) => {
        const answer = this.answer;
        setTimeout(() => {
          if (typeof answer === "number") {
            done({ code: answer, details: "made up" });
          } else if ("$typeName" in answer) {
            done(null, answer);
          } else {
            done(answer);
          }
        }, this.delayMs);
      },
      UpdateWithRetry: (call: ServerUnaryCall<{ target?: { name: string } }, unknown>, done: Done) =>
        call.request.target?.name === "refuse"
          ? done(sidecarRefusal())
          : done(null, create(UpdateWithRetryResponseSchema, { result: { outcome: 5, attempts: 1 } })),
      Delete: (_call: unknown, done: Done) => done(null, create(DeleteResponseSchema, { outcome: 3, attempts: 1 })),
    };
    this.#server.addService(service, implementation);
    const port = await new Promise<number>((resolve, reject) =>
      this.#server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    this.address = `127.0.0.1:${port}`;
  }

  count(name: string): number {
    return this.calls.filter((c) => c === name).length;
  }

  stop(): void {
    this.#server.forceShutdown();
  }
}

/** Asserts `err` is the client's refusal of `feature` for a sidecar described by `version`. */
function assertRefused(err: unknown, feature: string, version: string): true {
  assert.ok(err instanceof PreconditionFailedError, `want a PreconditionFailedError, got ${String(err)}`);
  assert.equal(err.code, GrpcStatus.FAILED_PRECONDITION);
  assert.equal(err.reason, "UNKNOWN_FIELD");
  assert.equal(err.domain, "safewrite.dev");
  assert.equal(err.failureReason, Reason.UNKNOWN_FIELD);
  assert.equal(err.advice, Retry.NEVER);
  assert.equal(err.retryable, false);
  assert.equal(err.errorMetadata["field"], feature);
  assert.equal(err.errorMetadata["since"], "0.2.0");
  assert.equal(err.errorMetadata["refused_by"], "client");
  for (const part of [feature, "needs a sidecar of 0.2.0 or newer", version, "nothing was sent", "docs/compatibility.md"]) {
    assert.ok(err.message.includes(part), `"${err.message}" names ${part}`);
  }
  return true;
}

/**
 * Asserts `err` is a call's failure, nothing sent, because its sidecar's features could
 * not be learned (`why`): the client's usual error for `code` (class, retry advice).
 */
function assertUnlearned(err: unknown, cls: new (...args: never[]) => SafewriteError, code: GrpcStatus, why: string): true {
  assert.ok(err instanceof cls, `want a ${cls.name}, got ${String(err)}`);
  assert.equal(err.code, code);
  assert.equal(err.message, `the sidecar's features could not be learned (${why}); nothing was sent`);
  return true;
}

describe("the skew check against a fake sidecar", () => {
  const sidecar = new FakeSidecar();
  before(() => sidecar.start());
  after(() => sidecar.stop());
  const fresh = (): Client => new Client(sidecar.address, { timeoutMs: 5_000 });

  it("older than 0.2.0 (UNIMPLEMENTED): refuses a fenced write and a delete before sending, asks once", async () => {
    sidecar.answer = GrpcStatus.UNIMPLEMENTED;
    const client = fresh();
    const before = sidecar.calls.length;
    try {
      // Concurrent first calls share one asking.
      const refusals = await Promise.allSettled([
        client.update(ref, mergePatch({ data: {} }), { fence }),
        client.update(ref, mergePatch({ data: {} }), { fence }),
        client.delete(ref),
      ]);
      assert.ok(refusals.every((r) => r.status === "rejected"));
      assertRefused((refusals[0] as PromiseRejectedResult).reason, FENCE_FIELD, "older than 0.2.0");
      assertRefused((refusals[2] as PromiseRejectedResult).reason, DELETE_RPC, "older than 0.2.0");
      await assert.rejects(client.withFence(fence).update(ref, mergePatch({ data: {} })), (err) =>
        assertRefused(err, FENCE_FIELD, "older than 0.2.0"),
      );
      // What 0.1.0 had is sent.
      await client.update(ref, mergePatch({ data: {} }));
      assert.deepEqual(sidecar.calls.slice(before), ["Capabilities", "UpdateWithRetry"]);
    } finally {
      client.close();
    }
  });

  it("older than 0.2.0: a fenced transaction and a campaign fail with the refusal, no stream opened", async () => {
    sidecar.answer = GrpcStatus.UNIMPLEMENTED;
    const client = fresh();
    const before = sidecar.calls.length;
    try {
      await assert.rejects(
        client.transact(ref, () => mergePatch({ data: {} }), { fence }),
        (err) => assertRefused(err, FENCE_FIELD, "older than 0.2.0"),
      );
      const leadership = client.lead({ namespace: "ns", name: "leader" });
      await assert.rejects(
        (async () => {
          for await (const _ of leadership) {
            assert.fail("no event from a refused campaign");
          }
        })(),
        (err) => assertRefused(err, "safewrite.v1.WriterService/Lead", "older than 0.2.0"),
      );
      assert.ok(leadership.ended);
      // Transact and Lead are not served here: a stream that was opened would be counted.
      assert.deepEqual(sidecar.calls.slice(before), ["Capabilities"]);
    } finally {
      client.close();
    }
  });

  it("a sidecar that lacks the fence: refused naming its version; a delete it serves is sent", async () => {
    sidecar.answer = capabilitiesOf("0.2.7", [FENCE_FIELD]);
    const client = fresh();
    try {
      await assert.rejects(client.update(ref, mergePatch({ data: {} }), { fence }), (err) =>
        assertRefused(err, FENCE_FIELD, "this sidecar is 0.2.7"),
      );
      const before = sidecar.count("Delete");
      await client.delete(ref);
      assert.equal(sidecar.count("Delete"), before + 1);
    } finally {
      client.close();
    }
  });

  it("a sidecar with everything: the fenced write is sent, Capabilities asked once per client", async () => {
    sidecar.answer = capabilitiesOf("0.2.0");
    const client = fresh();
    const before = sidecar.calls.length;
    try {
      await client.update(ref, mergePatch({ data: {} }), { fence });
      await client.update(ref, mergePatch({ data: {} }), { fence });
      await client.delete(ref);
      assert.deepEqual(sidecar.calls.slice(before), ["Capabilities", "UpdateWithRetry", "UpdateWithRetry", "Delete"]);
      // close() forgets it: the next channel may reach another sidecar.
      client.close();
      await client.delete(ref);
      assert.deepEqual(sidecar.calls.slice(before).filter((c) => c === "Capabilities").length, 2);
    } finally {
      client.close();
    }
  });

  it("a failing Capabilities fails the call closed with its code, nothing sent; the next call asks again", async () => {
    sidecar.answer = GrpcStatus.INTERNAL;
    const client = fresh();
    const before = sidecar.calls.length;
    try {
      await assert.rejects(client.update(ref, mergePatch({ data: {} }), { fence }), (err) =>
        assertUnlearned(err, InternalError, GrpcStatus.INTERNAL, "rpc Capabilities: made up"),
      );
      assert.deepEqual(sidecar.calls.slice(before), ["Capabilities"], "the fenced write is not sent");
      // What 0.1.0 had asks nothing and is sent.
      await client.update(ref, mergePatch({ data: {} }));
      assert.deepEqual(sidecar.calls.slice(before), ["Capabilities", "UpdateWithRetry"]);
      // Nothing was kept: the next call asks again, and is refused per the answer.
      sidecar.answer = GrpcStatus.UNIMPLEMENTED;
      await assert.rejects(client.update(ref, mergePatch({ data: {} }), { fence }), (err) =>
        assertRefused(err, FENCE_FIELD, "older than 0.2.0"),
      );
      assert.deepEqual(sidecar.calls.slice(before), ["Capabilities", "UpdateWithRetry", "Capabilities"]);
    } finally {
      client.close();
    }
  });

  it("a failing Capabilities passes its code and rich details through (RESOURCE_EXHAUSTED, UNAVAILABLE)", async () => {
    sidecar.answer = overloaded();
    const client = fresh();
    const before = sidecar.calls.length;
    try {
      await assert.rejects(client.update(ref, mergePatch({ data: {} }), { fence }), (err) => {
        assertUnlearned(err, ResourceExhaustedError, GrpcStatus.RESOURCE_EXHAUSTED, `rpc Capabilities: ${overloaded().details}`);
        const e = err as ResourceExhaustedError;
        assert.equal(e.reason, "OVERLOADED");
        assert.equal(e.domain, "safewrite.dev");
        assert.equal(e.failureReason, Reason.OVERLOADED);
        assert.equal(e.retryDelayMs, 100);
        assert.equal(e.advice, Retry.LATER);
        assert.equal(e.retryable, true);
        return true;
      });
      sidecar.answer = GrpcStatus.UNAVAILABLE;
      await assert.rejects(client.delete(ref), (err) => {
        assertUnlearned(err, UnavailableError, GrpcStatus.UNAVAILABLE, "rpc Capabilities: made up");
        assert.equal((err as UnavailableError).retryable, true);
        assert.equal((err as UnavailableError).reason, undefined);
        return true;
      });
      // A fenced transaction and a campaign fail alike, no stream opened.
      await assert.rejects(client.transact(ref, () => mergePatch({ data: {} }), { fence }), (err) =>
        assertUnlearned(err, UnavailableError, GrpcStatus.UNAVAILABLE, "rpc Capabilities: made up"),
      );
      const leadership = client.lead({ namespace: "ns", name: "leader" });
      await assert.rejects(
        (async () => {
          for await (const _ of leadership) {
            assert.fail("no event from a campaign whose sidecar's features are unknown");
          }
        })(),
        (err) => assertUnlearned(err, UnavailableError, GrpcStatus.UNAVAILABLE, "rpc Capabilities: made up"),
      );
      assert.deepEqual(sidecar.calls.slice(before), ["Capabilities", "Capabilities", "Capabilities", "Capabilities"]);
      // Once it answers, the call is sent.
      sidecar.answer = capabilitiesOf("0.2.0");
      await client.update(ref, mergePatch({ data: {} }), { fence });
      assert.deepEqual(sidecar.calls.slice(before).slice(4), ["Capabilities", "UpdateWithRetry"]);
    } finally {
      client.close();
    }
  });

  it("a call whose deadline passes or signal fires while another call asks fails closed, nothing sent", async () => {
    sidecar.answer = capabilitiesOf("0.2.0");
    sidecar.delayMs = 1_000;
    const client = fresh();
    const before = sidecar.calls.length;
    try {
      const asking = client.update(ref, mergePatch({ data: {} }), { fence });
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error("given up")), 100);
      const [timedOut, aborted] = await Promise.allSettled([
        client.update(ref, mergePatch({ data: {} }), { fence, timeoutMs: 200 }),
        client.delete(ref, { signal: controller.signal }),
      ]);
      assert.equal(timedOut.status, "rejected");
      assertUnlearned(
        (timedOut as PromiseRejectedResult).reason,
        DeadlineExceededError,
        GrpcStatus.DEADLINE_EXCEEDED,
        "the call's deadline passed while waiting for rpc Capabilities",
      );
      const deadline = (timedOut as PromiseRejectedResult).reason as DeadlineExceededError;
      assert.equal(deadline.idempotent, true, "nothing was sent: nothing is in doubt");
      assert.equal(deadline.retryable, true, "retryable without an idempotency key");
      assert.equal(aborted.status, "rejected");
      const cancelled = (aborted as PromiseRejectedResult).reason as CancelledError;
      assertUnlearned(cancelled, CancelledError, GrpcStatus.CANCELLED, "the call's AbortSignal fired while waiting for rpc Capabilities");
      assert.equal((cancelled.cause as Error).message, "given up", "its cause is the signal's reason");
      assert.deepEqual(sidecar.calls.slice(before), ["Capabilities"], "neither was sent");
      // The asking went on for the call that asked, which is sent.
      await asking;
      assert.deepEqual(sidecar.calls.slice(before), ["Capabilities", "UpdateWithRetry"]);
    } finally {
      sidecar.delayMs = 0;
      client.close();
    }
  });

  it("the sidecar's own UNKNOWN_FIELD refusal decodes to the same error", async () => {
    sidecar.answer = capabilitiesOf("0.2.0");
    const client = fresh();
    try {
      await assert.rejects(client.update({ ...ref, name: "refuse" }, mergePatch({ data: {} })), (err) => {
        assert.ok(err instanceof PreconditionFailedError);
        assert.equal(err.reason, "UNKNOWN_FIELD");
        assert.equal(err.failureReason, Reason.UNKNOWN_FIELD);
        assert.equal(err.retryable, false);
        assert.equal(err.errorMetadata["sidecar_version"], "0.2.0");
        return true;
      });
    } finally {
      client.close();
    }
  });
});
