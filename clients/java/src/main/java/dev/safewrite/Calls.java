package dev.safewrite;

import com.google.protobuf.Message;
import dev.safewrite.v1.CapabilitiesRequest;
import dev.safewrite.v1.LeadRequest;
import dev.safewrite.v1.LeadResponse;
import dev.safewrite.v1.WriterServiceGrpc;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.Deadline;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.AbstractStub;
import io.grpc.stub.ClientCalls;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The call plumbing every part of the client shares: the stubs over one channel, the deadline of a
 * call, the decoding of a failed one, and the skew check of what a call needs against what the
 * sidecar knows ({@link Skew}). A {@link SafewriteClient} and its fenced views share one.
 */
final class Calls {
  /** Bounds one answer of the sidecar: objects as JSON stay far below, but over 4 MiB. */
  static final int MAX_RESPONSE_BYTES = 64 << 20;

  /** How long the Capabilities call may take at most, whatever the call it is made for. */
  static final Duration CAPABILITIES_TIMEOUT = Duration.ofSeconds(10);

  /** What the sidecar knows; null until asked, and again after an asking that failed. */
  private volatile Skew.Known known;

  /** One asking at a time; the others wait for its answer. */
  private final ReentrantLock asking = new ReentrantLock();

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
   * Makes a unary call of {@code method} on the blocking stub, bounded by {@code timeout} (or the
   * defaults), once {@link #check} passed; a failure is decoded, knowing whether the request is
   * safe to send again when its answer was lost (a write with an idempotency key, or a read).
   */
  <Q extends Message, R> R unary(
      MethodDescriptor<Q, R> method, Q request, boolean resendSafe, Duration timeout) {
    // The call's time budget starts now, and covers asking the sidecar's Capabilities.
    Deadline deadline = deadline(timeout);
    check(method, request, deadline);
    WriterServiceGrpc.WriterServiceBlockingStub stub = bounded(blocking, deadline);
    try {
      return ClientCalls.blockingUnaryCall(
          stub.getChannel(), method, stub.getCallOptions(), request);
    } catch (StatusRuntimeException failure) {
      throw Errors.decode(failure, resendSafe);
    }
  }

  /**
   * Refuses, before anything is sent, a call of {@code method} with {@code request} (a stream's
   * first message) that needs an RPC, a field or an enum value added after 0.1.0 which the sidecar
   * lacks: {@link PreconditionFailedException}, reason {@code UNKNOWN_FIELD}; and fails it, before
   * anything is sent, when what the sidecar knows cannot be learned ({@link #known}). A call that
   * needs none of them costs a lookup and asks nothing.
   *
   * @throws PreconditionFailedException the refusal
   * @throws SafewriteException the failure of learning what the sidecar knows, as {@link #known}
   *     throws it
   */
  void check(MethodDescriptor<?, ?> method, Message request, Deadline deadline) {
    List<Skew.Feature> needs = Skew.features(method.getFullMethodName(), request);
    if (needs.isEmpty()) {
      return;
    }
    Skew.Known sidecar = known(deadline, needs.get(0));
    Skew.Feature missing = sidecar.lacking(needs);
    if (missing != null) {
      throw Skew.refusal(missing, sidecar);
    }
  }

  /**
   * What the sidecar knows: asked once (rpc Capabilities) and kept; concurrent callers wait for the
   * one asking. UNIMPLEMENTED is a sidecar older than 0.2.0 (kept too). Any other failure
   * (unreachable, RESOURCE_EXHAUSTED, a deadline, a refused token) is not kept, and the next call
   * that needs it asks again; this one fails closed: it throws, nothing is sent, since a sidecar
   * older than 0.2.0 would drop what it does not know (a write's fence) and serve the rest. The
   * Capabilities call is bounded by the call's deadline (null: none), the current {@link
   * io.grpc.Context}'s and {@link #CAPABILITIES_TIMEOUT}; waiting for another caller's by the first
   * two.
   *
   * @throws SafewriteException {@link Skew#unlearned} of the failure, naming {@code needed} (a
   *     feature the call needs): the Capabilities call's status, DEADLINE_EXCEEDED when the
   *     deadline passed while another caller asked, CANCELLED when the thread was interrupted
   *     meanwhile
   */
  Skew.Known known(Deadline deadline, Skew.Feature needed) {
    Skew.Known sidecar = known;
    if (sidecar != null) {
      return sidecar;
    }
    lockAsking(deadline, needed);
    try {
      if (known != null) {
        return known;
      }
      Deadline bound = Deadline.after(CAPABILITIES_TIMEOUT.toNanos(), TimeUnit.NANOSECONDS);
      if (deadline != null) {
        bound = bound.minimum(deadline);
      }
      try {
        known =
            Skew.Known.of(
                bounded(blocking, bound).capabilities(CapabilitiesRequest.getDefaultInstance()));
      } catch (StatusRuntimeException failure) {
        if (failure.getStatus().getCode() != Status.Code.UNIMPLEMENTED) {
          throw Skew.unlearned(needed, failure);
        }
        known = Skew.Known.OLDER;
      }
      return known;
    } finally {
      asking.unlock();
    }
  }

  /**
   * Takes {@link #asking}, waiting for another caller's Capabilities call at most until {@code
   * deadline} (null: none) or the current {@link io.grpc.Context}'s deadline, whichever is sooner.
   */
  private void lockAsking(Deadline deadline, Skew.Feature needed) {
    Deadline wait = deadline;
    Deadline context = io.grpc.Context.current().getDeadline();
    if (context != null) {
      wait = wait == null ? context : wait.minimum(context);
    }
    try {
      if (wait == null) {
        asking.lockInterruptibly();
      } else if (!asking.tryLock(wait.timeRemaining(TimeUnit.NANOSECONDS), TimeUnit.NANOSECONDS)) {
        throw Skew.unlearned(
            needed,
            Status.DEADLINE_EXCEEDED
                .withDescription("waited for another call's, past this call's deadline")
                .asRuntimeException());
      }
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      throw Skew.unlearned(
          needed,
          Status.CANCELLED
              .withDescription("the calling thread was interrupted, waiting for another call's")
              .withCause(interrupted)
              .asRuntimeException());
    }
  }

  /** The streaming stub, bounded by {@code deadline} (null: none). */
  WriterServiceGrpc.WriterServiceStub streaming(Deadline deadline) {
    return bounded(async, deadline);
  }

  /** The deadline of a call bounded by {@code timeout}, else the client's default; null: none. */
  Deadline deadline(Duration timeout) {
    Duration bound = timeout != null ? timeout : defaultTimeout;
    return bound == null ? null : Deadline.after(bound.toNanos(), TimeUnit.NANOSECONDS);
  }

  /** A new {@code Lead} call, bounded by nothing: a campaign outlives any call's deadline. */
  ClientCall<LeadRequest, LeadResponse> newLeadCall() {
    return async.getChannel().newCall(WriterServiceGrpc.getLeadMethod(), async.getCallOptions());
  }

  private static <S extends AbstractStub<S>> S bounded(S stub, Deadline deadline) {
    return deadline == null ? stub : stub.withDeadline(deadline);
  }
}
