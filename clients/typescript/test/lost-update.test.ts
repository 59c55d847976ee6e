/** No update is lost: many concurrent writers of read-dependent increments end exact. */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import type { KubernetesObject } from "@kubernetes/client-node";
import { cel, mergePatch, Outcome } from "@safewrite/client";

import { adminClient, configMap, data, INCREMENT } from "./support.js";

// CEL increments may be committed together by the sidecar; transactions always go
// alone, one round trip per attempt, so fewer of them keep the run short.
const CEL_WRITERS = 16;
const CEL_INCREMENTS = 20;
const TX_WRITERS = 8;
const TX_INCREMENTS = 10;

const client = adminClient();
after(() => client.close());

const count = (obj: KubernetesObject): number => Number(data(obj)["n"]);

/** Runs `writers` async writers, each making `increments` calls one after another. */
async function contend(writers: number, increments: number, write: () => Promise<unknown>): Promise<void> {
  await Promise.all(
    Array.from({ length: writers }, async () => {
      for (let i = 0; i < increments; i++) {
        await write();
      }
    }),
  );
}

describe("lost updates", () => {
  it(`${CEL_WRITERS} writers x ${CEL_INCREMENTS} CEL increments end at exactly ${CEL_WRITERS * CEL_INCREMENTS}`, async () => {
    const ref = configMap("lost-cel");
    await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "0" } } });
    let largestBatch = 0;
    await contend(CEL_WRITERS, CEL_INCREMENTS, async () => {
      const res = await client.update(ref, cel(INCREMENT), { timeoutMs: 60_000 });
      largestBatch = Math.max(largestBatch, ...res.attemptRecords.map((r) => r.batchSize));
    });
    assert.ok(largestBatch >= 1, "every write reports how many requests it carried");
    const res = await client.update(ref, mergePatch({}));
    assert.equal(res.outcome, Outcome.UNCHANGED);
    assert.equal(count(res.object), CEL_WRITERS * CEL_INCREMENTS);
  });

  it(`${TX_WRITERS} writers x ${TX_INCREMENTS} transact increments end at exactly ${TX_WRITERS * TX_INCREMENTS}`, async () => {
    const ref = configMap("lost-transact");
    await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "0" } } });
    const told: number[] = [];
    await contend(TX_WRITERS, TX_INCREMENTS, async () => {
      const res = await client.transact(
        ref,
        (obj) => {
          data(obj)["n"] = String(count(obj) + 1);
        },
        { timeoutMs: 60_000, retryPolicy: { maxAttempts: 1000 } },
      );
      told.push(count(res.object));
    });
    const res = await client.update(ref, mergePatch({}));
    assert.equal(count(res.object), TX_WRITERS * TX_INCREMENTS);
    // The sidecar orders the transactions on one object: each caller is told its own
    // increment, never another's.
    told.sort((a, b) => a - b);
    assert.deepEqual(
      told,
      Array.from({ length: TX_WRITERS * TX_INCREMENTS }, (_, i) => i + 1),
    );
  });
});
