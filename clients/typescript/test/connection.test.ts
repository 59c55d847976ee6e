/** Deadlines, AbortSignal, unix sockets and the address from SAFEWRITE_ADDRESS, against the real sidecar. */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import {
  cel,
  CancelledError,
  Client,
  DeadlineExceededError,
  GrpcStatus,
  mergePatch,
  Outcome,
  Reason,
  resolveAddress,
} from "@safewrite/client";

import { adminClient, configMap, data, existing, harness, INCREMENT, sleep } from "./support.js";

const client = adminClient();
const other = adminClient();
after(() => {
  client.close();
  other.close();
});

describe("deadlines", () => {
  it("a deadline already past fails with DeadlineExceededError before anything is written", async () => {
    const ref = await existing(client, "past");
    await assert.rejects(client.update(ref, mergePatch({ data: { n: "2" } }), { deadline: Date.now() - 1 }), (err) => {
      assert.ok(err instanceof DeadlineExceededError, String(err));
      assert.equal(err.code, GrpcStatus.DEADLINE_EXCEEDED);
      assert.equal(err.retryable, false, "no idempotency key: a write may have been sent");
      return true;
    });
    const res = await client.update(ref, mergePatch({ data: { n: "1" } }));
    assert.equal(res.outcome, Outcome.UNCHANGED);
  });

  it("timeoutMs bounds a transaction whose function outlasts it; the sidecar writes nothing", async () => {
    const ref = await existing(client, "slow");
    const started = Date.now();
    await assert.rejects(
      client.transact(
        ref,
        async (obj) => {
          await sleep(1500);
          data(obj)["n"] = "2";
        },
        { timeoutMs: 400, idempotencyKey: `k-${ref.name}` },
      ),
      (err) => {
        assert.ok(err instanceof DeadlineExceededError, String(err));
        assert.equal(err.retryable, true, "with an idempotency key the same call may be sent again");
        return true;
      },
    );
    assert.ok(Date.now() - started < 1400, "the call ended at its deadline, not after the function");
    await sleep(1300); // the function's proposal (if any) arrives on a dead stream
    const res = await client.update(ref, mergePatch({ data: { n: "1" } }));
    assert.equal(res.outcome, Outcome.UNCHANGED);
  });

  it("the sidecar answers DEADLINE_EXCEEDED with the attempts so far, never sleeping past it", async () => {
    const ref = await existing(client, "sidecar-deadline");
    await assert.rejects(
      client.transact(
        ref,
        async (obj) => {
          await other.update(ref, cel(INCREMENT)); // every attempt conflicts
          data(obj)["x"] = "y";
        },
        { timeoutMs: 1500, retryPolicy: { initialBackoffMs: 2000, maxBackoffMs: 2000 } },
      ),
      (err) => {
        assert.ok(err instanceof DeadlineExceededError, String(err));
        assert.equal(err.failureReason, Reason.DEADLINE_EXCEEDED, `reason ${err.reason}: ${err.message}`);
        assert.ok(err.attempts >= 1);
        assert.equal(err.attemptRecords[0]?.reason, "Conflict");
        return true;
      },
    );
  });

  it("the client's timeoutMs applies to calls that set none", async () => {
    const short = new Client(harness("SAFEWRITE_ADDRESS"), { timeoutMs: 300 });
    try {
      const ref = await existing(client, "default-timeout");
      await assert.rejects(short.transact(ref, () => sleep(1000)), DeadlineExceededError);
    } finally {
      short.close();
    }
  });
});

describe("AbortSignal", () => {
  it("a signal already aborted fails at once with CancelledError carrying its reason", async () => {
    const reason = new Error("shutting down");
    await assert.rejects(
      client.update(configMap("aborted"), mergePatch({}), { signal: AbortSignal.abort(reason) }),
      (err) => {
        assert.ok(err instanceof CancelledError);
        assert.equal(err.cause, reason);
        return true;
      },
    );
    assert.throws(() => client.beginTransaction(configMap("aborted"), { signal: AbortSignal.abort() }), CancelledError);
  });

  it("aborting during a transaction cancels it and nothing is written", async () => {
    const ref = await existing(client, "abort-signal");
    const controller = new AbortController();
    await assert.rejects(
      client.transact(
        ref,
        async (obj) => {
          controller.abort();
          await sleep(50);
          data(obj)["n"] = "2";
        },
        { signal: controller.signal },
      ),
      (err) => {
        assert.ok(err instanceof CancelledError, String(err));
        assert.equal(err.code, GrpcStatus.CANCELLED);
        return true;
      },
    );
    await sleep(100);
    const res = await client.update(ref, mergePatch({ data: { n: "1" } }));
    assert.equal(res.outcome, Outcome.UNCHANGED);
  });

  it("aborting an update in flight cancels it", async () => {
    const controller = new AbortController();
    const call = client.update(configMap("abort-unary"), mergePatch({}), {
      signal: controller.signal,
      createIfMissing: {},
    });
    controller.abort();
    await assert.rejects(call, CancelledError);
  });
});

describe("addresses", () => {
  it("serves calls over the unix socket, as unix:///path and as a bare path", async () => {
    const socket = harness("SAFEWRITE_UNIX_SOCKET");
    for (const address of [`unix://${socket}`, socket]) {
      const unix = new Client(address);
      try {
        const res = await unix.update(configMap("unix"), mergePatch({ data: { via: "unix" } }), { createIfMissing: {} });
        assert.equal(res.outcome, Outcome.CREATED);
      } finally {
        unix.close();
      }
    }
  });

  it("takes SAFEWRITE_ADDRESS when given no address", async () => {
    const fromEnv = new Client();
    try {
      assert.equal(fromEnv.address, harness("SAFEWRITE_ADDRESS"));
      const res = await fromEnv.update(configMap("env"), mergePatch({}), { createIfMissing: {} });
      assert.equal(res.outcome, Outcome.CREATED);
    } finally {
      fromEnv.close();
    }
  });

  it("takes SAFEWRITE_ADDRESS, else the sidecar's default, when no address is given", () => {
    assert.equal(resolveAddress(undefined, {}), "127.0.0.1:50051");
    assert.equal(resolveAddress("  ", { SAFEWRITE_ADDRESS: " " }), "127.0.0.1:50051");
    assert.equal(resolveAddress("", { SAFEWRITE_ADDRESS: "127.0.0.1:9" }), "127.0.0.1:9");
    assert.equal(resolveAddress("http://127.0.0.1:9", {}), "127.0.0.1:9");
    assert.equal(resolveAddress("/run/s.sock", {}), "unix:///run/s.sock");
    assert.equal(resolveAddress("unix:///run/s.sock", {}), "unix:///run/s.sock");
  });

  it("connects lazily: a client for an address nobody serves is made without error", () => {
    const lazy = new Client("127.0.0.1:1");
    lazy.close();
  });
});
