/** delete against the real sidecar: outcomes, preconditions, propagation, fences, refusals. */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import {
  Client,
  ConflictError,
  DeleteOutcome,
  mergePatch,
  NotFoundError,
  PermissionDeniedError,
  PreconditionFailedError,
  PropagationPolicy,
  Reason,
  type Fence,
  type ObjectRef,
  type SafewriteError,
} from "@safewrite/client";

import { adminClient, configMap, data, existing, harness, namespace, freshName, type Counter } from "./support.js";

const client = adminClient();
after(() => client.close());

/** Runs `call`, which must fail, and returns its error of class `cls`. */
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

/** The object is still there. */
async function kept(ref: ObjectRef): Promise<void> {
  const got = await client.get(ref);
  assert.equal(got.object.metadata.name, ref.name);
}

/**
 * The Lease `ref` was released (its holder cleared). A closed Lead stream ends its
 * campaign on the sidecar a moment later: the campaign first stops fencing, then
 * releases the Lease, so a released Lease means fenced writes under it fail now.
 */
async function released(ref: ObjectRef): Promise<void> {
  const until = Date.now() + 10_000;
  for (;;) {
    const lease = await client.get(ref);
    const spec = (lease.object as { spec?: { holderIdentity?: string } }).spec;
    if (!spec?.holderIdentity) return;
    assert.ok(Date.now() < until, `the Lease is still held by ${spec.holderIdentity}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The object is not there any more. */
async function deleted(ref: ObjectRef): Promise<void> {
  await failure(client.get(ref), NotFoundError);
}

describe("delete", () => {
  it("deletes an existing object: DELETED, with the attempt", async () => {
    const ref = await existing(client, "del");
    const res = await client.delete(ref);
    assert.equal(res.outcome, DeleteOutcome.DELETED);
    assert.equal(res.outcomeName, "DELETED");
    assert.equal(res.gone, false);
    assert.equal(res.deletionTimestamp, undefined);
    assert.equal(res.attempts, 1);
    assert.equal(res.attemptRecords[0]?.httpStatus, 200);
    assert.match(res.traceId, /^[0-9a-f]{32}$/);
    await deleted(ref);
  });

  it("answers GONE, not an error, for an object that is not there", async () => {
    const res = await client.delete(configMap("del-missing"));
    assert.equal(res.outcome, DeleteOutcome.GONE);
    assert.equal(res.gone, true);
    assert.equal(res.object, undefined);
  });

  it("answers DELETING with the deletion timestamp for an object with a finalizer; it stays until the finalizer goes", async () => {
    const ref = configMap("del-finalizer");
    await client.update(ref, mergePatch({}), { createIfMissing: { metadata: { finalizers: ["example.com/keep"] } } });
    const res = await client.delete<Counter>(ref);
    assert.equal(res.outcome, DeleteOutcome.DELETING);
    assert.ok(res.deletionTimestamp instanceof Date && !Number.isNaN(res.deletionTimestamp.getTime()));
    assert.ok(res.object?.metadata.deletionTimestamp instanceof Date, "the object in client-node's shape");
    await kept(ref);
    await client.update(ref, mergePatch({ metadata: { finalizers: null } }));
    await deleted(ref);
  });

  it("sends the propagation policy: FOREGROUND marks the object for deletion", async () => {
    const ref = await existing(client, "del-foreground");
    const res = await client.delete(ref, { propagationPolicy: PropagationPolicy.FOREGROUND });
    assert.equal(res.outcome, DeleteOutcome.DELETING);
    assert.ok(res.object?.metadata.finalizers?.includes("foregroundDeletion"));
  });

  it("deletes nothing on a dry run", async () => {
    const ref = await existing(client, "del-dry");
    const res = await client.delete(ref, { dryRun: true });
    assert.equal(res.outcome, DeleteOutcome.DELETED);
    await kept(ref);
  });

  it("deletes when the preconditions hold on the object read", async () => {
    const ref = await existing(client, "del-holds");
    const got = await client.get(ref);
    const res = await client.delete(ref, {
      preconditions: { uid: got.object.metadata.uid!, resourceVersion: got.resourceVersion, cel: 'object.data.n == "1"' },
      retryPolicy: { maxAttempts: 3, initialBackoffMs: 5 },
    });
    assert.equal(res.outcome, DeleteOutcome.DELETED);
    await deleted(ref);
  });

  it("a uid that is not the object's fails with PreconditionFailedError, and the object is kept", async () => {
    const ref = await existing(client, "del-uid");
    const err = await failure(client.delete(ref, { preconditions: { uid: "00000000-0000-0000-0000-000000000000" } }), PreconditionFailedError);
    assert.equal(err.failureReason, Reason.PRECONDITION_FAILED);
    assert.equal(err.retryable, false);
    await kept(ref);
  });

  it("a CEL condition false on the object fails with PreconditionFailedError carrying the current object, which is kept", async () => {
    const ref = await existing(client, "del-cel", { n: "7" });
    const err = await failure(client.delete(ref, { preconditions: { cel: 'object.data.n == "0"' } }), PreconditionFailedError);
    assert.equal(err.failureReason, Reason.PRECONDITION_FAILED);
    assert.ok(err.currentObject !== undefined);
    assert.equal(data(err.currentObject)["n"], "7");
    await kept(ref);
  });

  it("a resourceVersion that is not the object's fails with ConflictError RESOURCE_VERSION_MISMATCH, not retried", async () => {
    const ref = await existing(client, "del-rv");
    const err = await failure(client.delete(ref, { preconditions: { resourceVersion: "1" } }), ConflictError);
    assert.equal(err.failureReason, Reason.RESOURCE_VERSION_MISMATCH);
    await kept(ref);
  });

  it("fenced: the leader's fenced client deletes; once its campaign ended, the same fence fails with NOT_LEADER and the object is kept", { timeout: 20_000 }, async () => {
    const lease = { apiVersion: "coordination.k8s.io/v1", kind: "Lease", namespace: namespace(), name: freshName("del-lease") };
    const leadership = client.lead({ namespace: lease.namespace, name: lease.name, leaseDurationMs: 15_000, retryPeriodMs: 200 });
    const first = await existing(client, "del-fenced");
    const second = await existing(client, "del-fenced");
    let fence: Fence | undefined;
    await leadership.whileLeading(async (leader) => {
      fence = leader.fence;
      const res = await leader.client.delete(first);
      assert.equal(res.outcome, DeleteOutcome.DELETED);
      leadership.close();
    });
    await deleted(first);
    await released(lease);
    assert.ok(fence !== undefined);
    const err = await failure(client.delete(second, { fence }), PreconditionFailedError);
    assert.equal(err.failureReason, Reason.NOT_LEADER);
    assert.equal(err.retryable, false);
    await kept(second);
  });

  it("fails with PermissionDeniedError when the API server refuses the sidecar's identity, and the object is kept", async () => {
    const ref = await existing(client, "del-denied");
    const restricted = new Client(harness("SAFEWRITE_RESTRICTED_ADDR"), { timeoutMs: 30_000 });
    try {
      const err = await failure(restricted.delete(ref), PermissionDeniedError);
      assert.equal(err.reason, "Forbidden");
    } finally {
      restricted.close();
    }
    await kept(ref);
  });
});
