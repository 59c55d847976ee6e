package dev.safewrite;

import dev.safewrite.v1.TransactBegin;
import dev.safewrite.v1.TransactProposal;
import dev.safewrite.v1.TransactRequest;
import dev.safewrite.v1.TransactResponse;
import dev.safewrite.v1.WriterServiceGrpc.WriterServiceStub;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * One Transact stream, run on the caller's thread: send {@code begin}, answer every {@code fresh}
 * object with the function's proposal for that attempt, return the {@code result}. gRPC's callbacks
 * only queue what arrives.
 */
final class Transaction<T> implements ClientResponseObserver<TransactRequest, TransactResponse> {
  /** Bounds the abort reason sent for a function's exception. */
  private static final int MAX_ABORT_REASON = 1024;

  private sealed interface Event permits Received, Failed, Completed {}

  private record Received(TransactResponse response) implements Event {}

  private record Failed(Throwable error) implements Event {}

  private record Completed() implements Event {}

  private final BlockingQueue<Event> events = new LinkedBlockingQueue<>();
  private final TransactFunction<T> function;
  private final Class<T> type;
  private final boolean keyed;
  private ClientCallStreamObserver<TransactRequest> requests;

  private Transaction(TransactFunction<T> function, Class<T> type, boolean keyed) {
    this.function = function;
    this.type = type;
    this.keyed = keyed;
  }

  /**
   * Runs a transaction on {@code stub}, whose deadline bounds it, handing {@code function} the
   * fresh objects as {@code type}. {@code keyed} says whether {@code begin} carries an idempotency
   * key.
   */
  static <T> Result run(
      WriterServiceStub stub,
      TransactBegin begin,
      Class<T> type,
      TransactFunction<T> function,
      boolean keyed) {
    Transaction<T> transaction = new Transaction<>(function, type, keyed);
    stub.transact(transaction);
    boolean done = false;
    try {
      Result result = transaction.exchange(begin);
      done = true;
      return result;
    } finally {
      if (!done) {
        // Every other way out tears the stream down: the sidecar writes nothing after it.
        transaction.requests.cancel("the transaction ended on the client", null);
      }
    }
  }

  private Result exchange(TransactBegin begin) {
    send(TransactRequest.newBuilder().setBegin(begin).build());
    RuntimeException functionFailure = null; // thrown once the sidecar confirms the abort
    boolean aborted = false;
    while (true) {
      Event event = next();
      if (event instanceof Received received) {
        TransactResponse response = received.response();
        switch (response.getMessageCase()) {
          case RESULT -> {
            requests.onCompleted();
            if (functionFailure != null) {
              throw functionFailure;
            }
            return Result.fromProto(response.getResult());
          }
          case FRESH -> {
            if (aborted) {
              if (functionFailure != null) {
                throw functionFailure;
              }
              throw new InternalException(
                  "the sidecar sent an object after the transaction was aborted");
            }
            Fresh<T> fresh = new Fresh<>(response.getFresh(), type);
            TransactProposal proposal;
            try {
              proposal = propose(fresh);
            } catch (RuntimeException failure) {
              functionFailure = failure;
              proposal = abortFor(failure, fresh);
            }
            aborted = proposal.hasAbort();
            send(TransactRequest.newBuilder().setProposal(proposal).build());
          }
          case MESSAGE_NOT_SET ->
              throw new InternalException("the sidecar sent an empty Transact message");
        }
      } else if (event instanceof Failed failed) {
        if (functionFailure != null) {
          throw functionFailure;
        }
        throw Errors.decode(failed.error(), keyed);
      } else {
        if (functionFailure != null) {
          throw functionFailure;
        }
        throw new InternalException("the Transact stream ended without a result");
      }
    }
  }

  private TransactProposal propose(Fresh<T> fresh) {
    Proposal proposal = function.apply(fresh);
    if (proposal == null) {
      proposal =
          fresh.objectTouched()
              ? Proposal.object((Object) fresh.object())
              : Proposal.object(fresh.objectJson());
    }
    return proposal.toProto(fresh);
  }

  private static TransactProposal abortFor(RuntimeException failure, Fresh<?> fresh) {
    String reason = String.valueOf(failure);
    if (reason.length() > MAX_ABORT_REASON) {
      reason = reason.substring(0, MAX_ABORT_REASON);
    }
    return Proposal.abort(reason).toProto(fresh);
  }

  private void send(TransactRequest request) {
    try {
      requests.onNext(request);
    } catch (IllegalStateException closed) {
      // The call has already ended (deadline, cancellation): its status is the next event.
    }
  }

  private Event next() {
    try {
      return events.take();
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      requests.cancel("the calling thread was interrupted", interrupted);
      throw Errors.decode(
          io.grpc.Status.CANCELLED
              .withDescription("the calling thread was interrupted")
              .withCause(interrupted)
              .asRuntimeException(),
          keyed);
    }
  }

  @Override
  public void beforeStart(ClientCallStreamObserver<TransactRequest> requestStream) {
    this.requests = requestStream;
  }

  @Override
  public void onNext(TransactResponse response) {
    events.add(new Received(response));
  }

  @Override
  public void onError(Throwable error) {
    events.add(new Failed(error));
  }

  @Override
  public void onCompleted() {
    events.add(new Completed());
  }
}
