package dev.safewrite;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.safewrite.v1.WriterServiceGrpc;
import io.grpc.Channel;
import io.grpc.ManagedChannel;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

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

  /** The channel this client made, closed by {@link #close()}; null when it was given one. */
  private final ManagedChannel ownedChannel;

  private final Calls calls;
  private final Writes writes;
  private final Reads reads;
  private final Deletes deletes;

  /** Null: writes carry the fence their config gives, if any. */
  private final Fence fence;

  private SafewriteClient(ManagedChannel ownedChannel, Calls calls, Fence fence) {
    this.ownedChannel = ownedChannel;
    this.calls = calls;
    this.fence = fence;
    this.writes = new Writes(calls, fence);
    this.reads = new Reads(calls);
    this.deletes = new Deletes(calls, fence);
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
    return writes.update(ref, mutation, config);
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
    return writes.patchStatus(ref, mutation, config);
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
    return reads.get(ref, minResourceVersion);
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
    return writes.transact(ref, false, type, function, config);
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
    return writes.transact(ref, true, type, function, config);
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
    return deletes.delete(ref, config);
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
   * @throws PreconditionFailedException ({@code REASON_UNKNOWN_FIELD}) when the sidecar is older
   *     than 0.2.0, which has no {@code Lead}: refused by this client, nothing sent
   */
  public Leadership lead(LeadConfig config) {
    Objects.requireNonNull(config, "config");
    calls.check(WriterServiceGrpc.getLeadMethod(), config.toProto(), calls.deadline(null));
    return Leadership.open(this, config, calls::newLeadCall, calls.defaultTimeout());
  }

  /**
   * A view of this client whose writes ({@code update}, {@code patchStatus}, {@code transact},
   * {@code delete}) all carry {@code fence}, so that a controller's code writes fenced without
   * saying so per call. It shares this client's connection: closing the view does nothing, closing
   * this client closes both. Reads are not fenced.
   *
   * <p>A call whose config carries the same fence is sent as it is; one that carries another fence
   * throws {@link IllegalArgumentException} before anything is sent: the view writes under its own
   * fence only. {@code fenced} on a view gives a view with the new fence.
   */
  public SafewriteClient fenced(Fence fence) {
    return new SafewriteClient(null, calls, Objects.requireNonNull(fence, "fence"));
  }

  /** The fence every write of this client carries: present for a {@link #fenced(Fence)} view. */
  public Optional<Fence> fence() {
    return Optional.ofNullable(fence);
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
            new Calls(
                CallHeaders.intercept(channel, token, propagateTrace),
                defaultTimeout,
                waitForReady),
            null);
      }
      ManagedChannel built = Channels.dial(Channels.target(address, env));
      return new SafewriteClient(
          built,
          new Calls(
              CallHeaders.intercept(built, token, propagateTrace), defaultTimeout, waitForReady),
          null);
    }
  }
}
