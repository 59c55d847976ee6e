/** The `token` option against a sidecar started with --token-file. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Client, mergePatch, Reason, UnauthenticatedError } from "@safewrite/client";

import { configMap, data, harness } from "./support.js";

/** Runs `fn` with a client of the token sidecar, closed afterwards. */
async function withClient<T>(token: string | undefined, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client(harness("SAFEWRITE_TOKEN_ADDR"), token === undefined ? {} : { token });
  try {
    return await fn(client);
  } finally {
    client.close();
  }
}

async function refused(token: string | undefined): Promise<UnauthenticatedError> {
  const err = await withClient(token, (client) => client.update(configMap("token"), mergePatch({}))).then(
    () => assert.fail("the call succeeded"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof UnauthenticatedError, String(err));
  return err;
}

describe("token", () => {
  it("a call without the token is refused with TOKEN_REQUIRED", async () => {
    const err = await refused(undefined);
    assert.equal(err.reason, "TOKEN_REQUIRED");
    assert.equal(err.failureReason, Reason.TOKEN_REQUIRED);
    assert.equal(err.retryable, false);
  });

  it("a call with another token is refused with TOKEN_INVALID", async () => {
    const err = await refused("not-the-token");
    assert.equal(err.reason, "TOKEN_INVALID");
    assert.equal(err.failureReason, Reason.TOKEN_INVALID);
  });

  it("a call with the token writes, surrounding whitespace ignored as the sidecar does", async () => {
    const res = await withClient(`  ${harness("SAFEWRITE_TOKEN")}\n`, (client) =>
      client.update(configMap("token"), mergePatch({ data: { a: "1" } }), { createIfMissing: {} }),
    );
    assert.deepEqual(data(res.object), { a: "1" });
  });

  it("an empty token or one that cannot be a header is refused at construction", () => {
    assert.throws(() => new Client("127.0.0.1:1", { token: " \n" }), /token is empty/);
    assert.throws(() => new Client("127.0.0.1:1", { token: "a\nb" }), /cannot be sent in a gRPC header/);
  });
});
