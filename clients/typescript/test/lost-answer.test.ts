/**
 * Writes whose answer is lost after the API server committed them, against the real
 * sidecar at SAFEWRITE_LOSSY_ADDR: tests/harness/with-sidecar.sh puts a fault proxy
 * between it and the API server that resets every write's stream once the API server
 * has answered. Objects are created and read through the normal sidecar, and each call
 * through the lossy one writes an object that sidecar has not touched before: its first
 * write to an object reads it live, so the change it sends is valid and is committed.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import type { KubernetesObject } from "@kubernetes/client-node";
import {
  cel,
  Client,
  GrpcStatus,
  mergePatch,
  Outcome,
  OutcomeUnknownError,
  Reason,
  Retry,
  type ObjectRef,
} from "@safewrite/client";

import { adminClient, data, existing, harness, INCREMENT } from "./support.js";

const client = adminClient();
const lossy = new Client(harness("SAFEWRITE_LOSSY_ADDR"), { timeoutMs: 30_000 });
after(() => {
  client.close();
  lossy.close();
});

/** data.n of the object as it is now. */
async function current(ref: ObjectRef): Promise<string | undefined> {
  const res = await client.update(ref, mergePatch({}));
  assert.equal(res.outcome, Outcome.UNCHANGED);
  return data(res.object)["n"];
}

function bump(obj: KubernetesObject): void {
  const counter = data(obj);
  counter["n"] = String(Number(counter["n"]) + 1);
}

/** The error of a call without a key whose write's answer was lost. */
function lostUnkeyed(err: unknown): true {
  assert.ok(err instanceof OutcomeUnknownError, String(err));
  assert.equal(err.code, GrpcStatus.UNKNOWN);
  assert.equal(err.reason, "WRITE_OUTCOME_UNKNOWN");
  assert.equal(err.failureReason, Reason.WRITE_OUTCOME_UNKNOWN);
  assert.equal(err.advice, Retry.WITH_IDEMPOTENCY_KEY);
  // The change may have been applied: the same call sent again could apply it twice.
  assert.equal(err.idempotent, false);
  assert.equal(err.retryable, false);
  assert.match(err.message, /idempotency/, "the sidecar says how to make it retryable");
  assert.equal(err.attemptRecords.length, 1);
  assert.equal(err.attemptRecords[0]?.httpStatus, 0);
  return true;
}

describe("a write whose answer is lost", () => {
  it("without an idempotency key: OutcomeUnknownError, not retryable, and the change was applied", async () => {
    const updated = await existing(client, "lost", { n: "0" });
    await assert.rejects(lossy.update(updated, cel(INCREMENT)), lostUnkeyed);
    // The API server committed the increment; only its answer was lost.
    assert.equal(await current(updated), "1");

    const transacted = await existing(client, "lost-tx", { n: "0" });
    await assert.rejects(lossy.transact(transacted, bump), lostUnkeyed);
    assert.equal(await current(transacted), "1");
  });

  it("with an idempotency key: the sidecar's retry finds the key, and the change is made once", async () => {
    const ref = await existing(client, "lost-key", { n: "0" });
    const key = `k-${ref.name}`;
    const res = await lossy.update(ref, cel(INCREMENT), { idempotencyKey: key });
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.equal(res.alreadyApplied, true);
    assert.equal(data(res.object)["n"], "1");
    assert.equal(res.attempts, 2, "the lost write, then the read that found the key");
    assert.equal(res.attemptRecords[0]?.httpStatus, 0);
    assert.equal(await current(ref), "1");
    // The same change with the same key, through the normal sidecar: made once.
    const again = await client.update(ref, cel(INCREMENT), { idempotencyKey: key });
    assert.equal(again.alreadyApplied, true);
    assert.equal(data(again.object)["n"], "1");

    let calls = 0;
    const other = await existing(client, "lost-key-tx", { n: "0" });
    const transacted = await lossy.transact(
      other,
      (obj) => {
        calls++;
        bump(obj);
      },
      { idempotencyKey: `${key}-t` },
    );
    assert.equal(transacted.outcome, Outcome.UPDATED);
    assert.equal(transacted.alreadyApplied, true);
    assert.equal(calls, 1, "the retry found the key and did not call the function again");
    assert.equal(await current(other), "1");
  });
});
