package dev.safewrite;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A channel that records the metadata and the messages of every call started on it and fails the
 * call at once, with UNAVAILABLE or the failure it was given, to see what a client sends and how it
 * reads an answer without a sidecar.
 */
final class RecordingChannel extends Channel {
  /** The metadata of each call started, in order. */
  final List<Metadata> started = new CopyOnWriteArrayList<>();

  /** The messages sent, in order (a unary call sends its request before it is answered). */
  final List<Object> sent = new CopyOnWriteArrayList<>();

  private final Status status;
  private final Metadata trailers;

  RecordingChannel() {
    this(Status.UNAVAILABLE.withDescription("recorded").asRuntimeException());
  }

  /** A channel that fails every call with {@code failure}'s status and trailers (its details). */
  RecordingChannel(StatusRuntimeException failure) {
    this.status = failure.getStatus();
    this.trailers = failure.getTrailers() == null ? new Metadata() : failure.getTrailers();
  }

  /** The values of {@code name} in each call's metadata, in order; null for a call without it. */
  List<String> values(String name) {
    Metadata.Key<String> key = Metadata.Key.of(name, Metadata.ASCII_STRING_MARSHALLER);
    return started.stream().map(headers -> headers.get(key)).toList();
  }

  @Override
  public <Q, R> ClientCall<Q, R> newCall(MethodDescriptor<Q, R> method, CallOptions options) {
    return new ClientCall<>() {
      @Override
      public void start(Listener<R> listener, Metadata headers) {
        started.add(headers);
        Metadata answered = new Metadata();
        answered.merge(trailers);
        listener.onClose(status, answered);
      }

      @Override
      public void request(int messages) {}

      @Override
      public void cancel(String message, Throwable cause) {}

      @Override
      public void halfClose() {}

      @Override
      public void sendMessage(Q message) {
        sent.add(message);
      }
    };
  }

  @Override
  public String authority() {
    return "recording";
  }
}
