/** Every error the sidecar can be made to answer here, decoded into its class and details. */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import {
  apply,
  cel,
  Client,
  ConflictError,
  GrpcStatus,
  InvalidError,
  jsonPatch,
  mergePatch,
  NotFoundError,
  PermissionDeniedError,
  PreconditionFailedError,
  Reason,
  RequestTooLargeError,
  Retry,
  SafewriteError,
  UnavailableError,
} from "@safewrite/client";

import { adminClient, configMap, data, existing, harness, INCREMENT, namespace } from "./support.js";

const client = adminClient();
after(() => client.close());

/** Runs `call`, which must fail, and returns its SafewriteError of class `cls`. */
async function failure<T extends SafewriteError>(
  call: Promise<unknown>,
  cls: abstract new (...args: never[]) => T,
): Promise<T> {
  const err = await call.then(
    () => assert.fail("the call succeeded"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof cls, `want ${cls.name}, got ${String(err)}`);
  return err;
}

describe("errors", () => {
  it("NotFoundError for a missing object, decided by the API server", async () => {
    const err = await failure(client.update(configMap("missing"), mergePatch({ data: { a: "1" } })), NotFoundError);
    assert.equal(err.code, GrpcStatus.NOT_FOUND);
    assert.equal(err.codeName, "NOT_FOUND");
    assert.equal(err.reason, "NotFound");
    assert.equal(err.domain, "safewrite.dev");
    assert.equal(err.failureReason, Reason.API_SERVER);
    assert.equal(err.errorMetadata["http_status"], "404");
    assert.equal(err.attempts, 1);
    // The advice names this client's option, not the proto's field.
    assert.match(err.message, /the createIfMissing option/);
    assert.doesNotMatch(err.message, /create_if_missing_json/);
    assert.match(err.traceId, /^[0-9a-f]{32}$/);
    assert.equal(err.retryable, false);
    assert.match(String(err), /NotFoundError: NOT_FOUND \(NotFound\): /);
  });

  it("NotFoundError with UNKNOWN_KIND for a kind discovery does not know", async () => {
    const ref = { ...configMap("kind"), kind: "NoSuchKind" };
    const err = await failure(client.update(ref, mergePatch({})), NotFoundError);
    assert.equal(err.reason, "UNKNOWN_KIND");
    assert.equal(err.failureReason, Reason.UNKNOWN_KIND);
    assert.equal(err.failureReasonName, "UNKNOWN_KIND");
    assert.equal(err.advice, Retry.NEVER);
  });

  it("InvalidError naming the field of a hostile namespace; nothing is sent", async () => {
    const ref = { ...configMap("ns"), namespace: "acl/secrets/victim#" };
    const err = await failure(client.update(ref, mergePatch({ data: { a: "1" } })), InvalidError);
    assert.equal(err.code, GrpcStatus.INVALID_ARGUMENT);
    assert.equal(err.reason, "INVALID_REQUEST");
    assert.equal(err.failureReason, Reason.INVALID_REQUEST);
    assert.deepEqual(
      err.fieldViolations.map((v) => v.field),
      ["target.namespace"],
    );
    assert.ok(err.fieldViolations[0]?.description);
    assert.equal(err.attempts, 0);
  });

  it("InvalidError naming the expression for CEL that does not compile", async () => {
    const err = await failure(client.update(configMap("cel"), cel("object.data.(")), InvalidError);
    assert.deepEqual(
      err.fieldViolations.map((v) => v.field),
      ["mutation.cel.expression"],
    );
    assert.equal(err.attempts, 0);
  });

  it("InvalidError with INVALID_CEL for CEL that does not return a map", async () => {
    const ref = await existing(client, "celmap");
    const err = await failure(client.update(ref, cel('"not a map"')), InvalidError);
    assert.equal(err.reason, "INVALID_CEL");
    assert.equal(err.failureReason, Reason.INVALID_CEL);
    assert.deepEqual(
      err.fieldViolations.map((v) => v.field),
      ["mutation.cel.expression"],
    );
  });

  it("InvalidError with the API server's field violations for an invalid object (422)", async () => {
    const ref = await existing(client, "invalid");
    const err = await failure(client.update(ref, mergePatch({ metadata: { labels: { bad: "not a label value!" } } })), InvalidError);
    assert.equal(err.reason, "Invalid");
    assert.equal(err.failureReason, Reason.API_SERVER);
    assert.equal(err.errorMetadata["http_status"], "422");
    assert.ok(
      err.fieldViolations.some((v) => v.field.includes("metadata.labels")),
      JSON.stringify(err.fieldViolations),
    );
  });

  it("PreconditionFailedError carrying the current object when a CEL precondition is false", async () => {
    const ref = await existing(client, "precondition");
    const err = await failure(
      client.update(ref, cel(INCREMENT), { preconditions: { cel: 'object.data.n == "99"' } }),
      PreconditionFailedError,
    );
    assert.equal(err.code, GrpcStatus.FAILED_PRECONDITION);
    assert.equal(err.reason, "PRECONDITION_FAILED");
    assert.equal(err.failureReason, Reason.PRECONDITION_FAILED);
    assert.deepEqual(data(err.currentObject ?? {}), { n: "1" });
    assert.equal(err.retryable, false);
  });

  it("PreconditionFailedError when a JSON Patch test fails or its path is missing", async () => {
    const ref = await existing(client, "jsontest");
    const test = await failure(
      client.update(ref, jsonPatch([{ op: "test", path: "/data/n", value: "7" }, { op: "replace", path: "/data/n", value: "8" }])),
      PreconditionFailedError,
    );
    assert.equal(test.failureReason, Reason.PRECONDITION_FAILED);
    const missing = await failure(
      client.update(ref, jsonPatch([{ op: "replace", path: "/spec/missing", value: "x" }])),
      PreconditionFailedError,
    );
    assert.equal(missing.reason, "MUTATION_DOES_NOT_APPLY");
    assert.equal(missing.failureReason, Reason.MUTATION_DOES_NOT_APPLY);
    assert.deepEqual(data(missing.currentObject ?? {}), { n: "1" });
  });

  it("PreconditionFailedError for a uid that does not match", async () => {
    const ref = await existing(client, "uid");
    const err = await failure(
      client.update(ref, cel(INCREMENT), { preconditions: { uid: "00000000-0000-0000-0000-000000000000" } }),
      PreconditionFailedError,
    );
    assert.equal(err.failureReason, Reason.PRECONDITION_FAILED);
  });

  it("ConflictError with RESOURCE_VERSION_MISMATCH for a stale compare-and-swap", async () => {
    const ref = await existing(client, "cas");
    const err = await failure(client.update(ref, cel(INCREMENT), { preconditions: { resourceVersion: "1" } }), ConflictError);
    assert.equal(err.code, GrpcStatus.ABORTED);
    assert.equal(err.reason, "RESOURCE_VERSION_MISMATCH");
    assert.equal(err.failureReason, Reason.RESOURCE_VERSION_MISMATCH);
    assert.equal(err.retryable, false);
  });

  it("ConflictError with FIELD_MANAGER_CONFLICT when apply meets another manager's field", async () => {
    const ref = await existing(client, "ssa");
    const config = (value: string) => ({
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: ref.name },
      data: { shared: value },
    });
    await client.update(ref, apply(config("a")), { fieldManager: "manager-a" });
    const err = await failure(client.update(ref, apply(config("b")), { fieldManager: "manager-b" }), ConflictError);
    assert.equal(err.failureReason, Reason.FIELD_MANAGER_CONFLICT);
    assert.equal(err.retryable, false);
    const forced = await client.update(ref, apply(config("b"), { force: true }), { fieldManager: "manager-b" });
    assert.deepEqual(data(forced.object), { n: "1", shared: "b" });
  });

  it("PermissionDeniedError with POLICY_DENIED for a Secret (denied by default)", async () => {
    const ref = { apiVersion: "v1", kind: "Secret", namespace: namespace(), name: "ts-secret" };
    const err = await failure(client.update(ref, mergePatch({ data: { a: "MQ==" } })), PermissionDeniedError);
    assert.equal(err.code, GrpcStatus.PERMISSION_DENIED);
    assert.equal(err.reason, "POLICY_DENIED");
    assert.equal(err.failureReason, Reason.POLICY_DENIED);
  });

  it("PermissionDeniedError from the API server when the sidecar's identity may not write", async () => {
    const ref = await existing(client, "forbidden");
    const restricted = new Client(harness("SAFEWRITE_RESTRICTED_ADDR"));
    try {
      const err = await failure(restricted.update(ref, mergePatch({ data: { a: "1" } })), PermissionDeniedError);
      assert.equal(err.reason, "Forbidden");
      assert.equal(err.failureReason, Reason.API_SERVER);
      assert.equal(err.errorMetadata["http_status"], "403");
    } finally {
      restricted.close();
    }
  });

  it("RequestTooLargeError (OUT_OF_RANGE) for a request over the sidecar's limit", async () => {
    const big = "x".repeat(5 * 1024 * 1024);
    const err = await failure(client.update(configMap("big"), mergePatch({ data: { big } })), RequestTooLargeError);
    assert.equal(err.code, GrpcStatus.OUT_OF_RANGE);
    assert.equal(err.reason, "REQUEST_TOO_LARGE");
    assert.equal(err.failureReason, Reason.REQUEST_TOO_LARGE);
  });

  it("UnavailableError, retryable, when no sidecar listens at the address", async () => {
    const nowhere = new Client("127.0.0.1:1");
    try {
      const err = await failure(nowhere.update(configMap("nowhere"), mergePatch({})), UnavailableError);
      assert.equal(err.code, GrpcStatus.UNAVAILABLE);
      assert.equal(err.reason, undefined);
      assert.equal(err.failureReason, Reason.UNSPECIFIED);
      assert.equal(err.retryable, true);
    } finally {
      nowhere.close();
    }
  });

  it("a call without a mutation is refused by the sidecar, naming the field", async () => {
    const err = await failure(
      client.update(configMap("nomutation"), undefined as unknown as ReturnType<typeof cel>),
      InvalidError,
    );
    assert.deepEqual(
      err.fieldViolations.map((v) => v.field),
      ["mutation"],
    );
  });
});
