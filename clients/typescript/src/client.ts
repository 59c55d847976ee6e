/**
 * {@link Client}: the calls of safewrite.v1.WriterService over one lazily created
 * grpc-js channel, with deadlines, cancellation, metadata and trace propagation, and its
 * fenced views (`withFence`); and {@link Leadership}, the campaign for a Lease that
 * `Client.lead` opens (its events as an async iterable, the current {@link Fence},
 * `close()` to release the Lease), whose {@link Leadership.whileLeading} runs the
 * caller's work only while it leads, with a client whose writes carry the fence. The two
 * are one module because each needs the other.
 */
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import {
  Client as GrpcClient,
  credentials as grpcCredentials,
  Metadata,
  status as GrpcStatus,
  type CallOptions as GrpcCallOptions,
  type ChannelCredentials,
  type ChannelOptions,
  type ServiceError,
} from "@grpc/grpc-js";
import type { KubernetesObject } from "@kubernetes/client-node";

import { resolveAddress } from "./address.js";
import { CancelledError, fromServiceError, SafewriteError } from "./errors.js";
import {
  CapabilitiesRequestSchema,
  CapabilitiesResponseSchema,
  DeleteRequestSchema,
  DeleteResponseSchema,
  GetRequestSchema,
  GetResponseSchema,
  LeadRequestSchema,
  LeadResponseSchema,
  TransactRequestSchema,
  TransactResponseSchema,
  UpdateWithRetryRequestSchema,
  UpdateWithRetryResponseSchema,
  WriterService,
  type LeadResponse,
} from "./gen/safewrite/v1/writer_pb.js";
import { leadEvent, Subscription, type LeadEvent } from "./lead.js";
import { mutationMessage, type Mutation } from "./mutation.js";
import { loadClientNode, type ObjectRef, type Stored } from "./objects.js";
import {
  callDeadline,
  deleteRequest,
  getRequest,
  leadRequest,
  requestParts,
  type CallOptions,
  type DeleteOptions,
  type Fence,
  type GetOptions,
  type LeadOptions,
  type TransactOptions,
  type WriteOptions,
} from "./options.js";
import { toDeleteResult, toGetResult, toResult, type DeleteResult, type GetResult, type Result } from "./result.js";
import {
  CAPABILITIES_TIMEOUT_MS,
  featuresOf,
  known,
  lacking,
  learn,
  OLDER,
  PendingCall,
  refusal,
  statusError,
  type Feature,
  type Known,
  type ReadCall,
} from "./skew.js";
import { injectTraceContext } from "./tracing.js";
import { openTransaction, runTransaction, type Fresh, type Proposal, type Transaction } from "./transact.js";

/** How a {@link Client} reaches the sidecar. */
export interface ClientOptions {
  /** Channel credentials; plaintext (the sidecar listens on loopback or a unix socket) by default. */
  credentials?: ChannelCredentials;
  /** The sidecar's shared token (its --token-file), sent as `authorization: Bearer <token>`. */
  token?: string;
  /** The time budget of calls that set neither `timeoutMs` nor `deadline`, in milliseconds. */
  timeoutMs?: number;
  /** Send the active OpenTelemetry context as `traceparent` (default true; needs `@opentelemetry/api`). */
  propagateTrace?: boolean;
  /** Wait for the sidecar to be reachable within the call's deadline instead of failing at once with UNAVAILABLE. */
  waitForReady?: boolean;
  /** grpc-js channel options. */
  channelOptions?: ChannelOptions;
}

/**
 * The token as the sidecar compares it (its file's content without surrounding
 * whitespace); throws a TypeError for one that is empty or cannot be a header value.
 */
function checkToken(token: string): string {
  const trimmed = token.trim();
  if (trimmed === "") {
    throw new TypeError("token is empty: give the content of the sidecar's --token-file");
  }
  if (!/^[\x21-\x7e]+(?: +[\x21-\x7e]+)*$/.test(trimmed)) {
    throw new TypeError("token holds a character that cannot be sent in a gRPC header (a line break or a non-ASCII one)");
  }
  return trimmed;
}

