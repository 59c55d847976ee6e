package dev.safewrite;

import dev.safewrite.v1.DeleteRequest;
import dev.safewrite.v1.Preconditions;
import java.time.Duration;
import java.util.Objects;

/**
 * The options of a {@link SafewriteClient#delete(ObjectRef, DeleteConfig)}: preconditions checked
 * on the fresh object before every DELETE, the propagation policy, dry run, the retry policy, a
 * fence and the call's timeout. Immutable, built with {@link #builder()}, reusable.
 *
 * <pre>{@code
 * DeleteConfig config = DeleteConfig.builder()
 *     .uid(widget.getMetadata().getUid())
 *     .preconditionCel("object.status.phase == 'Done'")
 *     .propagationPolicy(PropagationPolicy.FOREGROUND)
 *     .build();
 * client.delete(ref, config);
 * }</pre>
 */
public final class DeleteConfig {
  /** Nothing set: what a delete without a config uses. */
  static final DeleteConfig DEFAULTS = builder().build();

  private final DeleteRequest request;

  /** Null: the client's default timeout, if any. */
  final Duration timeout;

  private DeleteConfig(Builder builder) {
    DeleteRequest.Builder request = builder.request.clone();
    Preconditions preconditions = builder.preconditions.build();
    if (!preconditions.equals(Preconditions.getDefaultInstance())) {
      request.setPreconditions(preconditions);
    }
    this.request = request.build();
    this.timeout = builder.timeout;
  }

  /** A builder with nothing set. */
  public static Builder builder() {
    return new Builder();
  }

  /** A builder starting from this config. */
  public Builder toBuilder() {
    Builder builder = new Builder();
    builder.request.mergeFrom(request).clearPreconditions();
    builder.preconditions.mergeFrom(request.getPreconditions());
    builder.timeout = timeout;
    return builder;
  }

  /** The request for {@code ref} with this config's options. */
  DeleteRequest request(ObjectRef ref) {
    return request.toBuilder().setTarget(ref.toProto()).build();
  }

  @Override
  public String toString() {
    String text = request.toString().replace('\n', ' ').strip();
    if (timeout != null) {
      text = (text + " timeout: " + timeout).strip();
    }
    return "DeleteConfig(" + text + ")";
  }

  /** Builds a {@link DeleteConfig}; setting an option again replaces it. */
  public static final class Builder {
    private final DeleteRequest.Builder request = DeleteRequest.newBuilder();
    private final Preconditions.Builder preconditions = Preconditions.newBuilder();
    private Duration timeout;

    private Builder() {}

    /**
     * Precondition: the object's metadata.uid must equal {@code uid}, so an object deleted and
     * recreated under the same name is not deleted ({@link PreconditionFailedException}).
     */
    public Builder uid(String uid) {
      preconditions.setUid(Objects.requireNonNull(uid, "uid"));
      return this;
    }

    /**
     * Strict compare-and-swap: the object's metadata.resourceVersion must equal {@code
     * resourceVersion}; otherwise the call fails at once with {@link ConflictException} (reason
     * {@code RESOURCE_VERSION_MISMATCH}), nothing deleted, no retry.
     */
    public Builder resourceVersion(String resourceVersion) {
      preconditions.setResourceVersion(Objects.requireNonNull(resourceVersion, "resourceVersion"));
      return this;
    }

    /**
     * Precondition: a CEL expression over {@code object} that must return true on the fresh object,
     * e.g. {@code object.status.phase == 'Done'}. When false, the call fails with {@link
     * PreconditionFailedException} carrying the current object; nothing is deleted.
     */
    public Builder preconditionCel(String expression) {
      preconditions.setCel(Objects.requireNonNull(expression, "expression"));
      return this;
    }

    /** What happens to the object's dependents. Unset: the API server's default for the kind. */
    public Builder propagationPolicy(PropagationPolicy policy) {
      request.setPropagationPolicy(Objects.requireNonNull(policy, "policy").toProto());
      return this;
    }

    /** Whether the API server validates and admits the delete without persisting it. */
    public Builder dryRun(boolean dryRun) {
      request.setDryRun(dryRun);
      return this;
    }

    /** The retry policy of this call; see {@link RetryPolicy}. Unset: the sidecar's. */
    public Builder retryPolicy(RetryPolicy policy) {
      request.setRetryPolicy(Objects.requireNonNull(policy, "policy").toProto());
      return this;
    }

    /**
     * Makes the delete one a deposed leader cannot make: refused ({@link
     * PreconditionFailedException}, {@code REASON_NOT_LEADER}) unless the sidecar leads the fence's
     * Lease under its epoch, and ({@code REASON_FENCED}) when the object records a later epoch of
     * it. A delete records nothing. See {@link Fence}.
     */
    public Builder fence(Fence fence) {
      request.setFence(Objects.requireNonNull(fence, "fence").toProto());
      return this;
    }

    /**
     * Bounds the call, every attempt and backoff included, as {@link
     * WriteConfig.Builder#timeout(Duration)}. Unset: the client's default timeout.
     *
     * @throws IllegalArgumentException when the timeout is not positive
     */
    public Builder timeout(Duration timeout) {
      this.timeout = WriteConfig.positive(timeout);
      return this;
    }

    public DeleteConfig build() {
      return new DeleteConfig(this);
    }
  }
}
