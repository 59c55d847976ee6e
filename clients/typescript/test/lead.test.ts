/**
 * Leader election (Lead) against real sidecars: two replicas under one Lease, each with a
 * sidecar of its own (the harness's peers), one paused past its lease while the other
 * takes over; release on close; the sidecar's refusals; the campaign's signal.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import {
  cel,
  Client,
  InvalidError,
  LeadState,
  NotLeadingReason,
  PreconditionFailedError,
  Reason,
  type Fence,
  type Leadership,
  type LeadEvent,
  type LeadOptions,
  type ObjectRef,
} from "@safewrite/client";

import { adminClient, existing, freshName, INCREMENT, namespace, peers, sleep, until, type Counter } from "./support.js";

const admin = adminClient();
after(() => admin.close());

/** Short timings: lease 2 s > renew deadline 1.5 s > 1.2 x retry period 0.2 s. */
const SHORT = { leaseDurationMs: 2_000, renewDeadlineMs: 1_500, retryPeriodMs: 200 };

/** A fresh Lease in the run's namespace. */
const lease = (): { namespace: string; name: string } => ({ namespace: namespace(), name: freshName("lease") });

/** A refusal of a fenced write: the sidecar does not lead under the fence, or a later leader wrote the object. */
const fencedOut = (err: unknown): err is PreconditionFailedError =>
  err instanceof PreconditionFailedError &&
  (err.failureReason === Reason.NOT_LEADER || err.failureReason === Reason.FENCED);

/**
 * One replica of a controller: it campaigns through its own sidecar and, while leading,
 * increments the counter by one per fenced write (UpdateWithRetry through the fenced
 * client whileLeading hands it, each with a 30 s deadline, so every write gets a definite
 * answer, also across a pause), recording what was acknowledged and what was refused.
 */
class Replica {
  readonly client: Client;
  readonly leadership: Leadership;
  /** Every event, in order. */
  readonly events: LeadEvent[] = [];
  /** The value of n each acknowledged write left, and the epoch it was written under. */
  readonly acked: { n: number; epoch: bigint }[] = [];
  /** The fenced writes refused (NOT_LEADER or FENCED). */
  readonly refused: PreconditionFailedError[] = [];
  /** The epoch of each leadership whose work started. */
  readonly terms: bigint[] = [];
  working = false;
  readonly #recorded: Promise<void>;
  readonly #worked: Promise<void>;