/** A transact function: gets the fresh object (and its attempt) and returns the change. */
export type TransactFn<T extends KubernetesObject = KubernetesObject> = (
  object: Stored<T>,
  fresh: Fresh<T>,
) => Proposal | void | Promise<Proposal | void>;

/**
 * What a {@link Leadership} is opened with (by `Client.lead`): the Lead call (none when
 * the campaign's signal had fired: then it has ended at once), the Lease, the client of
 * the work of a leadership under a fence, and the campaign's signal.
 */
type LeadershipArgs = [
  call: ReadCall | undefined,
  lease: { namespace: string; name: string },
  fenced: (fence: Fence) => Client,
  signal: AbortSignal | undefined,
];

// Set by Leadership's static block (declared first: it runs as the class is defined).
let openLeadership: (...args: LeadershipArgs) => Leadership;

const path = (method: { name: string }): string => `/${WriterService.typeName}/${method.name}`;

/**
 * The channel a client and its fenced views share, created on first use, and what its
 * sidecar knows (rpc Capabilities), asked once, by the first call that needs a feature
 * added after 0.1.0.
 */
interface Connection {
  grpc: GrpcClient | undefined;
  /**
   * Undefined: not asked yet, or the last asking failed (the next call that needs it
   * asks again). An asking that fails answers its failure (not kept).
   */
  known: Promise<Known | ServiceError> | undefined;
}

/** A fence as given, checked for its shape (the sidecar judges its values). */
function checkFence(fence: Fence): Fence {
  if (
    fence === null ||
    typeof fence !== "object" ||
    typeof fence.leaseNamespace !== "string" ||
    typeof fence.leaseName !== "string" ||
    (typeof fence.epoch !== "bigint" && typeof fence.epoch !== "number")
  ) {
    throw new TypeError("withFence: a fence is { leaseNamespace, leaseName, epoch }, e.g. a LEADING event's `fence`");
  }
  return { leaseNamespace: fence.leaseNamespace, leaseName: fence.leaseName, epoch: fence.epoch };
}

/**
 * A client of the safewrite sidecar; safe for concurrent use. The connection is made on
 * the first call (and again after a failure); {@link close} releases it.
 */
export class Client {
  /** The grpc-js target, e.g. "127.0.0.1:50051" or "unix:///run/safewrite/safewrite.sock". */
  readonly address: string;
  readonly #options: ClientOptions;
  #connection: Connection = { grpc: undefined, known: undefined };
  /** The fence of a view made by {@link withFence}; undefined for a client made with `new`. */
  #fence: Fence | undefined;

  /**
   * @param address `host:port`, `unix:///path/to/socket` (or a bare absolute path);
   *   defaults to the SAFEWRITE_ADDRESS environment variable.
   * @throws Error when no address is given and SAFEWRITE_ADDRESS is not set.
   */
  constructor(address?: string, options: ClientOptions = {}) {
    this.address = resolveAddress(address);
    this.#options = options.token === undefined ? options : { ...options, token: checkToken(options.token) };
    // Objects are returned in client-node's shape: load it while the first call is made.
    void loadClientNode();
  }

