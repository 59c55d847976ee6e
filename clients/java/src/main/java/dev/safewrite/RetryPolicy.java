package dev.safewrite;

import com.google.protobuf.Duration;
import java.util.Objects;

/**
 * Bounds the sidecar's retry loop for one call. Unset values take the sidecar's defaults (50
 * attempts, backoff from 10 ms doubling to 1 s, full jitter); the call's deadline always bounds the
 * loop as well.
 *
 * <pre>{@code
 * RetryPolicy.builder().maxAttempts(5).initialBackoff(Duration.ofMillis(20)).build()
 * RetryPolicy.requeue()   // one attempt: a conflict fails at once with ConflictException
 * }</pre>
 */
public final class RetryPolicy {
  private final dev.safewrite.v1.RetryPolicy proto;

  private RetryPolicy(dev.safewrite.v1.RetryPolicy proto) {
    this.proto = proto;
  }

  /** One attempt only: a conflict fails at once, for controllers that prefer to requeue. */
  public static RetryPolicy requeue() {
    return new RetryPolicy(dev.safewrite.v1.RetryPolicy.newBuilder().setRequeue(true).build());
  }

  public static Builder builder() {
    return new Builder();
  }

  dev.safewrite.v1.RetryPolicy toProto() {
    return proto;
  }

  @Override
  public String toString() {
    return "RetryPolicy(" + proto.toString().replace('\n', ' ').trim() + ")";
  }

  /** Builds a {@link RetryPolicy}. */
  public static final class Builder {
    private final dev.safewrite.v1.RetryPolicy.Builder proto =
        dev.safewrite.v1.RetryPolicy.newBuilder();

    private Builder() {}

    /** The most attempts to make, the first included; 0 takes the sidecar's default. */
    public Builder maxAttempts(int attempts) {
      if (attempts < 0) {
        throw new IllegalArgumentException("maxAttempts must not be negative: " + attempts);
      }
      proto.setMaxAttempts(attempts);
      return this;
    }

    /** The backoff before the second attempt (the ceiling of its jitter). */
    public Builder initialBackoff(java.time.Duration backoff) {
      proto.setInitialBackoff(duration(backoff));
      return this;
    }

    /** The cap on any single backoff. */
    public Builder maxBackoff(java.time.Duration backoff) {
      proto.setMaxBackoff(duration(backoff));
      return this;
    }

    /** One attempt only; overrides {@link #maxAttempts}. */
    public Builder requeue(boolean requeue) {
      proto.setRequeue(requeue);
      return this;
    }

    public RetryPolicy build() {
      return new RetryPolicy(proto.build());
    }

    private static Duration duration(java.time.Duration value) {
      Objects.requireNonNull(value, "backoff");
      if (value.isNegative()) {
        throw new IllegalArgumentException("a backoff must not be negative: " + value);
      }
      return Duration.newBuilder().setSeconds(value.getSeconds()).setNanos(value.getNano()).build();
    }
  }
}
