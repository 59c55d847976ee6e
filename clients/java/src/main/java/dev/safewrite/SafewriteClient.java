package dev.safewrite;

import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Message;
import com.google.protobuf.Parser;
import dev.safewrite.v1.DeleteRequest;
import dev.safewrite.v1.GetRequest;
import dev.safewrite.v1.PatchStatusRequest;
import dev.safewrite.v1.PatchStatusResponse;
import dev.safewrite.v1.TransactBegin;
import dev.safewrite.v1.UpdateWithRetryRequest;
import dev.safewrite.v1.UpdateWithRetryResponse;
import dev.safewrite.v1.WriteOptions;
import dev.safewrite.v1.WriteResult;
import dev.safewrite.v1.WriterServiceGrpc;
import io.grpc.Channel;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.channel.ChannelOption;
import io.grpc.stub.AbstractStub;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * A client of the safewrite sidecar, safe for concurrent use; close it to release its connection.
 *
 * <p>Every call runs the sidecar's loop: read the fresh object, check the preconditions, apply the
 * change, write it with the resourceVersion read, and on a conflict start over from a fresh read,
 * within the call's deadline. A change that changes nothing writes nothing. A failed call throws a
 * {@link SafewriteException} subclass.
 *
 * <p>Reads: {@link #get(ObjectRef, Result)} reads your own write back, the object as that write
 * left it or newer, from the sidecar's remembered copy when it can, where an informer's cache may
 * still hold the object from before it; {@link #get(ObjectRef)} reads live.
 *
 * <p>Objects: Jackson's {@link ObjectNode}, or your own class through Jackson, such as a fabric8
 * resource ({@link #transact(ObjectRef, Class, TransactFunction)}, {@link Result#object(Class)}).
 *
 * <p>Options: each call comes without options (the defaults) and with a {@link WriteConfig}
 * (preconditions, retry policy, create-if-missing, idempotency key, timeout, ...), built once and
 * reusable.
 *
 * <p>Deadlines: a call is bounded by its {@link WriteConfig.Builder#timeout(Duration)}, else the
 * client's {@link Builder#defaultTimeout(Duration)}, and always by the deadline of the current
 * {@link io.grpc.Context}; the sidecar gets the soonest as the gRPC deadline. Cancelling the
 * Context (or interrupting the thread) cancels the call.
 *
 * <p>Leadership: {@link #lead(LeadConfig)} campaigns for a Lease through the sidecar; {@link
 * #fenced(Fence)} is a view of this client whose writes carry the leadership's fence, so a deposed
 * leader's writes are refused instead of landing over its successor's.
 *
 * <p>Metadata: every call carries {@code authorization: Bearer <token>} when the client has a
 * {@link Builder#token(String)}, and, unless {@link Builder#propagateTrace(boolean)} turns it off,
 * the current OpenTelemetry span's context as W3C {@code traceparent} (when opentelemetry-api is on
 * the class path and a valid span is current), so the sidecar's span joins the caller's trace.
 */
public final class SafewriteClient implements AutoCloseable {
  /** The environment variable naming the sidecar's address when none is given. */
  public static final String ADDRESS_ENV = "SAFEWRITE_ADDRESS";

  /**
   * Where the sidecar listens unless told otherwise ({@code safewrite serve --listen}): the address
   * when none is given and {@code SAFEWRITE_ADDRESS} is unset, as in the Python and Go clients.
   */
  public static final String DEFAULT_ADDRESS = "127.0.0.1:50051";

  /** Bounds one answer of the sidecar: objects as JSON stay far below, but over 4 MiB. */
  private static final int MAX_RESPONSE_BYTES = 64 << 20;

  private final ManagedChannel ownedChannel;
  private final WriterServiceGrpc.WriterServiceBlockingStub blocking;
  private final WriterServiceGrpc.WriterServiceStub async;
  private final Duration defaultTimeout;

  /** Null: writes carry the fence their config gives, if any. */
  private final Fence fence;

  private SafewriteClient(
      ManagedChannel ownedChannel, Channel channel, Duration defaultTimeout, boolean waitForReady) {
    this.ownedChannel = ownedChannel;
    this.defaultTimeout = defaultTimeout;
    WriterServiceGrpc.WriterServiceBlockingStub blockingStub =
        WriterServiceGrpc.newBlockingStub(channel).withMaxInboundMessageSize(MAX_RESPONSE_BYTES);
    // The stream's callbacks only queue what arrives, so they may run on gRPC's threads.
    WriterServiceGrpc.WriterServiceStub asyncStub =
        WriterServiceGrpc.newStub(channel)
            .withMaxInboundMessageSize(MAX_RESPONSE_BYTES)
            .withExecutor(Runnable::run);
    if (waitForReady) {
      blockingStub = blockingStub.withWaitForReady();
      asyncStub = asyncStub.withWaitForReady();
    }
    this.blocking = blockingStub;
    this.async = asyncStub;
    this.fence = null;
  }

  /** A view of {@code client}'s connection whose writes carry {@code fence}. */
  private SafewriteClient(SafewriteClient client, Fence fence) {
    this.ownedChannel = null;
    this.defaultTimeout = client.defaultTimeout;
    this.blocking = client.blocking;
    this.async = client.async;
    this.fence = fence;
  }

  /**
   * A client of the sidecar named by the environment variable {@code SAFEWRITE_ADDRESS}, else at
   * {@link #DEFAULT_ADDRESS}.
   */
  public static SafewriteClient connect() {
    return builder().build();
  }

  /**
   * A client of the sidecar at {@code address}: {@code host:port}, {@code http://host:port}, {@code
   * unix:///path/to/socket} or an absolute socket path; {@code null} or empty means {@code
   * SAFEWRITE_ADDRESS}, else {@link #DEFAULT_ADDRESS}. Connects lazily, on the first call.
   */
  public static SafewriteClient connect(String address) {
    return builder().address(address).build();
  }

  /**
   * A client over a channel you made and own (TLS, interceptors): {@link #close()} leaves it open.
   * The same as {@code builder().channel(channel).build()}; the builder also sets a token and the
   * rest.
   */
  public static SafewriteClient forChannel(Channel channel) {
    return builder().channel(channel).build();
  }

  public static Builder builder() {
    return new Builder();
  }

  /**
   * Applies {@code mutation} to the object's main resource ({@code UpdateWithRetry}), retried on
   * conflict, with the default options. It never changes the status of a kind with a status
   * subresource.
   *
   * @throws SafewriteException (a subclass per {@link ErrorKind}) when the call fails
   */
  public Result update(ObjectRef ref, Mutation mutation) {
    return update(ref, mutation, WriteConfig.DEFAULTS);
  }

  /**
   * {@link #update(ObjectRef, Mutation)} with the options of {@code config}.
   *
   * @throws SafewriteException (a subclass per {@link ErrorKind}) when the call fails
   */
  public Result update(ObjectRef ref, Mutation mutation, WriteConfig config) {
    return write(request(ref, mutation, config), false, config.timeout);
  }

  /**
   * Sends an {@code UpdateWithRetry} request as built with the generated types, bounded by the
   * client's default timeout and the current Context's deadline.
   */
  public Result update(UpdateWithRetryRequest request) {
    return write(Objects.requireNonNull(request, "request"), false, null);
  }

  /**
   * Applies {@code mutation} to the object's status subresource ({@code PatchStatus}), retried on
   * conflict, with the default options: only its effect on {@code status} is written, never the
   * spec. The kind must have a status subresource.
   *
   * @throws SafewriteException (a subclass per {@link ErrorKind}) when the call fails
   */
  public Result patchStatus(ObjectRef ref, Mutation mutation) {
    return patchStatus(ref, mutation, WriteConfig.DEFAULTS);
  }

  /**
   * {@link #patchStatus(ObjectRef, Mutation)} with the options of {@code config}; create-if-missing
   * and idempotency keys are refused ({@link InvalidException}).
   *
   * @throws SafewriteException (a subclass per {@link ErrorKind}) when the call fails
   */
  public Result patchStatus(ObjectRef ref, Mutation mutation, WriteConfig config) {
    return write(request(ref, mutation, config), true, config.timeout);
  }

  /** Sends a {@code PatchStatus} request as built with the generated types. */
  public Result patchStatus(PatchStatusRequest request) {
    Objects.requireNonNull(request, "request");
    return write(sameFields(request, UpdateWithRetryRequest.parser()), true, null);
  }

  /**
   * The request of a write, the same for both subresources: {@code UpdateWithRetryRequest} and
   * {@code PatchStatusRequest} are one message under two names.
   */
  private static UpdateWithRetryRequest request(
      ObjectRef ref, Mutation mutation, WriteConfig config) {
    Objects.requireNonNull(ref, "ref");
    Objects.requireNonNull(mutation, "mutation");
    Objects.requireNonNull(config, "config");
    UpdateWithRetryRequest.Builder request =
        UpdateWithRetryRequest.newBuilder()
            .setTarget(ref.toProto())
            .setMutation(mutation.toProto());
    config.fill(request::setPreconditions, request::setRetryPolicy, request::setOptions);
    return request.build();
  }

  /**
   * Sends a write to the main resource ({@code UpdateWithRetry}) or, when {@code status}, to the
   * status subresource ({@code PatchStatus}), the request's fields unchanged.
   */
  private Result write(UpdateWithRetryRequest given, boolean status, Duration timeout) {
    UpdateWithRetryRequest request =
        fence == null ? given : given.toBuilder().setOptions(fenced(given.getOptions())).build();
    WriteResponse response =
        unary(
            keyed(request.getOptions()),
            timeout,
            stub -> {
              if (status) {
                PatchStatusResponse answer =
                    stub.patchStatus(sameFields(request, PatchStatusRequest.parser()));
                return new WriteResponse(answer.hasResult(), answer.getResult());
              }
              UpdateWithRetryResponse answer = stub.updateWithRetry(request);
              return new WriteResponse(answer.hasResult(), answer.getResult());
            });
    if (!response.present()) {
      throw new InternalException("the sidecar answered without a result");
    }
    return Result.fromProto(response.result());
  }

  /** The answer of either write: both carry one {@code WriteResult}. */
  private record WriteResponse(boolean present, WriteResult result) {}

  /**
   * {@code message} as the other name of the same message: the two write requests have the same
   * fields under the same numbers, so the bytes of one are the other.
   */
  private static <M extends Message> M sameFields(Message message, Parser<M> parser) {
    try {
      return parser.parseFrom(message.toByteString());
    } catch (InvalidProtocolBufferException cannot) {
      throw new IllegalStateException("the write requests no longer share their fields", cannot);
    }
  }

  /**
   * Reads the object live ({@code Get} without a minimum): a quorum read from the API server, so
   * never older than any write that has been answered.
   *
   * <p>Bounded by the client's {@link Builder#defaultTimeout(Duration)} and the current {@link
   * io.grpc.Context}'s deadline. The sidecar's policy decides what may be read: Secrets are refused
   * unless it allows them.
   *
   * @throws NotFoundException when the object does not exist
   * @throws PermissionDeniedException when the sidecar's policy refuses the read ({@code
   *     POLICY_DENIED}), or the API server refuses the sidecar ({@code Forbidden})
   * @throws SafewriteException (a subclass per {@link ErrorKind}) when the call fails otherwise; a
   *     get writes nothing, so {@link SafewriteException#isRetryable()} says yes wherever the proto
   *     advises sending again with an idempotency key
   */
  public GetResult get(ObjectRef ref) {
    return get(ref, "");
  }

  /**
   * Reads your own write: the object as {@code write} left it, or newer, never older (a {@code Get}
   * with {@code write.resourceVersion()} as the minimum). The sidecar answers from its remembered
   * copy when that copy is at or past the write ({@link GetResult#remembered()}), with no request
   * to the API server, and otherwise with one "not older than" read of the API server (see {@link
   * #get(ObjectRef, String)}). {@code write} must be a result of a write to the same object; a
   * result without a resourceVersion (the object was {@link Outcome#GONE}) reads live.
   *
   * @throws UnavailableException ({@code REASON_RESOURCE_VERSION_TOO_LARGE}) when the API server
   *     has not reached the write's version within its wait, as {@link #get(ObjectRef, String)}
   * @throws SafewriteException as {@link #get(ObjectRef)} does
   */
  public GetResult get(ObjectRef ref, Result write) {
    Objects.requireNonNull(write, "write");
    return get(ref, write.resourceVersion());
  }

  /**
   * Reads the object at least as new as {@code minResourceVersion}, e.g. the {@link
   * Result#resourceVersion()} of your own write to it or the {@link GetResult#resourceVersion()} of
   * an earlier read: from the sidecar's remembered copy when that copy is at or past it, else with
   * one "not older than" read of the API server (a GET with {@code resourceVersion} set to the
   * minimum, served from its watch cache). Versions compare as Kubernetes defines them (KEP-5504:
   * digits without a leading zero, the shorter older); a minimum that is not well formed is never
   * compared and read live. Empty reads live, as {@link #get(ObjectRef)}.
   *
   * <p>A minimum the API server has not reached within its wait (about 3 s) is refused, never
   * answered: {@link UnavailableException} with {@link SafewriteException#writeFailureReason()}
   * {@code REASON_RESOURCE_VERSION_TOO_LARGE} and the server's retry delay ({@link
   * DeadlineExceededException} when the call's deadline comes first); the sidecar does not retry
   * it.
   *
   * @throws UnavailableException ({@code REASON_RESOURCE_VERSION_TOO_LARGE}) when the API server
   *     has not reached {@code minResourceVersion} within its wait
   * @throws InvalidException when {@code minResourceVersion} is malformed, or past what the API
   *     server can represent (more than 2^64-1); the field violation names {@code
   *     min_resource_version}
   * @throws SafewriteException as {@link #get(ObjectRef)} does
   */
  public GetResult get(ObjectRef ref, String minResourceVersion) {
    Objects.requireNonNull(ref, "ref");
    Objects.requireNonNull(minResourceVersion, "minResourceVersion");
    return get(
        GetRequest.newBuilder()
            .setTarget(ref.toProto())
            .setMinResourceVersion(minResourceVersion)
            .build());
  }

  /**
   * Sends a {@code Get} request as built with the generated types, bounded by the client's default
   * timeout and the current Context's deadline.
   */
  public GetResult get(GetRequest request) {
    Objects.requireNonNull(request, "request");
    // Nothing is written: a get is always safe to send again.
    return GetResult.fromProto(unary(true, null, stub -> stub.get(request)));
  }

  /** Whether a write can be sent again without applying its change twice: it carries a key. */
  private static boolean keyed(WriteOptions options) {
    return !options.getIdempotencyKey().isEmpty();
  }

  /**
   * Makes a unary call on the blocking stub, bounded by {@code timeout} (or the defaults); a
   * failure is decoded, knowing whether the request is safe to send again when its answer was lost
   * (a write with an idempotency key, or a read).
   */
  private <R> R unary(
      boolean resendSafe,
      Duration timeout,
      Function<WriterServiceGrpc.WriterServiceBlockingStub, R> call) {
    try {
      return call.apply(bounded(blocking, timeout));
    } catch (StatusRuntimeException failure) {
      throw Errors.decode(failure, resendSafe);
    }
  }

  /**
   * Runs the sidecar's retry loop with {@code function} as the mutation of the object's main
   * resource ({@code Transact}), with the default options: the sidecar sends the fresh object, the
   * function answers with a {@link Proposal}, the sidecar writes it with the resourceVersion it
   * read, and on a conflict the function runs again on the next fresh object. It runs on the
   * calling thread, and gets the object as a Jackson {@link ObjectNode}.
   *
   * <p>An aborted transaction returns {@link Outcome#ABORTED}. An exception the function throws
   * aborts the transaction (nothing is written) and is rethrown as it is. When the deadline passes
   * or the Context is cancelled, even while the function runs, the stream is torn down and nothing
   * more is written.
   *
   * @throws SafewriteException (a subclass per {@link ErrorKind}) when the call fails
   */
  public Result transact(ObjectRef ref, TransactFunction<ObjectNode> function) {
    return transact(ref, ObjectNode.class, function, WriteConfig.DEFAULTS);
  }

  /** {@link #transact(ObjectRef, TransactFunction)} with the options of {@code config}. */
  public Result transact(ObjectRef ref, TransactFunction<ObjectNode> function, WriteConfig config) {
    return transact(ref, ObjectNode.class, function, config);
  }

  /**
   * {@link #transact(ObjectRef, TransactFunction)} handing the function the object as an instance
   * of {@code type}, read by Jackson: your fabric8 class (a java-operator-sdk custom resource such
   * as {@code Widget.class}, a {@code ConfigMap}) or any class Jackson binds. Change {@link
   * Fresh#object()} in place and return {@code null}: what is written is the fresh object with your
   * changes, so fields your class does not have are kept.
   *
   * <pre>{@code
   * client.transact(ObjectRef.of(widget), Widget.class, fresh -> {
   *   fresh.object().getStatus().setCapacity(fresh.object().getSpec().getSize() * 10L);
   *   return null;
   * });
   * }</pre>
   */
  public <T> Result transact(ObjectRef ref, Class<T> type, TransactFunction<T> function) {
    return transact(ref, type, function, WriteConfig.DEFAULTS);
  }

  /** {@link #transact(ObjectRef, Class, TransactFunction)} with the options of {@code config}. */
  public <T> Result transact(
      ObjectRef ref, Class<T> type, TransactFunction<T> function, WriteConfig config) {
    return transact(ref, false, type, function, config);
  }

  /**
   * {@link #transact(ObjectRef, TransactFunction)} writing the function's changes to the status
   * subresource only.
   */
  public Result transactStatus(ObjectRef ref, TransactFunction<ObjectNode> function) {
    return transactStatus(ref, ObjectNode.class, function, WriteConfig.DEFAULTS);
  }

  /** {@link #transactStatus(ObjectRef, TransactFunction)} with the options of {@code config}. */
  public Result transactStatus(
      ObjectRef ref, TransactFunction<ObjectNode> function, WriteConfig config) {
    return transactStatus(ref, ObjectNode.class, function, config);
  }

  /** {@link #transact(ObjectRef, Class, TransactFunction)} writing the status subresource only. */
  public <T> Result transactStatus(ObjectRef ref, Class<T> type, TransactFunction<T> function) {
    return transactStatus(ref, type, function, WriteConfig.DEFAULTS);
  }

  /**
   * {@link #transactStatus(ObjectRef, Class, TransactFunction)} with the options of {@code config}.
   */
  public <T> Result transactStatus(
      ObjectRef ref, Class<T> type, TransactFunction<T> function, WriteConfig config) {
    return transact(ref, true, type, function, config);
  }

  /**
   * Runs a transaction opened with a {@code TransactBegin} built with the generated types, the
   * function given the object as an {@link ObjectNode}.
   */
  public Result transact(TransactBegin begin, TransactFunction<ObjectNode> function) {
    return transact(begin, ObjectNode.class, function, null);
  }

  private <T> Result transact(
      ObjectRef ref,
      boolean status,
      Class<T> type,
      TransactFunction<T> function,
      WriteConfig config) {
    Objects.requireNonNull(ref, "ref");
    Objects.requireNonNull(config, "config");
    TransactBegin.Builder begin =
        TransactBegin.newBuilder().setTarget(ref.toProto()).setStatus(status);
    config.fill(begin::setPreconditions, begin::setRetryPolicy, begin::setOptions);
    return transact(begin.build(), type, function, config.timeout);
  }

  private <T> Result transact(
      TransactBegin begin, Class<T> type, TransactFunction<T> function, Duration timeout) {
    Objects.requireNonNull(begin, "begin");
    Objects.requireNonNull(type, "type");
    Objects.requireNonNull(function, "function");
    boolean keyed = !begin.getOptions().getIdempotencyKey().isEmpty();
    TransactBegin sent =
        fence == null ? begin : begin.toBuilder().setOptions(fenced(begin.getOptions())).build();
    return Transaction.run(bounded(async, timeout), sent, type, function, keyed);
  }

  /**
   * The options of a write of this view: with its fence; the same fence given again is accepted,
   * another one refused.
   */
  private WriteOptions fenced(WriteOptions options) {
    return options.toBuilder().setFence(fenceOf(options.hasFence(), options.getFence())).build();
  }

  private dev.safewrite.v1.Fence fenceOf(boolean given, dev.safewrite.v1.Fence own) {
    dev.safewrite.v1.Fence view = fence.toProto();
    if (given && !own.equals(view)) {
      throw new IllegalArgumentException(
          "a client fenced with "
              + fence
              + " writes under that fence only; the call asked for "
              + new Fence(own.getLeaseNamespace(), own.getLeaseName(), own.getEpoch()));
    }
    return view;
  }

  /**
   * Deletes the object ({@code Delete}), with the default options: the sidecar reads it live and
   * sends one DELETE conditioned on the uid and resourceVersion it read, so it deletes exactly the
   * object it read; a writer that changed it in between makes the sidecar read and decide again. An
   * object that is not there is an answer, {@link DeleteOutcome#GONE}, not an error.
   *
   * <p>A delete is always safe to send again, also after {@link DeadlineExceededException} or
   * {@link UnavailableException}: a DELETE that was applied makes the next call answer {@code GONE}
   * or {@code DELETING}. So every failure that the proto says may succeed later is {@link
   * SafewriteException#isRetryable()}.
   *
   * @throws PermissionDeniedException when the sidecar's policy does not allow the delete ({@code
   *     POLICY_DENIED}; nothing is sent) or the API server refuses the sidecar
   * @throws SafewriteException (a subclass per {@link ErrorKind}) when the call fails otherwise
   */
  public DeleteResult delete(ObjectRef ref) {
    return delete(ref, DeleteConfig.DEFAULTS);
  }

  /**
   * {@link #delete(ObjectRef)} with the options of {@code config}: preconditions checked on the
   * fresh object before every DELETE, propagation policy, dry run, retry policy, fence, timeout.
   *
   * @throws PreconditionFailedException when a precondition is false on the fresh object (a uid
   *     that is not the object's, a CEL condition; {@link SafewriteException#currentObject()}
   *     carries it), or a fenced delete is refused ({@code REASON_NOT_LEADER}, {@code
   *     REASON_FENCED}); nothing is deleted
   * @throws ConflictException when an exact resourceVersion is not the object's ({@code
   *     REASON_RESOURCE_VERSION_MISMATCH}), not retried; or conflicts outlasted the retry policy
   * @throws SafewriteException as {@link #delete(ObjectRef)} does
   */
  public DeleteResult delete(ObjectRef ref, DeleteConfig config) {
    Objects.requireNonNull(ref, "ref");
    Objects.requireNonNull(config, "config");
    return delete(config.request(ref), config.timeout);
  }

  /**
   * Sends a {@code Delete} request as built with the generated types, bounded by the client's
   * default timeout and the current Context's deadline.
   */
  public DeleteResult delete(DeleteRequest request) {
    return delete(Objects.requireNonNull(request, "request"), null);
  }

  private DeleteResult delete(DeleteRequest given, Duration timeout) {
    DeleteRequest request =
        fence == null
            ? given
            : given.toBuilder().setFence(fenceOf(given.hasFence(), given.getFence())).build();
    // A delete whose answer was lost is safe to send again: it answers GONE or DELETING.
    return DeleteResult.fromProto(unary(true, timeout, stub -> stub.delete(request)));
  }

  /**
   * Campaigns for the Lease of {@code config} through the sidecar ({@code Lead}), as client-go's
   * leader election does, and returns the campaign once the sidecar accepted it. Close the {@link
   * Leadership} to end it: the sidecar then releases the Lease at once if the caller holds it.
   *
   * <p>The campaign is not bounded by this client's default timeout nor by the current {@link
   * io.grpc.Context}; only waiting for the sidecar to accept it is bounded by the default timeout.
   *
   * <pre>{@code
   * try (Leadership leadership = client.lead(LeadConfig.builder("default", "counter").build())) {
   *   leadership.whileLeading((fenced, term) -> {
   *     while (term.isLeading()) {
   *       fenced.update(ref, INCREMENT); // refused, never applied, once another leads
   *     }
   *   });
   * }
   * }</pre>
   *
   * @throws InvalidException when the sidecar refuses the config; {@link
   *     SafewriteException#fieldViolations()} name the field ({@code name}, {@code renew_deadline},
   *     ...)
   * @throws PermissionDeniedException when the sidecar's policy does not allow campaigning for the
   *     Lease ({@code POLICY_DENIED})
   * @throws UnavailableException when the sidecar is unreachable
   * @throws DeadlineExceededException when the sidecar did not accept the campaign within the
   *     client's default timeout
   */
  public Leadership lead(LeadConfig config) {
    Objects.requireNonNull(config, "config");
    return Leadership.open(
        this,
        config,
        () -> async.getChannel().newCall(WriterServiceGrpc.getLeadMethod(), async.getCallOptions()),
        defaultTimeout);
  }

  /**
   * A view of this client whose writes ({@code update}, {@code patchStatus}, {@code transact},
   * {@code delete}, the generated-request forms included) all carry {@code fence}, so that a
   * controller's code writes fenced without saying so per call. It shares this client's connection:
   * closing the view does nothing, closing this client closes both. Reads are not fenced.
   *
   * <p>A call whose config (or request) carries the same fence is sent as it is; one that carries
   * another fence throws {@link IllegalArgumentException} before anything is sent: the view writes
   * under its own fence only. {@code fenced} on a view gives a view with the new fence.
   */
  public SafewriteClient fenced(Fence fence) {
    return new SafewriteClient(this, Objects.requireNonNull(fence, "fence"));
  }

  /** The fence every write of this client carries: present for a {@link #fenced(Fence)} view. */
  public java.util.Optional<Fence> fence() {
    return java.util.Optional.ofNullable(fence);
  }

  /**
   * Closes the connection (one made by this client), waiting briefly for calls in flight. A {@link
   * #fenced(Fence)} view leaves it open.
   */
  @Override
  public void close() {
    if (ownedChannel == null) {
      return;
    }
    ownedChannel.shutdown();
    try {
      if (!ownedChannel.awaitTermination(5, TimeUnit.SECONDS)) {
        ownedChannel.shutdownNow();
      }
    } catch (InterruptedException interrupted) {
      ownedChannel.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }

  private <S extends AbstractStub<S>> S bounded(S stub, Duration timeout) {
    Duration bound = timeout != null ? timeout : defaultTimeout;
    return bound == null ? stub : stub.withDeadlineAfter(bound.toNanos(), TimeUnit.NANOSECONDS);
  }

  /**
   * The gRPC target for an address, as {@link #connect(String)} takes it; {@code env} is read for
   * {@code SAFEWRITE_ADDRESS} when the address is empty, and {@link #DEFAULT_ADDRESS} stands in
   * when that is unset or empty too.
   */
  static String target(String address, Map<String, String> env) {
    String given = address == null ? "" : address.strip();
    if (given.isEmpty()) {
      given = Objects.requireNonNullElse(env.get(ADDRESS_ENV), "").strip();
    }
    if (given.isEmpty()) {
      given = DEFAULT_ADDRESS;
    }
    if (given.startsWith("http://")) {
      given = given.substring("http://".length());
      while (given.endsWith("/")) {
        given = given.substring(0, given.length() - 1);
      }
    }
    if (given.startsWith("/")) {
      return "unix://" + given;
    }
    if (given.startsWith("https://")) {
      throw new IllegalArgumentException(
          "TLS is not dialled by address; make the channel yourself and use "
              + "SafewriteClient.forChannel: "
              + given);
    }
    if (given.startsWith("unix:") || given.contains(":///")) {
      return given;
    }
    return "dns:///" + given;
  }

  /** Builds a {@link SafewriteClient}. */
  public static final class Builder {
    private String address;
    private Channel channel;
    private String token;
    private boolean propagateTrace = true;
    private Duration defaultTimeout;
    private boolean waitForReady;
    private Map<String, String> env = System.getenv();

    private Builder() {}

    /** See {@link SafewriteClient#connect(String)}; unset means {@code SAFEWRITE_ADDRESS}. */
    public Builder address(String address) {
      this.address = address;
      return this;
    }

    /**
     * Calls go over {@code channel}, which you made and own (TLS, interceptors), instead of one
     * made for an address; {@link SafewriteClient#close()} leaves it open. Not with {@link
     * #address(String)}.
     */
    public Builder channel(Channel channel) {
      this.channel = Objects.requireNonNull(channel, "channel");
      return this;
    }

    /**
     * Sends {@code token} as {@code authorization: Bearer <token>} on every call, as a sidecar
     * started with {@code --token-file} requires (without it calls fail with {@link
     * UnauthenticatedException}, reason {@code TOKEN_REQUIRED}; with another token, {@code
     * TOKEN_INVALID}). Surrounding whitespace is stripped, as the sidecar strips its file's.
     *
     * @throws IllegalArgumentException when the token is empty or only whitespace, or holds a
     *     character a gRPC metadata value cannot carry (anything but printable ASCII and space,
     *     e.g. a newline)
     */
    public Builder token(String token) {
      this.token = CallHeaders.checkToken(Objects.requireNonNull(token, "token"));
      return this;
    }

    /**
     * Whether calls carry the current OpenTelemetry span's context as W3C {@code traceparent} and
     * {@code tracestate}, so that the sidecar's span of the call joins the caller's trace; true by
     * default. It needs {@code io.opentelemetry:opentelemetry-api} on the class path (an optional
     * dependency); without it, or when no valid span is current, nothing is sent.
     */
    public Builder propagateTrace(boolean propagateTrace) {
      this.propagateTrace = propagateTrace;
      return this;
    }

    /**
     * Bounds every call that sets no {@link WriteConfig.Builder#timeout(Duration)} of its own.
     *
     * @throws IllegalArgumentException when the timeout is not positive
     */
    public Builder defaultTimeout(Duration timeout) {
      this.defaultTimeout = WriteConfig.positive(timeout);
      return this;
    }

    /**
     * Calls wait, within their deadline, for the sidecar to become reachable (e.g. while it starts
     * beside the controller) instead of failing at once with {@link UnavailableException}.
     */
    public Builder waitForReady(boolean waitForReady) {
      this.waitForReady = waitForReady;
      return this;
    }

    /** The environment {@code SAFEWRITE_ADDRESS} is read from; for tests. */
    Builder env(Map<String, String> env) {
      this.env = env;
      return this;
    }

    /**
     * @throws IllegalStateException when both a channel and an address are given
     */
    public SafewriteClient build() {
      if (channel != null) {
        if (address != null) {
          throw new IllegalStateException("give the client a channel or an address, not both");
        }
        return new SafewriteClient(
            null,
            CallHeaders.intercept(channel, token, propagateTrace),
            defaultTimeout,
            waitForReady);
      }
      String target = target(address, env);
      ManagedChannelBuilder<?> dial =
          Grpc.newChannelBuilder(target, InsecureChannelCredentials.create())
              .userAgent("safewrite-java")
              .maxInboundMessageSize(MAX_RESPONSE_BYTES);
      if (target.startsWith("unix:")) {
        // The default authority would be the socket path, which the sidecar refuses.
        dial.overrideAuthority("localhost");
        if (dial instanceof NettyChannelBuilder netty) {
          // TCP keepalive means nothing on a unix socket; Netty would warn per connection.
          netty.withOption(ChannelOption.SO_KEEPALIVE, null);
        }
      }
      ManagedChannel built = dial.build();
      return new SafewriteClient(
          built, CallHeaders.intercept(built, token, propagateTrace), defaultTimeout, waitForReady);
    }
  }
}
