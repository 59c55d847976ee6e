/**
 * Read your own writes: the GetRequest `client.get` builds (read back by a recording
 * gRPC server on loopback, which also answers it), what it refuses before sending, how
 * its errors are advised, and write-then-get against the real sidecar.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { create, fromBinary, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import {
  Metadata,
  Server,
  ServerCredentials,
  status as GrpcStatus,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServiceDefinition,
} from "@grpc/grpc-js";
import type { V1ConfigMap } from "@kubernetes/client-node";
import {
  cel,
  Client,
  DeadlineExceededError,
  InvalidError,
  mergePatch,
  NotFoundError,
  Outcome,
  PermissionDeniedError,
  Reason,
  Retry,
  type GetResult,
  type Result,
} from "@safewrite/client";
import { GetRequestSchema, GetResponseSchema, type GetRequest, type GetResponse } from "#gen/safewrite/v1/writer_pb";

import { adminClient, configMap, existing, harness, INCREMENT, namespace, type Counter } from "./support.js";

/** A gRPC server on loopback serving Get: records each request; answers the name "slow" with DEADLINE_EXCEEDED. */
class Recorder {
  /** The requests received, as proto3 JSON. */
  readonly requests: JsonValue[] = [];
  readonly #server = new Server();
  address = "";

