/** Trace propagation with @opentelemetry/api, and calls without it. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";

import { context, trace, TraceFlags } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { Client, mergePatch, tracingAvailable } from "@safewrite/client";

import { adminClient, configMap, harness, packageRoot } from "./support.js";

const client = adminClient();
const manager = new AsyncLocalStorageContextManager();

before(() => {
  context.setGlobalContextManager(manager.enable());
});
after(() => {
  client.close();
  context.disable();
});

const spanContext = {
  traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
  spanId: "00f067aa0ba902b7",
  traceFlags: TraceFlags.SAMPLED,
};

describe("tracing", () => {
  it("loads @opentelemetry/api when it is installed", () => {
    assert.equal(tracingAvailable, true);
  });

  it("continues the active span's trace in the sidecar", async () => {
    const active = trace.setSpanContext(context.active(), spanContext);
    const res = await context.with(active, () =>
      client.update(configMap("traced"), mergePatch({ data: { traced: "yes" } }), { createIfMissing: {} }),
    );
    assert.equal(res.traceId, spanContext.traceId);
  });

  it("carries the trace id on errors too", async () => {
    const active = trace.setSpanContext(context.active(), spanContext);
    const err = await context.with(active, () => client.update(configMap("traced-missing"), mergePatch({}))).then(
      () => assert.fail("succeeded"),
      (e: { traceId: string }) => e,
    );
    assert.equal(err.traceId, spanContext.traceId);
  });

  it("sends nothing outside a span, or with propagateTrace: false", async () => {
    const outside = await client.update(configMap("untraced"), mergePatch({}), { createIfMissing: {} });
    assert.notEqual(outside.traceId, spanContext.traceId);
    const off = new Client(harness("SAFEWRITE_ADDRESS"), { propagateTrace: false });
    try {
      const active = trace.setSpanContext(context.active(), spanContext);
      const res = await context.with(active, () =>
        off.update(configMap("off"), mergePatch({}), { createIfMissing: {} }),
      );
      assert.notEqual(res.traceId, spanContext.traceId);
    } finally {
      off.close();
    }
  });

  it("works without @opentelemetry/api installed", async () => {
    // A child process in which the package cannot be resolved, as without the peer dependency.
    const dir = `${packageRoot}build/no-otel`;
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      `${dir}/hooks.mjs`,
      `export async function resolve(specifier, context, next) {
  if (specifier.startsWith("@opentelemetry/")) {
    const err = new Error("Cannot find package '" + specifier + "'");
    err.code = "ERR_MODULE_NOT_FOUND";
    throw err;
  }
  return next(specifier, context);
}
`,
    );
    writeFileSync(`${dir}/register.mjs`, `import { register } from "node:module";\nregister("./hooks.mjs", import.meta.url);\n`);
    const ref = configMap("no-otel");
    writeFileSync(
      `${dir}/main.mjs`,
      `import { Client, mergePatch, Outcome, tracingAvailable } from "@safewrite/client";
const client = new Client();
const res = await client.update(${JSON.stringify(ref)}, mergePatch({}), { createIfMissing: {} });
console.log(tracingAvailable, Outcome[res.outcome]);
client.close();
`,
    );
    const { stdout } = await promisify(execFile)(process.execPath, ["--import", `${dir}/register.mjs`, `${dir}/main.mjs`], {
      cwd: packageRoot,
    });
    assert.equal(stdout.trim(), "false CREATED");
  });
});
