package dev.safewrite;

import dev.safewrite.v1.LeadRequest;
import dev.safewrite.v1.LeadResponse;
import dev.safewrite.v1.WriterServiceGrpc;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.AbstractStub;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * The call plumbing every part of the client shares: the stubs over one channel, the deadline of a
 * call and the decoding of a failed one. A {@link SafewriteClient} and its fenced views share one.
 */
final class Calls {
  /** Bounds one answer of the sidecar: objects as JSON stay far below, but over 4 MiB. */
  static final int MAX_RESPONSE_BYTES = 64 << 20;

  private final WriterServiceGrpc.WriterServiceBlockingStub blocking;
  private final WriterServiceGrpc.WriterServiceStub async;
  private final Duration defaultTimeout;

  Calls(Channel channel, Duration defaultTimeout, boolean waitForReady) {
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
  }

  /** The client's default timeout; null when it has none. */
  Duration defaultTimeout() {
    return defaultTimeout;
  }

  /**
   * Makes a unary call on the blocking stub, bounded by {@code timeout} (or the defaults); a
   * failure is decoded, knowing whether the request is safe to send again when its answer was lost
   * (a write with an idempotency key, or a read).
   */
  <R> R unary(
      boolean resendSafe,
      Duration timeout,
      Function<WriterServiceGrpc.WriterServiceBlockingStub, R> call) {
    try {
      return call.apply(bounded(blocking, timeout));
    } catch (StatusRuntimeException failure) {
      throw Errors.decode(failure, resendSafe);
    }
  }

  /** The streaming stub, bounded by {@code timeout} (or the client's default timeout). */
  WriterServiceGrpc.WriterServiceStub streaming(Duration timeout) {
    return bounded(async, timeout);
  }

  /** A new {@code Lead} call, bounded by nothing: a campaign outlives any call's deadline. */
  ClientCall<LeadRequest, LeadResponse> newLeadCall() {
    return async.getChannel().newCall(WriterServiceGrpc.getLeadMethod(), async.getCallOptions());
  }

  private <S extends AbstractStub<S>> S bounded(S stub, Duration timeout) {
    Duration bound = timeout != null ? timeout : defaultTimeout;
    return bound == null ? stub : stub.withDeadlineAfter(bound.toNanos(), TimeUnit.NANOSECONDS);
  }
}
