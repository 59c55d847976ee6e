/**
 * {@link Client}: the calls of safewrite.v1.WriterService over one lazily created
 * grpc-js channel, with deadlines, cancellation, metadata and trace propagation.
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
  GetRequestSchema,
  GetResponseSchema,
  TransactRequestSchema,
  TransactResponseSchema,
  UpdateWithRetryRequestSchema,
  UpdateWithRetryResponseSchema,
  WriterService,
} from "./gen/safewrite/v1/writer_pb.js";
import { mutationMessage, type Mutation } from "./mutation.js";
import { loadClientNode, type Stored } from "./objects.js";
import {
  callDeadline,
  getRequest,
  requestParts,
  type CallOptions,
  type GetOptions,
  type ObjectRef,
  type TransactOptions,
  type WriteOptions,
} from "./options.js";
import { toGetResult, toResult, type GetResult, type Result } from "./result.js";
import { injectTraceContext } from "./tracing.js";
import { runTransaction, Transaction, type Fresh, type Proposal } from "./transact.js";

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

const path = (method: { name: string }): string => `/${WriterService.typeName}/${method.name}`;

/**
 * A client of the safewrite sidecar; safe for concurrent use. The connection is made on
 * the first call (and again after a failure); {@link close} releases it.
 */
export class Client {
  /** The grpc-js target, e.g. "127.0.0.1:50051" or "unix:///run/safewrite/safewrite.sock". */
  readonly address: string;
  readonly #options: ClientOptions;
  #grpc: GrpcClient | undefined;

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
    this.#grpc ??= new GrpcClient(
      this.address,
      this.#options.credentials ?? grpcCredentials.createInsecure(),
      this.#options.channelOptions ?? {},
    );
    return this.#grpc;
  }

  /** Closes the channel; a later call opens a new one. */
  close(): void {
    this.#grpc?.close();
    this.#grpc = undefined;
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
      ...requestParts(ref, options),
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
    const call = this.#channel().makeBidiStreamRequest(
      path(WriterService.method.transact),
      (message: MessageShape<typeof TransactRequestSchema>) => Buffer.from(toBinary(TransactRequestSchema, message)),
      (bytes: Buffer) => fromBinary(TransactResponseSchema, bytes),
      this.#metadata(options),
      this.#callOptions(options),
    );
    const transaction = new Transaction<T>(call, Boolean(options.idempotencyKey), signal, ref.namespace ?? "");
    if (signal !== undefined) {
      const onAbort = (): void => call.cancel();
      signal.addEventListener("abort", onAbort, { once: true });
      call.on("status", () => signal.removeEventListener("abort", onAbort));
    }
    call.write(
      create(TransactRequestSchema, {
        message: { case: "begin", value: { ...requestParts(ref, options), status: options.status ?? false } },
      }),
    );
    return transaction;
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

  #unary<I extends DescMessage, O extends DescMessage>(
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
          reject(
            err.code === GrpcStatus.CANCELLED && signal?.aborted
              ? cancelledBySignal(signal, err)
              : fromServiceError(err, idempotent),
          );
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

function cancelledBySignal(signal: AbortSignal, err?: ServiceError): CancelledError {
  return new CancelledError(GrpcStatus.CANCELLED, "the call was cancelled by its AbortSignal", {}, {
    cause: signal.reason ?? err,
  });
}