  async start(): Promise<void> {
    const service: ServiceDefinition = {
      Get: {
        path: "/safewrite.v1.WriterService/Get",
        requestStream: false,
        responseStream: false,
        requestSerialize: () => Buffer.alloc(0),
        requestDeserialize: (bytes: Buffer) => fromBinary(GetRequestSchema, bytes),
        responseSerialize: (message: GetResponse) => Buffer.from(toBinary(GetResponseSchema, message)),
        responseDeserialize: () => undefined,
      },
    };
    const get = (call: ServerUnaryCall<GetRequest, GetResponse>, done: sendUnaryData<GetResponse>): void => {
      this.requests.push(toJson(GetRequestSchema, call.request));
      if (call.request.target?.name === "slow") {
        // No details: the advice is the code's (DEADLINE_EXCEEDED: only with a key).
        done({ code: GrpcStatus.DEADLINE_EXCEEDED, details: "deadline passed", metadata: new Metadata() });
        return;
      }
      const object = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c", resourceVersion: "42" }, data: { n: "7" } };
      done(
        null,
        create(GetResponseSchema, {
          objectJson: JSON.stringify(object),
          resourceVersion: "42",
          remembered: true,
          traceId: "0af7651916cd43dd8448eb211c80319c",
        }),
      );
    };
    this.#server.addService(service, { Get: get });
    const port = await new Promise<number>((resolve, reject) =>
      this.#server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    this.address = `127.0.0.1:${port}`;
  }

  stop(): void {
    this.#server.forceShutdown();
  }
}

describe("the GetRequest sent", () => {
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
  const ref = { apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "c" };
  const target = { apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "c" };

  it("carries the target, and as the minimum the resourceVersion of atLeast or minResourceVersion", async () => {
    recorder.requests.length = 0;
    const written = { resourceVersion: "41" } as Result; // what a write resolved with
    await client.get(ref, { atLeast: written });
    const got = await client.get(ref, { minResourceVersion: "40" });
    await client.get(ref, { atLeast: got }); // an earlier get's result works the same
    await client.get({ apiVersion: "v1", kind: "Namespace", name: "n" });
    await client.get(ref, { minResourceVersion: "" });
    assert.deepEqual(recorder.requests, [
      { target, minResourceVersion: "41" },
      { target, minResourceVersion: "40" },
      { target, minResourceVersion: "42" },
      { target: { apiVersion: "v1", kind: "Namespace", name: "n" } }, // cluster-scoped, live
      { target }, // empty: live
    ]);
  });

  it("answers the object, its resourceVersion, whether it was remembered and the trace id", async () => {
    const got: GetResult<Counter> = await client.get<Counter>(ref);
    assert.deepEqual(got, {
      object: { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c", resourceVersion: "42" }, data: { n: "7" } },
      resourceVersion: "42",
      remembered: true,
      traceId: "0af7651916cd43dd8448eb211c80319c",
    });
    assert.equal(got.object.data.n, "7");
  });

  it("no request leaves when both atLeast and minResourceVersion are given, or the minimum is not a string", async () => {
    const sent = recorder.requests.length;
    await assert.rejects(client.get(ref, { atLeast: { resourceVersion: "1" }, minResourceVersion: "1" }), {
      name: "TypeError",
      message: "get: give atLeast or minResourceVersion, not both",
    });
    await assert.rejects(client.get(ref, { atLeast: { resourceVersion: 7 as unknown as string } }), {
      name: "TypeError",
      message: "get: atLeast.resourceVersion must be a string, not number",
    });
    assert.equal(recorder.requests.length, sent);
  });

  it("a failure is a SafewriteError whose advice counts a get as idempotent: it writes nothing", async () => {
    const err = await client.get({ ...ref, name: "slow" }).then(
      () => assert.fail("answered"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof DeadlineExceededError, String(err));
    assert.equal(err.failureReason, Reason.UNSPECIFIED);
    assert.equal(err.advice, Retry.WITH_IDEMPOTENCY_KEY, "the code's advice, as for any call");
    assert.equal(err.idempotent, true);
    assert.equal(err.retryable, true, "nothing can have been written twice");
  });
});

describe("read your own writes, against the sidecar", () => {
  const client = adminClient();
  after(() => client.close());

  it("a get at least as new as your write answers that write, from the sidecar's copy", async () => {
    const ref = await existing(client, "get-own");
    const written = await client.update<Counter>(ref, cel(INCREMENT));
    assert.equal(written.outcome, Outcome.UPDATED);
    const got = await client.get<V1ConfigMap>(ref, { atLeast: written });
    assert.equal(got.remembered, true);
    assert.equal(got.resourceVersion, written.resourceVersion);
    assert.equal(got.object.metadata.resourceVersion, written.resourceVersion);
    assert.equal(got.object.data?.["n"], "2"); // client-node's V1ConfigMap types the object
    assert.deepEqual(got.object, written.object);
    assert.match(got.traceId, /^[0-9a-f]{32}$/);
  });

  it("without a minimum it reads live, and a live read is remembered for the next get", async () => {
    const ref = await existing(client, "get-live", { n: "5" });
    const live = await client.get<Counter>(ref);
    assert.equal(live.remembered, false);
    assert.equal(live.object.data.n, "5");
    const again = await client.get(ref, { atLeast: live });
    assert.equal(again.remembered, true);
    assert.equal(again.resourceVersion, live.resourceVersion);
  });

  it("a sidecar that did not make the write reads live, at least as new as it", async () => {
    const other = new Client(harness("SAFEWRITE_LOSSY_ADDR"), { timeoutMs: 30_000 });
    try {
      const ref = await existing(client, "get-other");
      const written = await client.update<Counter>(ref, mergePatch({ data: { n: "9" } }));
      const got = await other.get<Counter>(ref, { atLeast: written });
      assert.equal(got.remembered, false);
      assert.ok(BigInt(got.resourceVersion) >= BigInt(written.resourceVersion));
      assert.equal(got.object.data.n, "9");
    } finally {
      other.close();
    }
  });

  it("a missing object is a NotFoundError, never to be retried as it is", async () => {
    const err = await client.get(configMap("get-missing")).then(
      () => assert.fail("found"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof NotFoundError, String(err));
    assert.equal(err.reason, "NotFound");
    assert.equal(err.failureReason, Reason.API_SERVER);
    assert.equal(err.advice, Retry.NEVER);
    assert.equal(err.retryable, false);
  });

  it("a Secret is refused by the sidecar's policy", async () => {
    const ref = { apiVersion: "v1", kind: "Secret", namespace: namespace(), name: "any" };
    const err = await client.get(ref).then(
      () => assert.fail("read"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof PermissionDeniedError, String(err));
    assert.equal(err.reason, "POLICY_DENIED");
    assert.equal(err.retryable, false);
  });

  it("a minimum the sidecar cannot send is an InvalidError naming min_resource_version", async () => {
    const ref = await existing(client, "get-hostile");
    const err = await client.get(ref, { minResourceVersion: "1&watch=true" }).then(
      () => assert.fail("read"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof InvalidError, String(err));
    assert.equal(err.failureReason, Reason.INVALID_REQUEST);
    assert.deepEqual(err.fieldViolations.map((v) => v.field), ["min_resource_version"]);
    assert.equal(err.retryable, false);
  });
});