  /** The channel, created on first use. */
  #channel(): GrpcClient {
    this.#connection.grpc ??= new GrpcClient(
      this.address,
      this.#options.credentials ?? grpcCredentials.createInsecure(),
      this.#options.channelOptions ?? {},
    );
    return this.#connection.grpc;
  }

  /**
   * Closes the channel; a later call opens a new one. A view made by {@link withFence}
   * does not own the channel: its close() does nothing (close the client you made it
   * from), so work handed a view cannot end the campaign that runs on the same channel.
   */
  close(): void {
    if (this.#fence !== undefined) {
      return;
    }
    this.#connection.grpc?.close();
    this.#connection.grpc = undefined;
    this.#connection.known = undefined;
  }

  /** The fence this client's writes carry (a view made by {@link withFence}); undefined otherwise. */
  get fence(): Fence | undefined {
    return this.#fence;
  }

  /**
   * A view of this client whose writes (`update`, `patchStatus`, `transact`,
   * `beginTransaction`, `delete`) carry `fence` unless a call gives its own `fence`
   * (reads are unchanged): the fence of a LEADING event, for work that must not write
   * once its leadership ended, without a fence in every call. It shares this client's
   * channel and options (its `close()` does nothing). `Leadership.whileLeading` hands its
   * work such a view. To write without a fence, use the client it was made from.
   *
   * @throws TypeError when `fence` is not `{ leaseNamespace, leaseName, epoch }`.
   */
  withFence(fence: Fence): Client {
    const view = new Client(this.address, this.#options);
    view.#connection = this.#connection;
    view.#fence = checkFence(fence);
    return view;
  }

  /** The options with this view's fence, unless they give their own. */
  #fenced<O extends { fence?: Fence }>(options: O): O {
    return options.fence !== undefined || this.#fence === undefined ? options : { ...options, fence: this.#fence };
  }

  /**
   * Applies `mutation` to the object's main resource (UpdateWithRetry), re-reading and
   * re-applying it on conflict within the call's deadline; with `options.status`, to its
   * status subresource instead (PatchStatus, as {@link patchStatus}). Never changes the
   * status of a kind with a status subresource otherwise. `T` is the object's type, for
   * the result's (client-node's `V1ConfigMap`, your own `KubernetesObject & { spec: ...
   * }`); nothing checks it at run time.
   *
   * @throws SafewriteError a subclass per gRPC code: ConflictError, InvalidError,
   *   PreconditionFailedError, NotFoundError, UnavailableError, DeadlineExceededError, ...
   */
  async update<T extends KubernetesObject = KubernetesObject>(
    ref: ObjectRef,
    mutation: Mutation,
    options: WriteOptions = {},
  ): Promise<Result<T>> {
    // One request for both subresources: UpdateWithRetry's and PatchStatus's messages
    // are the same on the wire; the RPC says which subresource is written.
    const method = options.status ? WriterService.method.patchStatus : WriterService.method.updateWithRetry;
    const request = create(UpdateWithRetryRequestSchema, {
      ...requestParts(ref, this.#fenced(options)),
      mutation: mutation === undefined ? undefined : mutationMessage(mutation, ref.namespace ?? ""),
    });
    const response = await this.#unary(
      path(method),
      UpdateWithRetryRequestSchema,
      UpdateWithRetryResponseSchema,
      request,
      options,
      Boolean(options.idempotencyKey),
    );
    return toResult<T>(response.result);
  }

  /**
   * Applies `mutation` to the object's status subresource (PatchStatus); only its
   * effect on `status` is written. The same as {@link update} with `status: true`.
   *
   * @throws SafewriteError as {@link update}.
   */
  patchStatus<T extends KubernetesObject = KubernetesObject>(
    ref: ObjectRef,
    mutation: Mutation,
    options: WriteOptions = {},
  ): Promise<Result<T>> {
    return this.update<T>(ref, mutation, { ...options, status: true });
  }

  /**
   * Reads the object (Get), at least as new as `options.atLeast`: pass the result of your
   * own write, and the answer is that write's object or a newer one, never an older one
   * (as an informer's cache may still hold). The sidecar answers from its remembered copy
   * when that copy is new enough (`remembered: true`, no request to the API server), else
   * sends one "not older than" read to the API server (a GET with `resourceVersion` set to
   * the minimum, served from its watch cache); without `atLeast` (or
   * `minResourceVersion`) it always reads live. Versions compare as Kubernetes defines
   * them (KEP-5504: digits without a leading zero, the shorter older); a minimum that is
   * not well formed is never compared and read live. `T` is the object's type, as for
   * {@link update}.
   *
   * A minimum the API server has not reached within its wait (about 3 s) is refused,
   * never answered: UnavailableError with `failureReasonName`
   * `RESOURCE_VERSION_TOO_LARGE` and `retryDelayMs` the server's delay
   * (DeadlineExceededError when the call's deadline comes first); the sidecar does not
   * retry it.
   *
   * A get writes nothing, so its errors count it as idempotent: `err.retryable` follows
   * the advice as for a write sent with an idempotency key.
   *
   * @throws TypeError (as a rejection, before anything is sent) when both `atLeast` and
   *   `minResourceVersion` are given.
   * @throws SafewriteError as {@link update}: NotFoundError when the object does not
   *   exist, PermissionDeniedError (`POLICY_DENIED`) for a kind the sidecar's policy
   *   does not let it read (Secrets, by default), InvalidError (`INVALID_REQUEST`, field
   *   `min_resource_version`) for a minimum the sidecar refuses (malformed, or past what
   *   the API server can represent), UnavailableError (`RESOURCE_VERSION_TOO_LARGE`) for
   *   one the API server has not reached.
   */
  async get<T extends KubernetesObject = KubernetesObject>(ref: ObjectRef, options: GetOptions = {}): Promise<GetResult<T>> {
    const response = await this.#unary(
      path(WriterService.method.get),
      GetRequestSchema,
      GetResponseSchema,
      getRequest(ref, options),
      options,
      true,
    );
    return toGetResult<T>(response);
  }

  /**
   * Runs `fn` as the mutation (Transact): it gets the fresh object and returns the new
   * object (or changes the one it got and returns nothing), a mutation, or `abort()`;
   * after a conflict it is called again with the next fresh object. An error thrown by
   * `fn` (other than an Abort) ends the transaction without writing and is rethrown as
   * it is. `T` types the object `fn` gets and the result's, as for {@link update}.
   *
   * @throws SafewriteError as {@link update}.
   */
  async transact<T extends KubernetesObject = KubernetesObject>(
    ref: ObjectRef,
    fn: TransactFn<T>,
    options: TransactOptions = {},
  ): Promise<Result<T>> {
    const transaction = this.beginTransaction<T>(ref, options);
    try {
      return await runTransaction(transaction, fn);
    } catch (err) {
      transaction.cancel();
      throw err;
    }
  }

  /**
   * Opens a Transact stream to drive by hand: read fresh objects with
   * `transaction.next()` and answer each with `transaction.propose(attempt, change)`.
   * Throws at once when `options.signal` has already fired.
   */
  beginTransaction<T extends KubernetesObject = KubernetesObject>(ref: ObjectRef, options: TransactOptions = {}): Transaction<T> {
    const signal = options.signal;
    if (signal?.aborted) {
      throw cancelledBySignal(signal);
    }
    const begin = create(TransactRequestSchema, {
      message: { case: "begin", value: { ...requestParts(ref, this.#fenced(options)), status: options.status ?? false } },
    });
    // The transaction's time budget starts now, and covers asking the sidecar's Capabilities.
    const timed = this.#fixedDeadline(options);
    const call = this.#stream(path(WriterService.method.transact), TransactRequestSchema, begin, timed, () =>
      this.#channel().makeBidiStreamRequest(
        path(WriterService.method.transact),
        (message: MessageShape<typeof TransactRequestSchema>) => Buffer.from(toBinary(TransactRequestSchema, message)),
        (bytes: Buffer) => fromBinary(TransactResponseSchema, bytes),
        this.#metadata(options),
        this.#callOptions(timed),
      ),
    );
    const transaction = openTransaction<T>(call, Boolean(options.idempotencyKey), signal, ref.namespace ?? "");
    if (signal !== undefined) {
      const onAbort = (): void => call.cancel();
      signal.addEventListener("abort", onAbort, { once: true });
      call.on("status", () => signal.removeEventListener("abort", onAbort));
    }
    call.write(begin);
    return transaction;
  }

  /**
   * Deletes the object (Delete), conditioned on the object it decided on: every attempt
   * reads it live, checks `options.preconditions` on it, and sends one DELETE carrying
   * that object's uid and resourceVersion, so a writer that changed it in between makes
   * the sidecar read and decide again (within the call's deadline). An object that is
   * not there is an answer, not an error: `DeleteOutcome.GONE`. A delete is always safe
   * to send again (one already applied answers GONE or DELETING), so its errors count it
   * as idempotent (`err.retryable`, as for a get). `T` types the result's object, as for
   * {@link update}.
   *
   * @throws SafewriteError as {@link update}: PreconditionFailedError
   *   (`PRECONDITION_FAILED`, with `currentObject`) when a precondition is false on the
   *   object read, nothing deleted; ConflictError (`RESOURCE_VERSION_MISMATCH`) for an
   *   exact resourceVersion that is not the object's; PreconditionFailedError
   *   (`NOT_LEADER`, `FENCED`) for a fenced delete the sidecar refuses;
   *   PermissionDeniedError when the sidecar's policy (`delete`) or the API server refuses it.
   */
  async delete<T extends KubernetesObject = KubernetesObject>(
    ref: ObjectRef,
    options: DeleteOptions = {},
  ): Promise<DeleteResult<T>> {
    const response = await this.#unary(
      path(WriterService.method.delete),
      DeleteRequestSchema,
      DeleteResponseSchema,
      deleteRequest(ref, this.#fenced(options)),
      options,
      true,
    );
    return toDeleteResult<T>(response);
  }

  /**
   * Campaigns for leadership through a coordination.k8s.io/v1 Lease (Lead): the sidecar
   * acquires and renews it for this caller, the way client-go's leader election does,
   * and the returned {@link Leadership} reports each change (LEADING with the epoch of
   * the acquisition and its {@link Fence}, NOT_LEADING with why). The campaign lasts
   * until `leadership.close()` or `options.signal`, which release the Lease; no deadline
   * (the client's `timeoutMs` neither) bounds it, and a signal that has already fired
   * sends nothing (the Leadership has ended). The sidecar's refusals (InvalidError
   * naming the field, PermissionDeniedError) come through the Leadership's iteration
   * and `whileLeading`.
   *
   * Leadership alone does not fence: a paused leader may write after its successor took
   * over. Give writes its `fence` (or use `leadership.whileLeading`, whose work gets a
   * fenced client) and the sidecar refuses those of a deposed leader.
   */
  lead(options: LeadOptions): Leadership {
    const fenced = (fence: Fence): Client => this.withFence(fence);
    if (options.signal?.aborted) {
      return openLeadership(undefined, options, fenced, options.signal);
    }
    const request = leadRequest(options);
    const call = this.#stream(path(WriterService.method.lead), LeadRequestSchema, request, {}, () =>
      this.#channel().makeServerStreamRequest(
        path(WriterService.method.lead),
        (message: MessageShape<typeof LeadRequestSchema>) => Buffer.from(toBinary(LeadRequestSchema, message)),
        (bytes: Buffer) => fromBinary(LeadResponseSchema, bytes),
        request,
        this.#metadata({ metadata: options.metadata }),
        {},
      ),
    );
    return openLeadership(call, options, fenced, options.signal);
  }

  #metadata(options: CallOptions): Metadata {
    const metadata = new Metadata(this.#options.waitForReady ? { waitForReady: true } : {});
    for (const [key, value] of Object.entries(options.metadata ?? {})) {
      metadata.set(key, value);
    }
    if (this.#options.token !== undefined && metadata.get("authorization").length === 0) {
      metadata.set("authorization", `Bearer ${this.#options.token}`);
    }
    if (this.#options.propagateTrace ?? true) {
      injectTraceContext(metadata);
    }
    return metadata;
  }

  #callOptions(options: CallOptions): GrpcCallOptions {
    const callOptions: GrpcCallOptions = {};
    const deadline = callDeadline(options, this.#options.timeoutMs);
    if (deadline !== undefined) {
      callOptions.deadline = deadline;
    }
    return callOptions;
  }

  /**
   * What the sidecar knows, asked once (rpc Capabilities) and kept for the channel;
   * concurrent callers share the asking. UNIMPLEMENTED is a sidecar older than 0.2.0
   * (kept too). Any other failure (unreachable, a deadline, a refused token) is not kept:
   * it answers that failure, and the next call that needs it asks again. Bounded by the
   * deadline of the call that asks and by CAPABILITIES_TIMEOUT_MS.
   */
  #known(deadline: Date | undefined): Promise<Known | ServiceError> {
    const connection = this.#connection;
    if (connection.known !== undefined) {
      return connection.known;
    }
    const bound = Date.now() + CAPABILITIES_TIMEOUT_MS;
    const asking: Promise<Known | ServiceError> = new Promise((resolve) => {
      this.#channel().makeUnaryRequest(
        path(WriterService.method.capabilities),
        (message: MessageShape<typeof CapabilitiesRequestSchema>) => Buffer.from(toBinary(CapabilitiesRequestSchema, message)),
        (bytes: Buffer) => fromBinary(CapabilitiesResponseSchema, bytes),
        create(CapabilitiesRequestSchema),
        this.#metadata({}),
        { deadline: new Date(Math.min(bound, deadline?.getTime() ?? bound)) },
        (err: ServiceError | null, answer?: MessageShape<typeof CapabilitiesResponseSchema>) => {
          if (err === null && answer !== undefined) {
            resolve(known(answer));
          } else if (err?.code === GrpcStatus.UNIMPLEMENTED) {
            resolve(OLDER);
          } else {
            if (connection.known === asking) {
              connection.known = undefined;
            }
            resolve(err ?? statusError(GrpcStatus.INTERNAL, "the sidecar answered without a message"));
          }
        },
      );
    });
    connection.known = asking;
    return asking;
  }

  /**
   * Whether a call that needs `features` may be sent, decided here for every call:
   * undefined when its sidecar has them all; else, as the status the call fails with
   * having sent nothing, the client's refusal of one it lacks (as the sidecar's own
   * would come, see skew.ts), or, when what it knows could not be learned (Capabilities
   * failed otherwise than UNIMPLEMENTED, or the call's deadline or signal ended its
   * wait), that failure (see skew.ts's `unlearned`): never sent unchecked.
   */
  async #refusal(features: Feature[], options: CallOptions): Promise<ServiceError | undefined> {
    const deadline = callDeadline(options, this.#options.timeoutMs);
    const sidecar = await learn(this.#known(deadline), deadline, options.signal);
    if (sidecar instanceof Error) {
      return sidecar;
    }
    const missing = lacking(sidecar, features);
    return missing === undefined ? undefined : refusal(missing, sidecar);
  }

  /**
   * A stream call, opened by `open` at once when its first message needs nothing added
   * after 0.1.0, else once the sidecar is known to serve it (see {@link PendingCall}).
   */
  #stream<I extends DescMessage, C extends ReadCall>(
    method: string,
    input: I,
    first: MessageShape<I>,
    options: CallOptions,
    open: () => C,
  ): C | PendingCall<MessageShape<I>> {
    const features = featuresOf(method.slice(1), input, first);
    if (features.length === 0) {
      return open();
    }
    return new PendingCall<MessageShape<I>>(this.#refusal(features, options), open);
  }

  #unary<I extends DescMessage, O extends DescMessage>(
    method: string,
    input: I,
    output: O,
    request: MessageShape<I>,
    options: CallOptions,
    idempotent: boolean,
  ): Promise<MessageShape<O>> {
    const features = featuresOf(method.slice(1), input, request);
    if (features.length === 0) {
      return this.#send(method, input, output, request, options, idempotent);
    }
    // The call's time budget covers the asking.
    const bounded = this.#fixedDeadline(options);
    return this.#refusal(features, bounded).then((refused) => {
      if (refused !== undefined) {
        // As any failed call's error (see #send), saying why nothing was sent; and as
        // nothing was sent, nothing is in doubt: it is idempotent, as a read is (a
        // DEADLINE_EXCEEDED here is retryable without an idempotency key).
        throw callError(refused, bounded.signal, true, refused.details);
      }
      return this.#send(method, input, output, request, bounded, idempotent);
    });
  }

  /** `options` with their time budget (or the client's) as a deadline fixed now, when they have one. */
  #fixedDeadline<O extends CallOptions>(options: O): O {
    const deadline = callDeadline(options, this.#options.timeoutMs);
    return deadline === undefined ? options : { ...options, timeoutMs: undefined, deadline };
  }

  #send<I extends DescMessage, O extends DescMessage>(
    method: string,
    input: I,
    output: O,
    request: MessageShape<I>,
    options: CallOptions,
    idempotent: boolean,
  ): Promise<MessageShape<O>> {
    const signal = options.signal;
    if (signal?.aborted) {
      return Promise.reject(cancelledBySignal(signal));
    }
    return new Promise((resolve, reject) => {
      let onAbort: (() => void) | undefined;
      const settle = (err: ServiceError | null, response: MessageShape<O> | undefined): void => {
        if (err) {
          reject(callError(err, signal, idempotent));
        } else if (response === undefined) {
          reject(new SafewriteError(GrpcStatus.INTERNAL, "the sidecar answered without a message"));
        } else {
          resolve(response);
        }
      };
      const call = this.#channel().makeUnaryRequest(
        method,
        (message: MessageShape<I>) => Buffer.from(toBinary(input, message)),
        (bytes: Buffer) => fromBinary(output, bytes),
        request,
        this.#metadata(options),
        this.#callOptions(options),
        (err: ServiceError | null, response?: MessageShape<O>) => {
          if (onAbort !== undefined) {
            signal?.removeEventListener("abort", onAbort);
          }
          // The answer's objects (an error's currentObject too) take client-node's shape.
          void loadClientNode().then(() => settle(err, response));
        },
      );
      if (signal !== undefined) {
        onAbort = () => call.cancel();
        signal.addEventListener("abort", onAbort, { once: true });
      }
    });
  }
}

function cancelledBySignal(
  signal: AbortSignal,
  err?: ServiceError,
  message = "the call was cancelled by its AbortSignal",
): CancelledError {
  return new CancelledError(GrpcStatus.CANCELLED, message, {}, {
    cause: signal.reason ?? err,
  });
}

/**
 * The error a failed call rejects with: CancelledError when its signal cancelled it
 * (`message`, by default that it did), else the status's ({@link fromServiceError}).
 */
function callError(err: ServiceError, signal: AbortSignal | undefined, idempotent: boolean, message?: string): SafewriteError {
  return err.code === GrpcStatus.CANCELLED && signal?.aborted
    ? cancelledBySignal(signal, err, message)
    : fromServiceError(err, idempotent);
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
  readonly #call: ReadCall | undefined;
  readonly #fenced: (fence: Fence) => Client;
  readonly #subscriptions = new Set<Subscription>();
  #latest: LeadEvent | undefined;
  #ended = false;
  #closed = false;
  #error: SafewriteError | undefined;

  /** Opened by `Client.lead`; without a call (its signal had fired), ended at once. */
  private constructor(...[call, lease, fenced, signal]: LeadershipArgs) {
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

  static {
    openLeadership = (...args) => new Leadership(...args);
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
