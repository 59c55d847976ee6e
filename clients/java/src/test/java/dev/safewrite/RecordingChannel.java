package dev.safewrite;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A channel that records the metadata of every call started on it and fails the call at once with
 * UNAVAILABLE, to see what a client sends without a sidecar.
 */
final class RecordingChannel extends Channel {
  /** The metadata of each call started, in order. */
  final List<Metadata> started = new CopyOnWriteArrayList<>();

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
        listener.onClose(Status.UNAVAILABLE.withDescription("recorded"), new Metadata());
      }

      @Override
      public void request(int messages) {}

      @Override
      public void cancel(String message, Throwable cause) {}

      @Override
      public void halfClose() {}

      @Override
      public void sendMessage(Q message) {}
    };
  }

  @Override
  public String authority() {
    return "recording";
  }
}
