/** What the tests share: the harness's environment, fresh names, a client per test file. */
import { randomBytes } from "node:crypto";

import { create } from "@bufbuild/protobuf";
import { nestedTypes } from "@bufbuild/protobuf/reflect";
import type { KubernetesObject, V1ConfigMap } from "@kubernetes/client-node";
import { Client, mergePatch, type ObjectRef } from "@safewrite/client";
import {
  CapabilitiesResponseSchema,
  file_safewrite_v1_writer,
  WriterService,
  type CapabilitiesResponse,
} from "#gen/safewrite/v1/writer_pb";

/** A variable exported by tests/harness/with-sidecar.sh; a test that needs it fails without it. */
export function harness(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run the tests through test.sh (tests/harness/with-sidecar.sh)`);
  }
  return value;
}

/** The namespace the harness created for this run. */
export const namespace = (): string => harness("SAFEWRITE_NAMESPACE");

/** A name no other test uses. */
export function freshName(prefix: string): string {
  return `ts-${prefix}-${randomBytes(4).toString("hex")}`;
}

/** A ConfigMap in the run's namespace, with a fresh name. */
export function configMap(prefix: string): ObjectRef {
  return { apiVersion: "v1", kind: "ConfigMap", namespace: namespace(), name: freshName(prefix) };
}

/** A Widget (the harness's CRD, with a status subresource) in the run's namespace. */
export function widget(prefix: string): ObjectRef {
  return { apiVersion: "test.safewrite.dev/v1", kind: "Widget", namespace: namespace(), name: freshName(prefix) };
}

/** A client of the admin sidecar (SAFEWRITE_ADDRESS), closed by the caller. */
export function adminClient(): Client {
  return new Client(harness("SAFEWRITE_ADDRESS"), { timeoutMs: 30_000 });
}

/**
 * The harness's two peer sidecars (SAFEWRITE_PEER_ADDRS, SAFEWRITE_PEER_PIDS), admin
 * sidecars of their own as two pods' sidecars: their addresses and process ids.
 */
export function peers(): { address: string; pid: number }[] {
  const addresses = harness("SAFEWRITE_PEER_ADDRS").split(",");
  const pids = harness("SAFEWRITE_PEER_PIDS").split(",").map(Number);
  if (addresses.length !== 2 || pids.length !== 2 || !pids.every((pid) => Number.isInteger(pid) && pid > 0)) {
    throw new Error("SAFEWRITE_PEER_ADDRS and SAFEWRITE_PEER_PIDS must name two sidecars");
  }
  return addresses.map((address, i) => ({ address, pid: pids[i]! }));
}

/** Waits until `condition` holds, checking every 20 ms; fails after `timeoutMs`, saying `what`. */
export async function until(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > end) {
      throw new Error(`not within ${timeoutMs} ms: ${what}`);
    }
    await sleep(20);
  }
}

/** The CEL increment of data.n used across the tests. */
export const INCREMENT = '{"data": {"n": string(int(object.data.n) + 1)}}';

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The package's directory (the compiled tests run from build/test). */
export const packageRoot: string = new URL("../../", import.meta.url).pathname;

/** A ConfigMap created through `client` with `data` (by default n=1); its ref. */
export async function existing(
  client: Client,
  prefix: string,
  data: Record<string, string> = { n: "1" },
): Promise<ObjectRef> {
  const ref = configMap(prefix);
  await client.update(ref, mergePatch({}), { createIfMissing: { data } });
  return ref;
}

/** An object's `data`, typed. */
export const data = (obj: KubernetesObject): Record<string, string> => (obj as V1ConfigMap).data as Record<string, string>;

/** The test's counter: a ConfigMap whose data.n is a number's text. */
export type Counter = V1ConfigMap & { data: { n: string } };

/** The harness's Widget kind: a spec and a status of its own. */
export type Widget = KubernetesObject & { spec: { size: number }; status?: Record<string, unknown> };

/**
 * A Capabilities answer of a sidecar of `version` that knows every RPC, field and enum
 * value of this client's proto but those named in `without` (full names, as the answer
 * spells them): what a fake sidecar answers.
 */
export function capabilitiesOf(version: string, without: string[] = []): CapabilitiesResponse {
  const methods = WriterService.methods.map((m) => `${WriterService.typeName}/${m.name}`);
  const fields: string[] = [];
  const enumValues: string[] = [];
  for (const type of nestedTypes(file_safewrite_v1_writer)) {
    if (type.kind === "message") {
      fields.push(...type.fields.map((f) => `${type.typeName}.${f.name}`));
    } else if (type.kind === "enum") {
      enumValues.push(...type.values.map((v) => `${type.typeName}.${v.name}`));
    }
  }
  const keep = (name: string): boolean => !without.includes(name);
  return create(CapabilitiesResponseSchema, {
    version,
    methods: methods.filter(keep),
    fields: fields.filter(keep),
    enumValues: enumValues.filter(keep),
  });
}
