/**
 * Conditions, finalizers, owner references and keyed list entries: the requests their
 * builders make (read back by a recording gRPC server on loopback, which also answers
 * OUTCOME_GONE), what they refuse before sending, and the same calls against the real
 * sidecar with client-node's types.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { create, fromBinary, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import { Server, ServerCredentials, type ServiceDefinition, type UntypedServiceImplementation } from "@grpc/grpc-js";
import type { KubernetesObject, V1Condition, V1OwnerReference } from "@kubernetes/client-node";
import {
  addFinalizer,
  Client,
  InvalidError,
  mergePatch,
  Outcome,
  PreconditionFailedError,
  Reason,
  removeConditions,
  removeFinalizer,
  removeListEntry,
  removeOwnerReference,
  Retry,
  setConditions,
  setControllerReference,
  setOwnerReference,
  upsertListEntry,
  type Mutation,
} from "@safewrite/client";
import {
  CapabilitiesRequestSchema,
  CapabilitiesResponseSchema,
  MutationSchema,
  PatchStatusRequestSchema,
  PatchStatusResponseSchema,
  UpdateWithRetryRequestSchema,
  UpdateWithRetryResponseSchema,
  type PatchStatusRequest,
  type UpdateWithRetryRequest,
} from "#gen/safewrite/v1/writer_pb";
import { messageOf } from "#internal/mutation";

import { adminClient, capabilitiesOf, configMap, existing, widget } from "./support.js";

/** The mutation as proto3 JSON, as the sidecar reads it. */
const json = (mutation: Mutation): JsonValue => toJson(MutationSchema, messageOf(mutation));

describe("the builders", () => {
  it("set conditions with every field, in order, the time in whole seconds", () => {
    const ready: V1Condition = {
      type: "Ready",
      status: "True",
      reason: "Reconciled",
      message: "3 replicas",
      observedGeneration: 4,
      lastTransitionTime: new Date("2026-11-26T15:04:05.678Z"),
    };
    assert.deepEqual(json(setConditions([ready, { type: "Synced", status: "False", reason: "Pending" }])), {
      setCondition: {
        conditions: [
          {
            type: "Ready",
            status: "True",
            reason: "Reconciled",
            message: "3 replicas",
            observedGeneration: "4",
            lastTransitionTime: "2026-11-26T15:04:05Z",
          },
          { type: "Synced", status: "False", reason: "Pending" },
        ],
      },
    });
  });

  it("set one condition, and name another list", () => {
    const m = setConditions({ type: "Ready", status: "Unknown", reason: "Waiting", observedGeneration: 0 }, { path: "status.gates" });
    assert.equal(m.kind, "setCondition");
    assert.deepEqual(json(m), {
      setCondition: {
        conditions: [{ type: "Ready", status: "Unknown", reason: "Waiting", observedGeneration: "0" }],
        path: "status.gates",
      },
    });
  });

  it("remove conditions by one type or several", () => {
    assert.deepEqual(json(removeConditions("Ready")), { removeCondition: { types: ["Ready"] } });
    assert.deepEqual(json(removeConditions(["Ready", "Synced"], { path: "status.gates" })), {
      removeCondition: { types: ["Ready", "Synced"], path: "status.gates" },
    });
  });

  it("add and remove a finalizer", () => {
    assert.deepEqual(json(addFinalizer("example.com/cleanup")), { finalizer: { finalizer: "example.com/cleanup" } });
    assert.deepEqual(json(removeFinalizer("example.com/cleanup")), {
      finalizer: { finalizer: "example.com/cleanup", remove: true },
    });
  });

  const owner: V1OwnerReference = { apiVersion: "apps/v1", kind: "Deployment", name: "web", uid: "u-1" };

  it("ensure and remove an owner reference as given", () => {
    assert.deepEqual(json(setOwnerReference(owner)), {
      ownerReference: { owner: { apiVersion: "apps/v1", kind: "Deployment", name: "web", uid: "u-1" } },
    });
    assert.deepEqual(json(removeOwnerReference({ ...owner, controller: true })), {
      ownerReference: {
        owner: { apiVersion: "apps/v1", kind: "Deployment", name: "web", uid: "u-1", controller: true },
        remove: true,
      },
    });
  });

  it("take the owner from any Kubernetes object, by name when it has no uid", () => {
    const deployment: KubernetesObject = { apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "web", uid: "u-1" } };
    assert.deepEqual(json(setOwnerReference(deployment, { blockOwnerDeletion: true })), {
      ownerReference: {
        owner: { apiVersion: "apps/v1", kind: "Deployment", name: "web", uid: "u-1", blockOwnerDeletion: true },
      },
    });
    const byName: KubernetesObject = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "cfg" } };
    assert.deepEqual(json(setOwnerReference(byName)), {
      ownerReference: { owner: { apiVersion: "v1", kind: "ConfigMap", name: "cfg" } },
    });
  });

  it("make a controller reference that blocks the owner's deletion unless told not to", () => {
    assert.deepEqual(json(setControllerReference(owner)), {
      ownerReference: { owner: { ...owner, controller: true, blockOwnerDeletion: true } },
    });
    assert.deepEqual(json(setControllerReference(owner, { blockOwnerDeletion: false })), {
      ownerReference: { owner: { ...owner, controller: true } },
    });
    assert.deepEqual(json(setControllerReference({ ...owner, blockOwnerDeletion: false })), {
      ownerReference: { owner: { ...owner, controller: true } },
    }, "a reference's own field when no option is given");
    assert.deepEqual(json(setOwnerReference({ ...owner, controller: true }, { controller: false })), {
      ownerReference: { owner },
    }, "an option overrides the reference's own field");
  });

  it("upsert and remove a keyed list entry, from an object or its JSON text", () => {
    assert.deepEqual(json(upsertListEntry("status.parents", "controllerName", { controllerName: "a", ok: true })), {
      listEntry: { path: "status.parents", keys: ["controllerName"], entryJson: '{"controllerName":"a","ok":true}' },
    });
    const removal = removeListEntry("spec.routes", ["name", "port"], '{"name":"r","port":80}');
    assert.equal(removal.kind, "listEntry");
    assert.deepEqual(json(removal), {
      listEntry: { path: "spec.routes", keys: ["name", "port"], entryJson: '{"name":"r","port":80}', remove: true },
    });
  });
});