  constructor(address: string, counter: ObjectRef, options: LeadOptions) {
    this.client = new Client(address, { timeoutMs: 30_000 });
    const leadership = this.client.lead(options);
    this.leadership = leadership;
    this.#recorded = (async () => {
      for await (const event of leadership) {
        this.events.push(event);
      }
    })();
    this.#worked = leadership.whileLeading(async ({ client, epoch, fence, signal }) => {
      assert.deepEqual(client.fence, fence, "the work's client is fenced with its leadership's fence");
      this.terms.push(epoch);
      this.working = true;
      try {
        while (!signal.aborted) {
          try {
            const res = await client.update<Counter>(counter, cel(INCREMENT), { timeoutMs: 30_000 });
            this.acked.push({ n: Number(res.object.data.n), epoch });
          } catch (err) {
            if (!fencedOut(err)) {
              throw err;
            }
            this.refused.push(err);
            return; // not the leader any more: wait for the next LEADING
          }
        }
      } finally {
        this.working = false;
      }
    });
  }

  leadingEvents(): LeadEvent[] {
    return this.events.filter((e) => e.leading);
  }

  /** Closes the campaign; resolves when its work and its iteration are over (rejects with their error). */
  async stop(): Promise<void> {
    this.leadership.close();
    await Promise.all([this.#worked, this.#recorded]);
    this.client.close();
  }
}

describe("lead", () => {
  it(
    "two replicas under one Lease, the leader's sidecar paused past its lease: the other takes over under a higher epoch, the paused one's writes are refused, and the count stays exact",
    { timeout: 60_000 },
    async (t) => {
      const [one, two] = peers();
      const counter = await existing(admin, "fenced-count", { n: "0" });
      const options = { ...lease(), ...SHORT };
      const a = new Replica(one!.address, counter, options);
      let b: Replica | undefined;
      try {
        await until(() => a.acked.length >= 3, 10_000, "A leads and writes");
        const [leadingA] = a.leadingEvents();
        assert.ok(leadingA !== undefined && leadingA.epoch > 0n);
        assert.equal(leadingA.holder, leadingA.identity);
        const fenceA: Fence = leadingA.fence!;
        assert.deepEqual(fenceA, { leaseNamespace: options.namespace, leaseName: options.name, epoch: leadingA.epoch });

        b = new Replica(two!.address, counter, options);
        const replicaB = b;
        await until(() => replicaB.events.length > 0, 5_000, "B campaigns");
        assert.equal(b.events[0]!.state, LeadState.NOT_LEADING);
        assert.equal(b.events[0]!.reason, NotLeadingReason.OTHER_HOLDER);
        assert.equal(b.events[0]!.holder, leadingA.identity);

        // A's pod pauses: its sidecar neither renews nor answers, past the lease duration.
        const ackedBeforePause = a.acked.length;
        const pausedAt = Date.now();
        process.kill(one!.pid, "SIGSTOP");
        try {
          await until(() => replicaB.acked.length >= 3, 10_000, "B takes over and writes while A is paused");
          await sleep(pausedAt + 4_000 - Date.now()); // paused ~4 s in all, twice the lease
        } finally {
          process.kill(one!.pid, "SIGCONT");
        }
        const ackedBByResume = b.acked.length;

        // A learns it lost: LOST_RENEWAL (no renewal within the renew deadline) or OTHER_HOLDER.
        await until(() => a.events.some((e, i) => i > 0 && !e.leading), 10_000, "A reports NOT_LEADING");
        const lost = a.events.find((e, i) => i > 0 && !e.leading)!;
        assert.ok(
          lost.reason === NotLeadingReason.LOST_RENEWAL || lost.reason === NotLeadingReason.OTHER_HOLDER,
          `A lost with ${lost.reasonName}`,
        );
        await until(() => !a.working, 30_000, "A's work ends");
        assert.equal(a.leadership.leading, false);
        assert.equal(a.leadership.fence, undefined);

        // B leads under a higher epoch.
        const [leadingB] = b.leadingEvents();
        assert.ok(leadingB !== undefined && leadingB.epoch > leadingA.epoch, "B's epoch is higher than A's");
        assert.equal(b.terms[0], leadingB.epoch);

        // A write under A's fence after the takeover is refused, through A's own sidecar.
        await assert.rejects(a.client.update(counter, cel(INCREMENT), { fence: fenceA, timeoutMs: 30_000 }), (err) => {
          assert.ok(fencedOut(err), `want NOT_LEADER or FENCED, got ${String(err)}`);
          assert.equal(err.retryable, false);
          return true;
        });

        await until(() => replicaB.acked.length >= ackedBByResume + 2, 10_000, "B goes on writing after A resumed");
        assert.ok(ackedBeforePause >= 3);
      } finally {
        await a.stop();
        await b?.stop();
      }

      // Every acknowledged increment is in the count, none twice, none unacknowledged.
      const got = await admin.get<Counter>(counter);
      const n = Number(got.object.data.n);
      assert.equal(n, a.acked.length + b!.acked.length, "n is the sum of both replicas' acknowledged increments");
      const values = [...a.acked, ...b!.acked].map((w) => w.n).sort((x, y) => x - y);
      assert.deepEqual(values, Array.from({ length: n }, (_, i) => i + 1), "each value of n acknowledged once");
      // A's writes all landed before B's first: none after the takeover was applied.
      const firstB = Math.min(...b!.acked.map((w) => w.n));
      assert.ok(a.acked.every((w) => w.n < firstB), "no write of the deposed leader landed after the takeover");
      assert.ok(b!.acked.every((w) => w.epoch > a.terms[0]!));
      // A's refusals, if any, were its writes in flight across the pause.
      assert.ok(a.refused.every(fencedOut));
      t.diagnostic(
        `A: epoch ${a.terms.join(",")}, ${a.acked.length} acknowledged, refused ${a.refused.map((e) => e.failureReasonName).join(",") || "none"} in its work, ` +
          `events ${a.events.map((e) => `${e.stateName}/${e.reasonName}`).join(" ")}; B: epoch ${b!.terms.join(",")}, ${b!.acked.length} acknowledged; n = ${n}`,
      );
    },
  );

  it("releases the Lease on close: the other candidate leads within 5 s although the Lease lasts 15 s", { timeout: 30_000 }, async () => {
    const [one, two] = peers();
    const options = { ...lease(), leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 200 };
    const clientA = new Client(one!.address);
    const clientB = new Client(two!.address);
    const a = clientA.lead(options);
    let b: Leadership | undefined;
    try {
      const first = await nextMatching(a, (e) => e.leading, 10_000);
      b = clientB.lead(options);
      const waiting = await nextMatching(b, (e) => !e.leading, 10_000);
      assert.equal(waiting.reason, NotLeadingReason.OTHER_HOLDER);
      assert.equal(waiting.holder, first.identity);

      const closed = Date.now();
      a.close();
      const took = await nextMatching(b, (e) => e.leading, 5_000);
      const elapsed = Date.now() - closed;
      assert.ok(elapsed < 5_000, `B led ${elapsed} ms after A closed`);
      assert.ok(took.epoch > first.epoch);
      assert.equal(a.leading, false);
      assert.equal(a.ended, true);
      assert.equal(b.leading, true);
      assert.deepEqual(b.fence, took.fence);
    } finally {
      a.close();
      b?.close();
      clientA.close();
      clientB.close();
    }
  });

  it("a bad Lease name fails with InvalidError naming the field `name`", async () => {
    const leadership = admin.lead({ namespace: namespace(), name: "Not_A_Name" });
    const err = await campaignFailure(leadership);
    assert.deepEqual(
      err.fieldViolations.map((v) => v.field),
      ["name"],
    );
    assert.equal(err.failureReason, Reason.INVALID_REQUEST);
    assert.equal(leadership.ended, true);
  });

  it("durations against client-go's rule fail with InvalidError naming the field", async () => {
    const renewLongerThanLease = admin.lead({ ...lease(), leaseDurationMs: 2_000, renewDeadlineMs: 3_000, retryPeriodMs: 200 });
    assert.deepEqual(
      (await campaignFailure(renewLongerThanLease)).fieldViolations.map((v) => v.field),
      ["lease_duration"],
    );
    const retryTooSlow = admin.lead({ ...lease(), leaseDurationMs: 2_000, renewDeadlineMs: 1_000, retryPeriodMs: 1_000 });
    assert.deepEqual(
      (await campaignFailure(retryTooSlow)).fieldViolations.map((v) => v.field),
      ["renew_deadline"],
    );
    // whileLeading rejects with the same error, and never runs its work.
    let ran = false;
    const rejected = admin.lead({ ...lease(), leaseDurationMs: 1_500 }).whileLeading(() => {
      ran = true;
    });
    await assert.rejects(rejected, (err) => err instanceof InvalidError && err.fieldViolations[0]?.field === "lease_duration");
    assert.equal(ran, false);
  });

  it("the campaign's signal ends it without an error, and one already fired sends nothing", { timeout: 20_000 }, async () => {
    const controller = new AbortController();
    const leadership = admin.lead({ ...lease(), ...SHORT, signal: controller.signal });
    const events: LeadEvent[] = [];
    const iterated = (async () => {
      for await (const event of leadership) {
        events.push(event);
        if (event.leading) {
          controller.abort();
        }
      }
    })();
    await iterated;
    assert.equal(events.length, 1);
    assert.equal(events[0]!.leading, true);
    assert.equal(leadership.ended, true);

    const fired = admin.lead({ ...lease(), signal: AbortSignal.abort() });
    assert.equal(fired.ended, true);
    const none: LeadEvent[] = [];
    for await (const event of fired) {
      none.push(event);
    }
    assert.deepEqual(none, []);
  });

  it("whileLeading: work that throws while leading closes the campaign, releasing the Lease, and rejects with its error", { timeout: 20_000 }, async () => {
    const options = { ...lease(), leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 200 };
    const leadership = admin.lead(options);
    const boom = new Error("boom");
    await assert.rejects(
      leadership.whileLeading(() => {
        throw boom;
      }),
      (err) => err === boom,
    );
    assert.equal(leadership.leading, false);
    // Released: another candidate leads at once, not after 15 s.
    const [peer] = peers();
    const other = new Client(peer!.address);
    const next = other.lead(options);
    try {
      await nextMatching(next, (e) => e.leading, 5_000);
    } finally {
      next.close();
      other.close();
    }
  });

  it("withFence refuses what is not a fence, and a view's close leaves the client's channel open", async () => {
    assert.throws(() => admin.withFence({ leaseNamespace: "ns" } as unknown as Fence), TypeError);
    const view = admin.withFence({ leaseNamespace: namespace(), leaseName: "l", epoch: 1 });
    assert.equal(view.fence?.epoch, 1);
    assert.equal(admin.fence, undefined);
    view.close();
    const counter = await existing(admin, "view-close");
    const res = await admin.update(counter, cel(INCREMENT));
    assert.equal(res.outcomeName, "UPDATED");
  });
});

/** The leadership's first event (the current state first) that `match` takes, within `timeoutMs`; leaves the iteration open. */
async function nextMatching(leadership: Leadership, match: (e: LeadEvent) => boolean, timeoutMs: number): Promise<LeadEvent> {
  const iterator = leadership[Symbol.asyncIterator]();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), timeoutMs);
  });
  try {
    for (;;) {
      const next = await Promise.race([iterator.next(), deadline]);
      if (next === "timeout") {
        throw new Error(`no matching event within ${timeoutMs} ms`);
      }
      if (next.done) {
        throw new Error("the campaign ended without a matching event");
      }
      if (match(next.value)) {
        return next.value;
      }
    }
  } finally {
    clearTimeout(timer);
  }
}

/** The InvalidError a campaign the sidecar refuses ends with. */
async function campaignFailure(leadership: Leadership): Promise<InvalidError> {
  const err = await (async () => {
    for await (const event of leadership) {
      assert.fail(`the campaign made an event: ${event.stateName}`);
    }
    assert.fail("the campaign ended without an error");
  })().then(
    () => assert.fail("unreachable"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof InvalidError, `want InvalidError, got ${String(err)}`);
  return err;
}
