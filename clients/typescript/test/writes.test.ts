/** update and patchStatus against the real sidecar: outcomes, mutations and options. */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import { apply, cel, jsonPatch, mergePatch, Outcome } from "@safewrite/client";

import { adminClient, configMap, data, INCREMENT, widget, type Widget } from "./support.js";

const client = adminClient();
after(() => client.close());

describe("update", () => {
  it("creates a missing object from createIfMissing with the mutation applied", async () => {
    const ref = configMap("create");
    const res = await client.update(ref, mergePatch({ data: { a: "1" } }), { createIfMissing: { data: { n: "0" } } });
    assert.equal(res.outcome, Outcome.CREATED);
    assert.deepEqual(data(res.object), { n: "0", a: "1" });
    assert.equal((res.object["metadata"] as { name: string }).name, ref.name);
    assert.ok(res.resourceVersion);
    assert.equal(res.attempts, 1);
    assert.equal(res.attemptRecords.length, 1);
    assert.equal(res.alreadyApplied, false);
    assert.match(res.traceId, /^[0-9a-f]{32}$/);
  });

  it("updates with a CEL increment and reports the attempt", async () => {
    const ref = configMap("cel");
    await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "41" } } });
    const res = await client.update(ref, cel(INCREMENT));
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.equal(data(res.object)["n"], "42");
    const [record] = res.attemptRecords;
    assert.equal(record?.number, 1);
    assert.ok(record?.resourceVersionRead);
    assert.equal(record?.httpStatus, 200);
  });

  it("answers UNCHANGED and writes nothing when the mutation changes nothing", async () => {
    const ref = configMap("unchanged");
    const created = await client.update(ref, mergePatch("{}"), { createIfMissing: { data: { n: "0" } } });
    const res = await client.update(ref, mergePatch({ data: { n: "0" } }));
    assert.equal(res.outcome, Outcome.UNCHANGED);
    assert.equal(res.resourceVersion, created.resourceVersion);
  });

  it("applies a JSON Patch given as operations", async () => {
    const ref = configMap("jsonpatch");
    await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "1" } } });
    const res = await client.update(
      ref,
      jsonPatch([
        { op: "test", path: "/data/n", value: "1" },
        { op: "add", path: "/data/m", value: "2" },
      ]),
    );
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.deepEqual(data(res.object), { n: "1", m: "2" });
  });

  it("applies a server-side apply configuration with a field manager", async () => {
    const ref = configMap("apply");
    await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "1" } } });
    const config = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: ref.name }, data: { owned: "yes" } };
    const res = await client.update(ref, apply(config), { fieldManager: "ts-test" });
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.deepEqual(data(res.object), { n: "1", owned: "yes" });
    const again = await client.update(ref, apply(config), { fieldManager: "ts-test" });
    assert.equal(again.outcome, Outcome.UNCHANGED);
  });

  it("persists nothing on a dry run", async () => {
    const ref = configMap("dryrun");
    await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "0" } } });
    const dry = await client.update(ref, mergePatch({ data: { n: "9" } }), { dryRun: true });
    assert.equal(dry.outcome, Outcome.UPDATED);
    assert.equal(data(dry.object)["n"], "9");
    const res = await client.update(ref, mergePatch({ data: { n: "0" } }));
    assert.equal(res.outcome, Outcome.UNCHANGED);
  });

  it("applies a keyed change once and answers alreadyApplied after", async () => {
    const ref = configMap("key");
    await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "0" } } });
    const key = `k-${ref.name}`;
    const first = await client.update(ref, cel(INCREMENT), { idempotencyKey: key });
    assert.equal(first.outcome, Outcome.UPDATED);
    assert.equal(first.alreadyApplied, false);
    const second = await client.update(ref, cel(INCREMENT), { idempotencyKey: key });
    assert.equal(second.outcome, Outcome.UPDATED);
    assert.equal(second.alreadyApplied, true);
    assert.equal(data(second.object)["n"], "1");
  });

  it("takes preconditions that hold, a retry policy and writeAlone", async () => {
    const ref = configMap("options");
    const created = await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "1" } } });
    const uid = (created.object["metadata"] as { uid: string }).uid;
    const res = await client.update(ref, cel(INCREMENT), {
      preconditions: { uid, resourceVersion: created.resourceVersion, cel: 'object.data.n == "1"' },
      retryPolicy: { maxAttempts: 3, initialBackoffMs: 5, maxBackoffMs: 50 },
      writeAlone: true,
      fieldManager: "ts-options",
    });
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.equal(res.attemptRecords[0]?.batchSize, 1, "a write made alone carries one request");
    const fields = res.object.metadata["managedFields"] as { manager: string }[];
    assert.ok(fields.some((f) => f.manager === "ts-options"), "the field manager is recorded");
  });
});

describe("patchStatus", () => {
  it("writes only the status of a kind with a status subresource", async () => {
    const ref = widget("status");
    await client.update(ref, mergePatch({}), { createIfMissing: { spec: { size: 1 } } });
    const res = await client.patchStatus<Widget>(ref, mergePatch({ spec: { size: 2 }, status: { phase: "Ready" } }));
    assert.equal(res.outcome, Outcome.UPDATED);
    assert.deepEqual(res.object.spec, { size: 1 });
    assert.deepEqual(res.object.status, { phase: "Ready" });
    const again = await client.patchStatus(ref, cel('{"status": {"phase": "Ready"}}'));
    assert.equal(again.outcome, Outcome.UNCHANGED);
  });

  it("leaves status alone on update", async () => {
    const ref = widget("nostatus");
    await client.update(ref, mergePatch({}), { createIfMissing: { spec: { size: 1 } } });
    const res = await client.update(ref, mergePatch({ status: { phase: "Ignored" } }));
    assert.equal(res.outcome, Outcome.UNCHANGED);
  });
});
