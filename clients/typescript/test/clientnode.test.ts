/**
 * @kubernetes/client-node's types in and out, against the real API server (listed through
 * client-node with the harness's admin kubeconfig) and the real sidecar: objects come back
 * in client-node's shape (date-times as Dates), go back to client-node as they are, and a
 * listed object's ref is refOf(item).
 */
import assert from "node:assert/strict";
import { dirname } from "node:path";
import { after, describe, it } from "node:test";

import { CoreV1Api, KubeConfig, type KubernetesObject, type V1ConfigMap, type V1Service } from "@kubernetes/client-node";
import { cel, mergePatch, Outcome, refOf, setConditions, type Stored } from "@safewrite/client";

import { adminClient, configMap, harness, INCREMENT, namespace, widget, type Widget } from "./support.js";

const client = adminClient();
after(() => client.close());

/** client-node's CoreV1Api on the harness's API server, as the admin. */
function coreV1(): CoreV1Api {
  const kc = new KubeConfig();
  kc.loadFromFile(`${dirname(harness("SAFEWRITE_CP_ENV"))}/admin.kubeconfig`);
  return kc.makeApiClient(CoreV1Api);
}

describe("client-node objects", () => {
  it("come back in client-node's shape: metadata's date-times are Dates", async () => {
    const ref = configMap("cn-dates");
    const res = await client.update<V1ConfigMap>(ref, mergePatch({}), { createIfMissing: { data: { a: "1" } } });
    const created = res.object.metadata.creationTimestamp;
    assert.ok(created instanceof Date, `creationTimestamp is a Date, not ${typeof created}`);
    assert.ok(Math.abs(created.getTime() - Date.now()) < 120_000);
    assert.ok(res.object.metadata.managedFields?.every((f) => f.time instanceof Date));
    assert.equal(res.object.data?.["a"], "1");
  });

  it("of a built-in kind have their own date-times as Dates too (a Service's condition)", async () => {
    const ref = { apiVersion: "v1", kind: "Service", namespace: namespace(), name: configMap("cn-svc").name };
    const spec = { type: "ExternalName", externalName: "example.com" };
    await client.update(ref, mergePatch({}), { createIfMissing: { spec } });
    const ready = { type: "Ready", status: "True", reason: "Test", lastTransitionTime: new Date("2026-01-02T03:04:05Z") };
    const res = await client.patchStatus<V1Service>(ref, setConditions(ready));
    const condition = res.object.status?.conditions?.[0];
    assert.ok(condition?.lastTransitionTime instanceof Date);
    assert.equal(condition.lastTransitionTime.toISOString(), "2026-01-02T03:04:05.000Z");
    // Set again, as read: the same text goes back, so nothing is written.
    const again = await client.patchStatus<V1Service>(ref, setConditions(condition));
    assert.equal(again.outcome, Outcome.UNCHANGED);
  });

  it("of a custom kind have metadata's date-times as Dates and the rest as the API server wrote it", async () => {
    const ref = widget("cn-widget");
    const res = await client.update<Widget>(ref, mergePatch({}), { createIfMissing: { spec: { size: 2 } } });
    assert.ok(res.object.metadata.creationTimestamp instanceof Date);
    assert.deepEqual(res.object.spec, { size: 2 });
  });

  it("a transact function that changes nothing of a client-node object writes nothing: its Dates go back as they came", async () => {
    const ref = configMap("cn-unchanged");
    await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "1" } } });
    const res = await client.transact<V1ConfigMap>(ref, (obj) => {
      assert.ok(obj.metadata.creationTimestamp instanceof Date);
    });
    assert.equal(res.outcome, Outcome.UNCHANGED);
    const changed = await client.transact<V1ConfigMap>(ref, (obj) => {
      obj.data = { ...obj.data, n: "2" };
    });
    assert.equal(changed.outcome, Outcome.UPDATED);
    assert.deepEqual(changed.object.data, { n: "2" });
  });

  it("a listed object's ref is refOf(item, { apiVersion, kind }), and a result goes back to client-node as it is", async () => {
    const ref = configMap("cn-list");
    await client.update(ref, mergePatch({}), { createIfMissing: { data: { n: "1" } } });
    const api = coreV1();
    const list = await api.listNamespacedConfigMap({ namespace: namespace() });
    const item = list.items.find((cm) => cm.metadata?.name === ref.name);
    assert.ok(item, "client-node lists the ConfigMap");
    assert.equal(item.apiVersion, undefined, "a list's items carry no apiVersion");
    assert.throws(() => refOf(item), TypeError);
    const target = refOf(item, { apiVersion: "v1", kind: "ConfigMap" });
    assert.deepEqual(target, ref);

    const res = await client.update<V1ConfigMap>(target, cel(INCREMENT));
    assert.equal(res.object.data?.["n"], "2");
    assert.deepEqual(refOf(res.object), ref, "a result's object carries its apiVersion and kind");
    // The result is a V1ConfigMap: client-node takes it (and its Dates) as it is.
    const replaced = await api.replaceNamespacedConfigMap({
      name: ref.name,
      namespace: namespace(),
      body: { ...res.object, data: { ...res.object.data, n: "3" } },
    });
    assert.equal(replaced.data?.["n"], "3");
    const read = await client.get<V1ConfigMap>(refOf(replaced, { apiVersion: "v1", kind: "ConfigMap" }));
    assert.equal(read.object.data?.["n"], "3");
    assert.equal(read.object.metadata.creationTimestamp?.getTime(), replaced.metadata?.creationTimestamp?.getTime());
  });
});

describe("refOf", () => {
  it("takes apiVersion, kind, namespace and name from any client-node object", () => {
    const cm: V1ConfigMap = { apiVersion: "v1", kind: "ConfigMap", metadata: { namespace: "ns", name: "a" } };
    assert.deepEqual(refOf(cm), { apiVersion: "v1", kind: "ConfigMap", namespace: "ns", name: "a" });
    const node: KubernetesObject = { apiVersion: "v1", kind: "Node", metadata: { name: "n1" } };
    assert.deepEqual(refOf(node), { apiVersion: "v1", kind: "Node", name: "n1" });
  });

  it("refuses an object without a name, or without apiVersion and kind when none are given", () => {
    assert.throws(() => refOf({ apiVersion: "v1", kind: "ConfigMap", metadata: {} }), /metadata\.name/);
    assert.throws(() => refOf({ metadata: { name: "a" } }), /apiVersion or kind/);
    assert.throws(() => refOf(null as unknown as KubernetesObject), TypeError);
  });

  it("types a result's object as the call's type parameter, assignable to client-node's", () => {
    const accept = (cm: V1ConfigMap): string | undefined => cm.metadata?.name;
    const stored: Stored<V1ConfigMap> = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x" } };
    assert.equal(accept(stored), "x");
  });
});
