/**
 * The events of a campaign for a Lease ({@link LeadEvent}), converted from the sidecar's
 * Lead stream, and the queue of one reader of them. The campaign itself, `Leadership`,
 * is in client.ts: it hands its work a `Client`, and a `Client` opens it.
 */
import { LeadState, NotLeadingReason } from "./enums.js";
import type { LeadResponse } from "./gen/safewrite/v1/writer_pb.js";
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

/** @internal Converts a LeadResponse message, of a campaign for the Lease `namespace`/`name`. */
export function leadEvent(message: LeadResponse, namespace: string, name: string): LeadEvent {
  // The numbers are the proto's (see enums.ts).
  const state = message.state as number as LeadState;
  const reason = message.reason as number as NotLeadingReason;
  const leading = state === LeadState.LEADING;
  return {
    state,
    stateName: LeadState[state] ?? String(state),
    leading,
    epoch: message.epoch,
    holder: message.holder,
    reason,
    reasonName: NotLeadingReason[reason] ?? String(reason),
    identity: message.identity,
    fence: leading ? { leaseNamespace: namespace, leaseName: name, epoch: message.epoch } : undefined,
  };
}

/** @internal One reader of a campaign's events: its own queue, from the state when it started on. */
export class Subscription {
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

