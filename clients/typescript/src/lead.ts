/**
 * Leader election through the sidecar's Lead stream: {@link Leadership}, one campaign
 * for a Lease (its events as an async iterable, the current {@link Fence}, `close()` to
 * release the Lease), and {@link Leadership.whileLeading}, which runs the caller's work
 * only while it leads, with a client whose writes carry the fence.
 */
import { status as GrpcStatus, type ClientReadableStream, type ServiceError } from "@grpc/grpc-js";

import type { Client } from "./client.js";
import { fromServiceError, type SafewriteError } from "./errors.js";
import { LeadState, NotLeadingReason, type LeadResponse } from "./gen/safewrite/v1/writer_pb.js";
import type { Fence } from "./options.js";

/** One event of a campaign: the caller leads (with its epoch), or does not (with why). */
export interface LeadEvent {
  /** LEADING or NOT_LEADING. */
  state: LeadState;
  /** The state's name, "LEADING" or "NOT_LEADING". */
  stateName: string;
  /** `state` is LEADING. */
  leading: boolean;
  /**
   * The epoch of this leadership (LEADING): it grows by one with every acquisition of
   * the Lease, by anyone; renewals keep it. 0 when not leading.
   */
  epoch: bigint;
  /** The Lease's holder as last read: this campaign's identity when leading; empty when the Lease is free. */
  holder: string;
  /**
   * Why the caller does not lead (NOT_LEADING): OTHER_HOLDER (another holder holds the
   * Lease; `holder` names it), LOST_RENEWAL (no renewal within the renew deadline: stop
   * acting as the leader; the campaign goes on), RELEASED (the sidecar is shutting
   * down; the campaign ends). UNSPECIFIED when leading.
   */
  reason: NotLeadingReason;
  /** The reason's name, e.g. "LOST_RENEWAL"; "UNSPECIFIED" when leading. */
  reasonName: string;
  /** The identity this campaign holds the Lease under (the caller's, or the one the sidecar made). */
  identity: string;
  /** The fence of this leadership, for writes only this leader may make (LEADING); undefined otherwise. */
  fence: Fence | undefined;
}

/** What {@link Leadership.whileLeading} hands the work of one leadership. */
export interface Leader {
  /**
   * The client the campaign was opened with, as `client.withFence(fence)`: its writes
   * (`update`, `patchStatus`, `transact`, `beginTransaction`, `delete`) carry this
   * leadership's fence unless a call gives its own `fence`. A write the sidecar makes
   * after this leadership ended is refused (`PreconditionFailedError`, reason
   * `NOT_LEADER` or `FENCED`); none is cancelled by `signal`.
   */
  client: Client;
  /** This leadership's fence. */
  fence: Fence;
  /** This leadership's epoch. */
  epoch: bigint;
  /** Fires when this leadership ends: NOT_LEADING, another LEADING, or the campaign's end. */
  signal: AbortSignal;
  /** The LEADING event that started it. */
  event: LeadEvent;
}

/**
 * The work of one leadership: it should return (or reject) soon after `leader.signal`
 * fires; the next leadership's work starts only after it did.
 */
export type LeaderWork = (leader: Leader) => unknown;

/** Converts a LeadResponse message. */
function leadEvent(message: LeadResponse, namespace: string, name: string): LeadEvent {
  const leading = message.state === LeadState.LEADING;
  return {
    state: message.state,
    stateName: LeadState[message.state] ?? String(message.state),
    leading,
    epoch: message.epoch,
    holder: message.holder,
    reason: message.reason,
    reasonName: NotLeadingReason[message.reason] ?? String(message.reason),
    identity: message.identity,
    fence: leading ? { leaseNamespace: namespace, leaseName: name, epoch: message.epoch } : undefined,
  };
}

/** One reader of a campaign's events: its own queue, from the state when it started on. */
class Subscription {
  readonly queue: LeadEvent[] = [];
  #wake: (() => void) | undefined;

  notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  wait(): Promise<void> {
    return new Promise((resolve) => {
      this.#wake = resolve;
    });
  }
}

