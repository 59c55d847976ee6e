package dev.safewrite;

import dev.safewrite.v1.Preconditions;
import dev.safewrite.v1.WriteOptions;
import java.time.Duration;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * The options of a call: preconditions, the retry policy, write options and the call's timeout.
 * Immutable, built with {@link #builder()}, and passed to {@link SafewriteClient#update(ObjectRef,
 * Mutation, WriteConfig)}, {@link SafewriteClient#patchStatus(ObjectRef, Mutation, WriteConfig)} or
 * {@link SafewriteClient#transact(ObjectRef, TransactFunction, WriteConfig)}; one config may serve
 * any number of calls (an idempotency key, though, names one change).
 *
 * <pre>{@code
 * WriteConfig config = WriteConfig.builder()
 *     .createIfMissing("{\"data\": {\"n\": \"0\"}}")
 *     .idempotencyKey(UUID.randomUUID().toString())
 *     .timeout(Duration.ofSeconds(10))
 *     .build();
 * client.update(ref, mutation, config);
 * }</pre>
 *
 * <p>Unset parts take the defaults: no preconditions, the sidecar's retry policy, and the client's
 * {@link SafewriteClient.Builder#defaultTimeout(Duration)}. A call without a config takes the
 * defaults for all of them.
 */
public final class WriteConfig {
  /** Nothing set: what a call without a config uses. */
  static final WriteConfig DEFAULTS = builder().build();

  final Preconditions preconditions;
  final WriteOptions options;

  /** Null: the sidecar's default policy. */
  final dev.safewrite.v1.RetryPolicy retryPolicy;

  /** Null: the client's default timeout, if any. */
  final Duration timeout;

  private WriteConfig(Builder builder) {
    this.preconditions = builder.preconditions.build();
    this.options = builder.options.build();
    this.retryPolicy = builder.retryPolicy;
    this.timeout = builder.timeout;
  }

  /** A builder with nothing set. */
  public static Builder builder() {
    return new Builder();
  }

  /**
   * A config of a generated request's parts, taken as they are; {@code retryPolicy} null for the
   * sidecar's. For tests: the conformance cases are written as requests.
   */
  static WriteConfig of(
      Preconditions preconditions, dev.safewrite.v1.RetryPolicy retryPolicy, WriteOptions options) {
    Builder builder = new Builder();
    builder.preconditions.mergeFrom(preconditions);
    builder.options.mergeFrom(options);
    builder.retryPolicy = retryPolicy;
    return builder.build();
  }

  /** A builder starting from this config's options, e.g. to give a copy another idempotency key. */
  public Builder toBuilder() {
    Builder builder = new Builder();
    builder.preconditions.mergeFrom(preconditions);
    builder.options.mergeFrom(options);
    builder.retryPolicy = retryPolicy;
    builder.timeout = timeout;
    return builder;
  }

  /**
   * Hands each part of the request that this config sets to its setter of a request builder
   * (UpdateWithRetry, PatchStatus or TransactBegin); parts left unset are not touched.
   */
  void fill(
      Consumer<Preconditions> setPreconditions,
      Consumer<dev.safewrite.v1.RetryPolicy> setRetryPolicy,
      Consumer<WriteOptions> setOptions) {
    if (!preconditions.equals(Preconditions.getDefaultInstance())) {
      setPreconditions.accept(preconditions);
    }
    if (retryPolicy != null) {
      setRetryPolicy.accept(retryPolicy);
    }
    if (hasOptions()) {
      setOptions.accept(options);
    }
  }

  boolean hasOptions() {
    return !options.equals(WriteOptions.getDefaultInstance());
  }

  @Override
  public String toString() {
    StringBuilder text = new StringBuilder("WriteConfig(");
    text.append(oneLine(preconditions)).append(oneLine(options));
    if (retryPolicy != null) {
      text.append("retry_policy { ").append(oneLine(retryPolicy)).append("} ");
    }
    if (timeout != null) {
      text.append("timeout: ").append(timeout);
    }
    return text.toString().strip() + ")";
  }

  private static String oneLine(com.google.protobuf.Message message) {
    String text = message.toString().replace('\n', ' ').strip();
    return text.isEmpty() ? "" : text + " ";
  }

  /** The one check of a timeout, for calls and the client's default. */
  static Duration positive(Duration timeout) {
    Objects.requireNonNull(timeout, "timeout");
    if (timeout.isNegative() || timeout.isZero()) {
      throw new IllegalArgumentException("a timeout must be positive: " + timeout);
    }
    return timeout;
  }

  /** Builds a {@link WriteConfig}; setting an option again replaces it. */
  public static final class Builder {
    private final Preconditions.Builder preconditions = Preconditions.newBuilder();
    private final WriteOptions.Builder options = WriteOptions.newBuilder();
    private dev.safewrite.v1.RetryPolicy retryPolicy;
    private Duration timeout;

    private Builder() {}

    /** Precondition: the object's metadata.uid must equal {@code uid}. */
    public Builder uid(String uid) {
      preconditions.setUid(Objects.requireNonNull(uid, "uid"));
      return this;
    }

    /**
     * Strict compare-and-swap: the object's metadata.resourceVersion must equal {@code
     * resourceVersion}; otherwise the call fails at once with {@link ConflictException} (reason
     * {@code RESOURCE_VERSION_MISMATCH}), nothing written, no retry.
     */
    public Builder resourceVersion(String resourceVersion) {
      preconditions.setResourceVersion(Objects.requireNonNull(resourceVersion, "resourceVersion"));
      return this;
    }

    /**
     * Precondition: a CEL expression over {@code object} that must return true, e.g. {@code
     * object.data.phase == "ready"}. When false, the call fails with {@link
     * PreconditionFailedException} carrying the current object.
     */
    public Builder preconditionCel(String expression) {
      preconditions.setCel(Objects.requireNonNull(expression, "expression"));
      return this;
    }

    /** The retry policy of this call; see {@link RetryPolicy}. Unset: the sidecar's. */
    public Builder retryPolicy(RetryPolicy policy) {
      this.retryPolicy = Objects.requireNonNull(policy, "policy").toProto();
      return this;
    }

    /** The field manager recorded in managedFields; required for server-side apply. */
    public Builder fieldManager(String manager) {
      options.setFieldManager(Objects.requireNonNull(manager, "manager"));
      return this;
    }

    /** Whether the API server validates and admits the write without persisting it. */
    public Builder dryRun(boolean dryRun) {
      options.setDryRun(dryRun);
      return this;
    }

    /**
     * The object to create, as JSON, when the target does not exist; the mutation is applied to it
     * first, so "create or change" applies the change once either way. apiVersion, kind, name and
     * namespace come from the target when absent. Not for status.
     */
    public Builder createIfMissing(String objectJson) {
      options.setCreateIfMissingJson(Objects.requireNonNull(objectJson, "objectJson"));
      return this;
    }

    /**
     * {@link #createIfMissing(String)} with the object as a Jackson {@code JsonNode}, or any object
     * Jackson writes, such as a fabric8 resource (fields left null are not written).
     *
     * @throws IllegalArgumentException when Jackson cannot write it
     */
    public Builder createIfMissing(Object object) {
      return createIfMissing(Json.text(Objects.requireNonNull(object, "object")));
    }

    /**
     * Makes this change exactly-once across lost answers: the sidecar records the key on the object
     * with the change, and a later attempt or call that finds it answers {@link
     * Result#alreadyApplied()} instead of changing the object again. It also makes a failure whose
     * write may have been applied retryable ({@link SafewriteException#isRetryable()}). One key per
     * intended change (e.g. a UUID), 1 to 128 characters of {@code [A-Za-z0-9._:-]}. Not accepted
     * with server-side apply nor for the status subresource.
     */
    public Builder idempotencyKey(String key) {
      options.setIdempotencyKey(Objects.requireNonNull(key, "key"));
      return this;
    }

    /** Whether to send this write on its own instead of committing it with concurrent ones. */
    public Builder writeAlone(boolean writeAlone) {
      options.setWriteAlone(writeAlone);
      return this;
    }

    /**
     * Makes the write one a deposed leader cannot make: the sidecar sends it only while it leads
     * the Lease {@code leaseNamespace/leaseName} under {@code epoch}, the epoch the Lead RPC
     * answered ({@code LeadResponse.epoch}), and only when the object records no later epoch of
     * that Lease. Otherwise the call fails with {@link PreconditionFailedException}, {@link
     * SafewriteException#writeFailureReason()} {@code REASON_NOT_LEADER} or {@code REASON_FENCED}
     * (a later leader wrote the object); nothing is written, and neither is retried.
     */
    public Builder fence(String leaseNamespace, String leaseName, long epoch) {
      return fence(new Fence(leaseNamespace, leaseName, epoch));
    }

    /**
     * {@link #fence(String, String, long)} with the fence of a leadership: {@link
     * LeaderTerm#fence()}, {@link Leadership#fence()}. A call of a {@link
     * SafewriteClient#fenced(Fence) fenced view} carries the view's fence without this, and refuses
     * a config with another one.
     */
    public Builder fence(Fence fence) {
      options.setFence(Objects.requireNonNull(fence, "fence").toProto());
      return this;
    }

    /**
     * Bounds the call, every attempt and backoff included; the sidecar gets it as the gRPC deadline
     * and never sleeps past it. The deadline of the current {@link io.grpc.Context} bounds the call
     * too, whichever is sooner. Unset: the client's default timeout.
     *
     * @throws IllegalArgumentException when the timeout is not positive
     */
    public Builder timeout(Duration timeout) {
      this.timeout = positive(timeout);
      return this;
    }

    public WriteConfig build() {
      return new WriteConfig(this);
    }
  }
}
