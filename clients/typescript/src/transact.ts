/**
 * The Transact stream: {@link Transaction} speaks its protocol message by message
 * (begin, fresh, proposal echoing the attempt, result), and {@link runTransaction} runs
 * it with the caller's function as the mutation.
 */
import { create } from "@bufbuild/protobuf";
import { status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";
import type { KubernetesObject } from "@kubernetes/client-node";

import {
  TransactAbortSchema,
  TransactProposalSchema,
  TransactRequestSchema,
  type TransactRequest,
  type TransactResponse,
} from "./gen/safewrite/v1/writer_pb.js";
import { CancelledError, fromServiceError, SafewriteError } from "./errors.js";
import { Abort, Mutation, mutationMessage } from "./mutation.js";
import { loadClientNode, parseObject, toJson, type JsonObject, type Stored } from "./objects.js";
import { toResult, type Result } from "./result.js";
import type { StreamCall } from "./skew.js";

/** The object as the sidecar just read it, for one attempt; `T` as for {@link Result}. */
export interface Fresh<T extends KubernetesObject = KubernetesObject> {
  /** The attempt this object belongs to, starting at 1; a proposal must echo it. */
  attempt: number;
  /** The object, in client-node's shape (date-times as `Date`s); yours to change. */
  object: Stored<T>;
  /** Its metadata.resourceVersion, which the write will carry. */
  resourceVersion: string;
  /** The object did not exist and createIfMissing supplied it: the write will be a create. */
  creating: boolean;
}

/** An answer to a fresh object: the whole new object, a mutation, or an abort. */
export type Proposal = KubernetesObject | JsonObject | Mutation | Abort;

/** What {@link Transaction.next} yields: a fresh object to answer, or the final result. */
export type TransactionEvent<T extends KubernetesObject = KubernetesObject> =
  | { fresh: Fresh<T>; result?: undefined }
  | { result: Result<T>; fresh?: undefined };

/**
 * What a {@link Transaction} is opened with (by `Client.beginTransaction`): the Transact
 * call, whether the write carries an idempotency key, the signal that cancels it, and
 * the target's namespace, which an owner a proposal references must share.
 */
type TransactionArgs = [
  call: StreamCall<TransactRequest>,
  idempotent: boolean,
  signal: AbortSignal | undefined,
  namespace: string,
];

// Set by Transaction's static block (declared first: it runs as the class is defined).
let open: <T extends KubernetesObject>(...args: TransactionArgs) => Transaction<T>;

/** @internal Opens the Transaction of a Transact call (see {@link TransactionArgs}). */
export function openTransaction<T extends KubernetesObject>(...args: TransactionArgs): Transaction<T> {
  return open<T>(...args);
}

/**
 * An open Transact stream, for callers that drive the protocol themselves (most use
 * `Client.transact`). Read with {@link next}; answer each fresh object with
 * {@link propose}, echoing its attempt.
 */
export class Transaction<T extends KubernetesObject = KubernetesObject> {
  readonly #call: StreamCall<TransactRequest>;
  readonly #idempotent: boolean;
  readonly #signal: AbortSignal | undefined;
  /** The target's namespace, which an owner a proposal references must share. */
  readonly #namespace: string;
  readonly #queue: TransactResponse[] = [];
  #error: SafewriteError | undefined;
  /** An error came and is being converted into {@link #error}. */
  #failing = false;
  #ended = false;
  #status = false;
  #waiting: (() => void)[] = [];
  #failed: Promise<SafewriteError> | undefined;
  #onFailure: ((err: SafewriteError) => void) | undefined;

  /** Opened by `Client.beginTransaction`. */
  private constructor(...[call, idempotent, signal, namespace]: TransactionArgs) {
    this.#call = call;
    this.#idempotent = idempotent;
    this.#signal = signal;
    this.#namespace = namespace;
    call.on("data", (message: TransactResponse) => {
      this.#queue.push(message);
      this.#notify();
    });
    call.on("error", (err: ServiceError) => {
      this.#failing = true;
      // Its currentObject takes client-node's shape, as the fresh objects do.
      void loadClientNode().then(() => {
        this.#error ??= this.#convert(err);
        this.#status = true;
        this.#notify();
      });
    });
    call.on("status", () => {
      this.#status = true;
      this.#notify();
    });
    call.on("end", () => {
      this.#ended = true;
      this.#notify();
    });
  }

  static {
    open = <U extends KubernetesObject>(...args: TransactionArgs) => new Transaction<U>(...args);
  }

  #convert(err: ServiceError): SafewriteError {
    if (err.code === GrpcStatus.CANCELLED && this.#signal?.aborted) {
      return new CancelledError(err.code, "the transaction was cancelled by its AbortSignal", {}, {
        cause: this.#signal.reason,
      });
    }
    return fromServiceError(err, this.#idempotent);
  }

  #notify(): void {
    for (const wake of this.#waiting.splice(0)) {
      wake();
    }
    if (this.#error !== undefined) {
      this.#onFailure?.(this.#error);
    }
  }

  /**
   * Resolves with the error that ended the stream (a deadline, a cancellation, the
   * sidecar's answer), for a caller that waits on something else meanwhile.
   */
  failed(): Promise<SafewriteError> {
    this.#failed ??=
      this.#error !== undefined
        ? Promise.resolve(this.#error)
        : new Promise((resolve) => {
            this.#onFailure = resolve;
          });
    return this.#failed;
  }

  /**
   * The sidecar's next message: a fresh object to answer, or the result (after which
   * the stream is over).
   *
   * @throws SafewriteError a subclass per gRPC code, as for `Client.update`.
   */
  async next(): Promise<TransactionEvent<T>> {
    await loadClientNode();
    for (;;) {
      const message = this.#queue.shift();
      if (message !== undefined) {
        switch (message.message.case) {
          case "fresh": {
            const fresh = message.message.value;
            return {
              fresh: {
                attempt: fresh.attempt,
                object: parseObject<T>(fresh.objectJson),
                resourceVersion: fresh.resourceVersion,
                creating: fresh.creating,
              },
            };
          }
          case "result":
            this.#call.end();
            return { result: toResult<T>(message.message.value) };
          default:
            continue; // a message kind newer than this client: skip it
        }
      }
      if (this.#error !== undefined) {
        throw this.#error;
      }
      if (this.#ended && this.#status && !this.#failing) {
        throw new SafewriteError(GrpcStatus.INTERNAL, "the Transact stream ended without a result");
      }
      await new Promise<void>((resolve) => {
        this.#waiting.push(resolve);
      });
    }
  }

  /**
   * Answers the fresh object of `attempt`: with the whole new object (its
   * resourceVersion is ignored), a mutation applied to the fresh object, or an
   * {@link Abort}.
   *
   * @throws TypeError for a change that is none of these.
   * @throws InvalidError for an owner reference to an owner object of another namespace.
   */
  propose(attempt: number, change: Proposal): void {
    const proposal = create(TransactProposalSchema, { attempt });
    if (change instanceof Abort) {
      proposal.change = { case: "abort", value: create(TransactAbortSchema, { reason: change.reason }) };
    } else if (change instanceof Mutation) {
      proposal.change = { case: "mutation", value: mutationMessage(change, this.#namespace) };
    } else if (change !== null && typeof change === "object" && !Array.isArray(change)) {
      proposal.change = { case: "objectJson", value: toJson(change)! };
    } else {
      throw new TypeError("a proposal is an object, a Mutation (cel(), mergePatch(), ...) or an Abort");
    }
    this.#call.write(create(TransactRequestSchema, { message: { case: "proposal", value: proposal } }));
  }

  /** Closes the caller's side: the sidecar ends the transaction (CANCELLED) if it waits for a proposal. */
  close(): void {
    this.#call.end();
  }

  /** Tears the stream down: nothing is written after this point. */
  cancel(): void {
    this.#call.cancel();
  }
}

/**
 * Runs a transaction with `fn` as the mutation: every fresh object goes to `fn`, whose
 * answer is proposed for that attempt, until the result. `fn` may return a new object,
 * a mutation, an {@link Abort}, or nothing (the object it was given, changed in place);
 * throwing an Abort aborts too. Any other error thrown by `fn` tears the stream down
 * (nothing is written) and is rethrown as it is.
 */
export async function runTransaction<T extends KubernetesObject>(
  transaction: Transaction<T>,
  fn: (object: Stored<T>, fresh: Fresh<T>) => Proposal | void | Promise<Proposal | void>,
): Promise<Result<T>> {
  for (;;) {
    const event = await transaction.next();
    if (event.result !== undefined) {
      return event.result;
    }
    const fresh = event.fresh;
    // The function runs while the stream may end (deadline, AbortSignal): then its
    // answer is not waited for.
    const answer = Promise.resolve().then(() => fn(fresh.object, fresh));
    const outcome = await Promise.race([
      answer.then(
        (change) => ({ change }),
        (thrown: unknown) => ({ thrown }),
      ),
      transaction.failed().then((failure) => ({ failure })),
    ]);
    if ("failure" in outcome) {
      throw outcome.failure; // fn's late answer, or error, goes nowhere

    }
    let change: Proposal | void;
    if ("thrown" in outcome) {
      if (!(outcome.thrown instanceof Abort)) {
        transaction.cancel();
        throw outcome.thrown;
      }
      change = outcome.thrown;
    } else {
      change = outcome.change;
    }
    transaction.propose(fresh.attempt, change ?? fresh.object);
  }
}