describe("the builders refuse before sending", () => {
  const refused = (build: () => unknown, message: RegExp): void => {
    assert.throws(build, (err: unknown) => err instanceof TypeError && message.test(err.message));
  };
  // What the types forbid, as a JavaScript caller (or a cast) can still send it.
  const loose = <T>(value: unknown): T => value as T;

  it("a transition time that is not a valid Date", () => {
    refused(
      () => setConditions(loose({ type: "Ready", status: "True", reason: "R", lastTransitionTime: "2026-01-01T00:00:00Z" })),
      /conditions\[0\]\.lastTransitionTime must be a valid Date, not "2026/,
    );
    refused(
      () => setConditions(loose({ type: "Ready", status: "True", reason: "R", lastTransitionTime: new Date("no") })),
      /lastTransitionTime must be a valid Date, not an invalid Date/,
    );
  });

  it("an observed generation that is not an integer", () => {
    refused(() => setConditions({ type: "Ready", status: "True", reason: "R", observedGeneration: 1.5 }), /observedGeneration must be an integer/);
  });

  it("a condition without a status, or a type that is not a string", () => {
    refused(() => setConditions([{ type: "A", status: "True", reason: "R" }, loose({ type: "B", reason: "R" })]), /conditions\[1\]\.status must be a string, not undefined/);
    refused(() => removeConditions(loose(["Ready", 3])), /types\[1\] must be a string, not a number/);
  });

  it("an owner object without apiVersion or kind, as client-node's list items come", () => {
    const item: KubernetesObject = { metadata: { name: "web", uid: "u-1" } };
    refused(() => setOwnerReference(item), /no apiVersion or kind .* give a V1OwnerReference/);
    refused(() => setControllerReference(loose({ apiVersion: "v1", kind: "ConfigMap", metadata: {} })), /owner\.metadata\.name must be a string/);
    refused(() => removeOwnerReference(loose({ apiVersion: "v1", name: "x" })), /owner\.kind must be a string, not undefined/);
  });

  it("a list entry that is not an object, a finalizer that is not a string", () => {
    refused(() => upsertListEntry("spec.parents", "controllerName", loose([1])), /entry must be an object or its JSON text, not a list/);
    refused(() => addFinalizer(loose(undefined)), /addFinalizer: name must be a string, not undefined/);
  });
});