/**
 * A campaign for a Lease (`Client.lead`): the sidecar acquires and renews it on the
 * caller's behalf and reports every change. Iterate it (`for await (const event of
 * leadership)`) for its events, read {@link leading} and {@link fence} for the current
 * state, or hand {@link whileLeading} the work to run while leading.
 *
 * It ends when the caller calls {@link close} (or the campaign's `signal` fires, or a
 * `for await` loop over it is left early): the Lease is released, and another candidate
 * takes over within its retry period. It also ends, after a RELEASED event, when the
 * sidecar shuts down; and it fails when the sidecar refuses the campaign or cannot be
 * reached (a `SafewriteError`, thrown by the iteration and by {@link whileLeading}).
 */
export class Leadership implements AsyncIterable<LeadEvent> {
  /** The Lease's namespace. */
  readonly namespace: string;
  /** The Lease's name. */
  readonly name: string;
  readonly #call: ClientReadableStream<LeadResponse> | undefined;
  readonly #fenced: (fence: Fence) => Client;
  readonly #subscriptions = new Set<Subscription>();
  #latest: LeadEvent | undefined;
  #ended = false;
  #closed = false;
  #error: SafewriteError | undefined;

  /** @internal Opened by `Client.lead`; without a call (its signal had fired), ended at once. */
  constructor(
    call: ClientReadableStream<LeadResponse> | undefined,
    lease: { namespace: string; name: string },
    fenced: (fence: Fence) => Client,
    signal: AbortSignal | undefined,
  ) {
    this.namespace = lease.namespace;
    this.name = lease.name;
    this.#call = call;
    this.#fenced = fenced;
    if (call === undefined) {
      this.#closed = true;
      this.#ended = true;
      return;
    }
    call.on("data", (message: LeadResponse) => this.#publish(leadEvent(message, this.namespace, this.name)));
    call.on("error", (err: ServiceError) => {
      // The cancellation of close() is the campaign's normal end.
      if (!(this.#closed && err.code === GrpcStatus.CANCELLED)) {
        this.#error ??= fromServiceError(err, true);
      }
    });
    // 'end' comes once every message was delivered; 'status' too, and messages still
    // buffered then are delivered before the next macrotask.
    call.on("end", () => this.#finish());
    call.on("status", () => setImmediate(() => this.#finish()));
    if (signal !== undefined) {
      const onAbort = (): void => this.close();
      signal.addEventListener("abort", onAbort, { once: true });
      call.on("status", () => signal.removeEventListener("abort", onAbort));
    }
  }

  /** The campaign's last event; undefined before the first. */
  get latest(): LeadEvent | undefined {
    return this.#latest;
  }

  /** The caller leads: the last event was LEADING and the campaign has not ended. */
  get leading(): boolean {
    return !this.#ended && !this.#closed && this.#latest?.leading === true;
  }

  /** The fence of the current leadership, while {@link leading}; undefined otherwise. */
  get fence(): Fence | undefined {
    return this.leading ? this.#latest?.fence : undefined;
  }

  /** The campaign has ended (closed, released by the sidecar, or failed). */
  get ended(): boolean {
    return this.#ended;
  }

  /**
   * Ends the campaign: the stream is closed and the sidecar releases the Lease if this
   * campaign holds it, so another candidate leads within its retry period. Iterations
   * then end and {@link whileLeading} aborts its work and resolves. Safe to call again.
   */
  close(): void {
    if (this.#closed || this.#ended) {
      return;
    }
    this.#closed = true;
    this.#call?.cancel();
  }

  #publish(event: LeadEvent): void {
    this.#latest = event;
    for (const subscription of this.#subscriptions) {
      subscription.queue.push(event);
      subscription.notify();
    }
  }

  #finish(): void {
    if (this.#ended) {
      return;
    }
    this.#ended = true;
    for (const subscription of this.#subscriptions) {
      subscription.notify();
    }
  }

  /** A reader of the events from now on, the current state (the last event) first. */
  #subscribe(): Subscription {
    const subscription = new Subscription();
    if (this.#latest !== undefined) {
      subscription.queue.push(this.#latest);
    }
    this.#subscriptions.add(subscription);
    return subscription;
  }

  /** The subscription's next event; undefined once the campaign has ended. */
  async #next(subscription: Subscription): Promise<LeadEvent | undefined> {
    for (;;) {
      const event = subscription.queue.shift();
      if (event !== undefined) {
        return event;
      }
      if (this.#ended) {
        this.#subscriptions.delete(subscription);
        if (this.#error !== undefined) {
          throw this.#error;
        }
        return undefined;
      }
      await subscription.wait();
    }
  }

  /**
   * The campaign's events: first the current state (the last event, when there was one),
   * then every later one, until the campaign ends. Each iteration has its own queue, so
   * several may read at once. Leaving a `for await` loop early (`break`, `return`, a
   * throw) closes the campaign, as it closes a Node stream.
   *
   * @throws SafewriteError when the campaign fails: InvalidError naming the field of a
   *   value the sidecar refuses, PermissionDeniedError when its policy does not allow
   *   `lead` on the Lease, UnavailableError when the sidecar cannot be reached.
   */
  [Symbol.asyncIterator](): AsyncIterator<LeadEvent> {
    const subscription = this.#subscribe();
    return {
      next: async (): Promise<IteratorResult<LeadEvent>> => {
        const event = await this.#next(subscription);
        return event === undefined ? { done: true, value: undefined } : { done: false, value: event };
      },
      return: async (): Promise<IteratorResult<LeadEvent>> => {
        this.#subscriptions.delete(subscription);
        this.close();
        return { done: true, value: undefined };
      },
    };
  }

  /**
   * Runs `work` while the caller leads: at every LEADING event it starts `work` with a
   * {@link Leader} (a client whose writes carry this leadership's fence, the fence, the
   * epoch, and a signal), and when the leadership ends (NOT_LEADING, or the campaign's
   * end) it aborts the signal and waits for `work` to settle; at the next LEADING it
   * starts `work` again. `work` that returns while still leading is done for that
   * leadership. Resolves once the campaign has ended normally (`close()`, the campaign's
   * signal, the sidecar's shutdown) and the last `work` has settled.
   *
   * An error `work` throws after its signal fired is its answer to losing the leadership
   * (a refused fenced write, a cancelled call) and is dropped. An error it throws while
   * still leading closes the campaign (releasing the Lease to the other candidates) and
   * rejects with that error.
   *
   * @throws SafewriteError when the campaign fails, as its iteration does; `work`'s own
   *   error, as it is.
   */
  async whileLeading(work: LeaderWork): Promise<void> {
    type Step = { event: LeadEvent | undefined } | { failure: unknown } | { settled: { error?: unknown } };
    type Term = { controller: AbortController; settled: Promise<{ error?: unknown }> };
    const subscription = this.#subscribe();
    let term: Term | undefined;
    const stop = async (why: string): Promise<void> => {
      if (term !== undefined) {
        term.controller.abort(new Error(`the leadership of Lease ${this.namespace}/${this.name} ended: ${why}`));
        await term.settled;
        term = undefined;
      }
    };
    let pending: Promise<Step> | undefined;
    try {
      for (;;) {
        pending ??= this.#next(subscription).then(
          (event) => ({ event }),
          (failure: unknown) => ({ failure }),
        );
        const step: Step =
          term === undefined ? await pending : await Promise.race([pending, term.settled.then((settled) => ({ settled }))]);
        if ("settled" in step) {
          // The work ended while its leadership goes on.
          term = undefined;
          if ("error" in step.settled) {
            this.close();
            throw step.settled.error;
          }
          continue;
        }
        pending = undefined;
        if ("failure" in step) {
          await stop("the campaign failed");
          throw step.failure;
        }
        const event = step.event;
        if (event === undefined) {
          await stop("the campaign ended");
          return;
        }
        if (!event.leading) {
          await stop(`NOT_LEADING (${event.reasonName})`);
          continue;
        }
        await stop(`LEADING again, under epoch ${event.epoch}`);
        const controller = new AbortController();
        const fence = event.fence!;
        const leader: Leader = { client: this.#fenced(fence), fence, epoch: event.epoch, signal: controller.signal, event };
        term = {
          controller,
          settled: Promise.resolve()
            .then(() => work(leader))
            .then(
              () => ({}),
              (error: unknown) => (controller.signal.aborted ? {} : { error }),
            ),
        };
      }
    } finally {
      this.#subscriptions.delete(subscription);
    }
  }
}
