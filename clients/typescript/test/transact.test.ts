/** transact and the Transact protocol against the real sidecar. */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import type { KubernetesObject } from "@kubernetes/client-node";
import {
  Abort,
  abort,
  cel,
  ConflictError,
  InvalidError,
  mergePatch,
  Outcome,
  Reason,
} from "@safewrite/client";

import { adminClient, configMap, data, existing, INCREMENT, widget, type Widget } from "./support.js";

const client = adminClient();
const other = adminClient(); // the second writer, on a connection of its own
after(() => {
  client.close();
  other.close();
});

describe("transact", () => {
  it("writes the object the function changed in place", async () => {
    const ref = await existing(client, "inplace");
    const res = await client.transact(ref, (obj) => {
      data(obj)["n"] = String(Number(data(obj)["n"]) + 1);
    });
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.equal(data(res.object)["n"], "2");
    assert.equal(res.attempts, 1);
  });

  it("writes a new object returned by an async function", async () => {
    const ref = await existing(client, "returned");
    const res = await client.transact(ref, async (obj, fresh) => {
      assert.equal(fresh.attempt, 1);
      assert.equal(fresh.creating, false);
      assert.equal(fresh.resourceVersion, (obj["metadata"] as { resourceVersion: string }).resourceVersion);
      await new Promise((resolve) => setImmediate(resolve));
      return { ...obj, data: { n: "10" } };
    });
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.deepEqual(data(res.object), { n: "10" });
  });

  it("writes a returned mutation", async () => {
    const ref = await existing(client, "mutation");
    const res = await client.transact(ref, () => cel(INCREMENT));
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.equal(data(res.object)["n"], "2");
  });

  it("answers UNCHANGED for a proposal equal to the fresh object", async () => {
    const ref = await existing(client, "same");
    const res = await client.transact(ref, (obj) => obj);
    assert.equal(res.outcome, Outcome.UNCHANGED);
  });

  it("aborts without writing, returned or thrown", async () => {
    const ref = await existing(client, "abort");
    const returned = await client.transact(ref, () => abort("not needed"));
    assert.equal(returned.outcome, Outcome.ABORTED);
    assert.equal(data(returned.object)["n"], "1");
    const thrown = await client.transact(ref, () => {
      throw new Abort("not needed either");
    });
    assert.equal(thrown.outcome, Outcome.ABORTED);
  });

  it("rethrows the function's own error as it is and writes nothing", async () => {
    const ref = await existing(client, "throws");
    const boom = new Error("boom");
    await assert.rejects(
      client.transact(ref, (obj) => {
        data(obj)["n"] = "666";
        throw boom;
      }),
      (err) => err === boom,
    );
    const res = await client.update(ref, mergePatch({ data: { n: "1" } }));
    assert.equal(res.outcome, Outcome.UNCHANGED, "the object is as it was");
  });

  it("retries with the next fresh object when a second writer changes it in between", async () => {
    const ref = await existing(client, "conflict");
    const seen: string[] = [];
    const res = await client.transact(ref, async (obj, fresh) => {
      seen.push(`${fresh.attempt}:${data(obj)["n"]}`);
      if (fresh.attempt === 1) {
        // Between the fresh object and the proposal, another writer changes it.
        await other.update(ref, cel(INCREMENT));
      }
      data(obj)["n"] = String(Number(data(obj)["n"]) * 10);
    });
    assert.deepEqual(seen, ["1:1", "2:2"]);
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.equal(data(res.object)["n"], "20", "the second writer's change is not lost");
    assert.equal(res.attempts, 2);
    assert.equal(res.attemptRecords[0]?.httpStatus, 409);
    assert.equal(res.attemptRecords[0]?.reason, "Conflict");
  });

  it("fails with ConflictError at once under requeue when a second writer intervenes", async () => {
    const ref = await existing(client, "requeue");
    const err = await client
      .transact(
        ref,
        async (obj) => {
          await other.update(ref, cel(INCREMENT));
          data(obj)["n"] = "100";
        },
        { retryPolicy: { requeue: true } },
      )
      .then(
        () => assert.fail("succeeded"),
        (e: unknown) => e,
      );
    assert.ok(err instanceof ConflictError, String(err));
    assert.equal(err.reason, "Conflict");
    assert.equal(err.failureReason, Reason.API_SERVER);
    assert.equal(err.attempts, 1);
    assert.equal(err.retryable, true, "a conflict may be requeued");
  });

  it("creates a missing object from createIfMissing", async () => {
    const ref = configMap("tcreate");
    const res = await client.transact(
      ref,
      (obj, fresh) => {
        assert.equal(fresh.creating, true);
        data(obj)["n"] = "1";
      },
      { createIfMissing: { data: { n: "0" } } },
    );
    assert.equal(res.outcome, Outcome.CREATED);
    assert.equal(data(res.object)["n"], "1");
  });

  it("writes the status subresource with status: true", async () => {
    const ref = widget("tstatus");
    await client.update(ref, mergePatch({}), { createIfMissing: { spec: { size: 3 } } });
    const res = await client.transact<Widget>(
      ref,
      (obj) => {
        obj.status = { capacity: obj.spec.size * 10 };
      },
      { status: true },
    );
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.deepEqual(res.object.status, { capacity: 30 });
  });

  it("applies a keyed transaction once", async () => {
    const ref = await existing(client, "tkey");
    const key = `k-${ref.name}`;
    let calls = 0;
    const increment = (obj: KubernetesObject) => {
      calls += 1;
      data(obj)["n"] = String(Number(data(obj)["n"]) + 1);
    };
    const first = await client.transact(ref, increment, { idempotencyKey: key });
    assert.equal(first.alreadyApplied, false);
    const second = await client.transact(ref, increment, { idempotencyKey: key });
    assert.equal(second.alreadyApplied, true);
    assert.equal(data(second.object)["n"], "2");
    assert.equal(calls, 1, "the function is not called when the key is already applied");
  });

  it("drives the protocol by hand: a proposal for another attempt is refused", async () => {
    const ref = await existing(client, "manual");
    const tx = client.beginTransaction(ref);
    const event = await tx.next();
    assert.ok(event.fresh);
    tx.propose(event.fresh.attempt + 6, mergePatch({ data: { n: "2" } }));
    await assert.rejects(tx.next(), (err: unknown) => {
      assert.ok(err instanceof InvalidError);
      assert.equal(err.reason, "INVALID_REQUEST");
      return true;
    });
    const res = await client.update(ref, mergePatch({ data: { n: "1" } }));
    assert.equal(res.outcome, Outcome.UNCHANGED, "nothing was written");
  });
});