/** A gRPC server on loopback serving UpdateWithRetry and PatchStatus: records each request, answers GONE. */
class Recorder {
  /** The requests received, as proto3 JSON. */
  readonly requests: JsonValue[] = [];
  /** The requests received, as bytes (hex), with the RPC each came to. */
  readonly raw: { method: string; bytes: string }[] = [];
  readonly #server = new Server();
  address = "";

  async start(): Promise<void> {
    const method = <I, O>(name: string, input: { fromBinary: (b: Uint8Array) => I }, output: { toBinary: (m: O) => Uint8Array }) => ({
      path: `/safewrite.v1.WriterService/${name}`,
      requestStream: false,
      responseStream: false,
      requestSerialize: () => Buffer.alloc(0),
      requestDeserialize: (bytes: Buffer) => {
        this.raw.push({ method: name, bytes: bytes.toString("hex") });
        return input.fromBinary(bytes);
      },
      responseSerialize: (message: O) => Buffer.from(output.toBinary(message)),
      responseDeserialize: () => undefined,
    });
    const service: ServiceDefinition = {
      // A sidecar of this client's version: it knows every feature a request may use.
      Capabilities: method(
        "Capabilities",
        { fromBinary: (b) => fromBinary(CapabilitiesRequestSchema, b) },
        { toBinary: (m) => toBinary(CapabilitiesResponseSchema, m as never) },
      ),
      UpdateWithRetry: method(
        "UpdateWithRetry",
        { fromBinary: (b) => fromBinary(UpdateWithRetryRequestSchema, b) },
        { toBinary: (m) => toBinary(UpdateWithRetryResponseSchema, m as never) },
      ),
      PatchStatus: method(
        "PatchStatus",
        { fromBinary: (b) => fromBinary(PatchStatusRequestSchema, b) },
        { toBinary: (m) => toBinary(PatchStatusResponseSchema, m as never) },
      ),
    };
    const gone = { result: { outcome: Outcome.GONE, attempts: 1 } };
    const implementation: UntypedServiceImplementation = {
      Capabilities: (_call: unknown, done: (err: null, res: unknown) => void) => done(null, capabilitiesOf("0.2.0")),
      UpdateWithRetry: (call: { request: UpdateWithRetryRequest }, done: (err: null, res: unknown) => void) => {
        this.requests.push(toJson(UpdateWithRetryRequestSchema, call.request));
        done(null, create(UpdateWithRetryResponseSchema, gone));
      },
      PatchStatus: (call: { request: PatchStatusRequest }, done: (err: null, res: unknown) => void) => {
        this.requests.push(toJson(PatchStatusRequestSchema, call.request));
        done(null, create(PatchStatusResponseSchema, gone));
      },
    };
    this.#server.addService(service, implementation);
    const port = await new Promise<number>((resolve, reject) =>
      this.#server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    this.address = `127.0.0.1:${port}`;
  }

  stop(): void {
    this.#server.forceShutdown();
  }
}

describe("the requests sent", () => {
  const recorder = new Recorder();
  let client: Client;
  before(async () => {
    await recorder.start();
    client = new Client(recorder.address, { timeoutMs: 5_000 });
  });
  after(() => {
    client.close();
    recorder.stop();
  });
  const ref = { apiVersion: "example.com/v1", kind: "Widget", namespace: "ns", name: "w" };

  it("carry the mutation exactly, and a GONE answer reads as gone", async () => {
    const res = await client.update(ref, removeFinalizer("example.com/cleanup"), { timeoutMs: 5_000 });
    assert.equal(res.outcome, Outcome.GONE);
    assert.equal(res.outcomeName, "GONE");
    assert.equal(res.gone, true);
    assert.deepEqual(res.object, {}, "nothing was written: no object");
    const status = await client.patchStatus(ref, setConditions({ type: "Ready", status: "True", reason: "Done" }), {
      timeoutMs: 5_000,
    });
    assert.equal(status.gone, true);
    assert.deepEqual(recorder.requests, [
        {
          target: { apiVersion: "example.com/v1", kind: "Widget", namespace: "ns", name: "w" },
          mutation: { finalizer: { finalizer: "example.com/cleanup", remove: true } },
        },
        {
          target: { apiVersion: "example.com/v1", kind: "Widget", namespace: "ns", name: "w" },
          mutation: { setCondition: { conditions: [{ type: "Ready", status: "True", reason: "Done" }] } },
        },
    ]);
  });

  it("patchStatus, and update with status: true, send PatchStatus the very bytes update sends UpdateWithRetry", async () => {
    const start = recorder.raw.length;
    const options = { preconditions: { uid: "u" }, retryPolicy: { maxAttempts: 3 }, fieldManager: "m", dryRun: true };
    const change = mergePatch({ status: { phase: "Ready" } });
    await client.update(ref, change, options);
    await client.patchStatus(ref, change, options);
    await client.update(ref, change, { ...options, status: true });
    const [main, status, flagged] = recorder.raw.slice(start);
    assert.deepEqual([main?.method, status?.method, flagged?.method], ["UpdateWithRetry", "PatchStatus", "PatchStatus"]);
    assert.equal(status?.bytes, main?.bytes);
    assert.equal(flagged?.bytes, main?.bytes);
  });

  it("carry a fence, its epoch a number or a bigint", async () => {
    const start = recorder.requests.length;
    const change = mergePatch({ data: {} });
    await client.update(ref, change, { fence: { leaseNamespace: "ns", leaseName: "leader", epoch: 3 } });
    await client.patchStatus(ref, change, { fence: { leaseNamespace: "ns", leaseName: "leader", epoch: 2n ** 53n + 1n } });
    assert.deepEqual(
      recorder.requests.slice(start).map((r) => (r as { options?: unknown }).options),
      [
        { fence: { leaseNamespace: "ns", leaseName: "leader", epoch: "3" } },
        { fence: { leaseNamespace: "ns", leaseName: "leader", epoch: "9007199254740993" } },
      ],
    );
  });

  it("no request leaves for a refused argument", async () => {
    const before = recorder.requests.length;
    assert.throws(() => client.update(ref, setOwnerReference({ metadata: { name: "x" } })), TypeError);
    assert.equal(recorder.requests.length, before);
  });

  it("no request leaves for an owner of another namespace, which the garbage collector would not find", async () => {
    const before = recorder.requests.length;
    const elsewhere: KubernetesObject = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "o", namespace: "other", uid: "u" } };
    for (const [target, mutation] of [
      [ref, setControllerReference(elsewhere)],
      [{ ...ref, namespace: undefined }, setOwnerReference(elsewhere)],
    ] as const) {
      const err = await client.update(target, mutation).then(
        () => assert.fail("sent"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof InvalidError, String(err));
      assert.equal(err.failureReason, Reason.INVALID_REQUEST);
      assert.equal(err.reason, "INVALID_REQUEST");
      assert.equal(err.retryable, false);
      assert.deepEqual(err.fieldViolations.map((v) => v.field), ["mutation.owner_reference.owner"]);
      assert.match(err.message, /namespace "other"/);
    }
    assert.equal(recorder.requests.length, before);
    // The same namespace, a cluster-scoped owner, a reference (no namespace known), a removal: sent.
    const clusterScoped: KubernetesObject = { apiVersion: "v1", kind: "Namespace", metadata: { name: "ns", uid: "u" } };
    await client.update(ref, setOwnerReference({ ...elsewhere, metadata: { ...elsewhere.metadata, namespace: "ns" } }));
    await client.update(ref, setControllerReference(clusterScoped));
    await client.update(ref, setOwnerReference({ apiVersion: "v1", kind: "ConfigMap", name: "o", uid: "u" }));
    await client.update(ref, removeOwnerReference(elsewhere));
    assert.equal(recorder.requests.length, before + 4);
  });
});

describe("against the sidecar", () => {
  const client = adminClient();
  after(() => client.close());

  it("sets a V1Condition on a status subresource, then the same one writes nothing", async () => {
    const ref = widget("condition");
    await client.update(ref, mergePatch({}), { createIfMissing: { spec: { size: 1 } } });
    const ready: V1Condition = {
      type: "Ready",
      status: "True",
      reason: "Reconciled",
      message: "ok",
      lastTransitionTime: new Date("2026-01-01T00:00:00Z"),
    };
    const set = await client.patchStatus<KubernetesObject & { status: { conditions: V1Condition[] } }>(ref, setConditions(ready));
    assert.equal(set.outcome, Outcome.UPDATED);
    assert.deepEqual(set.object.status.conditions, [
      { type: "Ready", status: "True", reason: "Reconciled", message: "ok", lastTransitionTime: "2026-01-01T00:00:00Z", observedGeneration: 1 },
    ]);
    const again = await client.patchStatus(ref, setConditions({ ...ready, lastTransitionTime: new Date() }));
    assert.equal(again.outcome, Outcome.UNCHANGED);
    const removed = await client.patchStatus(ref, removeConditions("Ready"));
    assert.equal(removed.outcome, Outcome.UPDATED);
  });

  it("takes a safewrite result's object as the owner, and refuses a second controller", async () => {
    const parent = await existing(client, "owner");
    const other = await existing(client, "other-owner");
    const ref = await existing(client, "owned");
    const owned = await client.update(ref, setControllerReference((await client.update(parent, mergePatch({}))).object));
    assert.equal(owned.outcome, Outcome.UPDATED);
    const refs = owned.object.metadata["ownerReferences"] as V1OwnerReference[];
    assert.equal(refs.length, 1);
    assert.equal(refs[0]?.name, parent.name);
    assert.equal(refs[0]?.controller, true);
    assert.equal(refs[0]?.blockOwnerDeletion, true);
    assert.ok(refs[0]?.uid, "the owner's uid, from the object given");

    const otherObject = (await client.update(other, mergePatch({}))).object;
    const err = await client.update(ref, setControllerReference(otherObject)).then(
      () => assert.fail("a second controller was accepted"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof PreconditionFailedError, String(err));
    assert.equal(err.failureReason, Reason.ALREADY_OWNED);
    assert.equal(err.reason, "ALREADY_OWNED");
    assert.equal(err.advice, Retry.NEVER);
    assert.equal(err.retryable, false);

    const removed = await client.update(ref, removeOwnerReference(refs[0]!));
    assert.equal(removed.outcome, Outcome.UPDATED);
    assert.equal(removed.object.metadata["ownerReferences"], undefined, "the last reference removes the list");
  });

  it("adds a finalizer once, and its removal from a missing object is gone", async () => {
    const ref = await existing(client, "finalizer");
    const added = await client.update(ref, addFinalizer("example.com/cleanup"));
    assert.deepEqual(added.object.metadata["finalizers"], ["example.com/cleanup"]);
    assert.equal((await client.update(ref, addFinalizer("example.com/cleanup"))).outcome, Outcome.UNCHANGED);
    assert.equal((await client.update(ref, removeFinalizer("example.com/cleanup"))).gone, false);

    const missing = await client.update(configMap("finalizer-missing"), removeFinalizer("example.com/cleanup"));
    assert.equal(missing.outcome, Outcome.GONE);
    assert.equal(missing.gone, true);
  });

  it("upserts a keyed list entry in place and removes it", async () => {
    const ref = widget("list");
    await client.update(ref, mergePatch({}), { createIfMissing: { spec: { parents: [{ controllerName: "a", x: 1 }] } } });
    const upserted = await client.update<KubernetesObject & { spec: { parents: object[] } }>(
      ref,
      upsertListEntry("spec.parents", "controllerName", { controllerName: "b", ok: true }),
    );
    assert.deepEqual(upserted.object.spec.parents, [{ controllerName: "a", x: 1 }, { controllerName: "b", ok: true }]);
    const removed = await client.update<KubernetesObject & { spec: { parents: object[] } }>(
      ref,
      removeListEntry("spec.parents", "controllerName", { controllerName: "a" }),
    );
    assert.deepEqual(removed.object.spec.parents, [{ controllerName: "b", ok: true }]);
  });
});
