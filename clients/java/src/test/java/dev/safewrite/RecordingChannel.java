package dev.safewrite;

import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumDescriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.MethodDescriptor;
import dev.safewrite.v1.CapabilitiesResponse;
import dev.safewrite.v1.WriterProto;
import dev.safewrite.v1.WriterServiceGrpc;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A channel that records the metadata and the messages of every call started on it and fails the
 * call at once, with UNAVAILABLE or the failure it was given, to see what a client sends and how it
 * reads an answer without a sidecar. Capabilities, which the client asks before a call that needs a
 * feature added after 0.1.0, is answered as a sidecar of this client's version answers it (it knows
 * everything), and is not recorded.
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

  /**
   * A Capabilities answer of a sidecar of {@code version} that knows every RPC, field and enum
   * value of this client's proto but those named in {@code without} (full names, as the answer
   * spells them).
   */
  static CapabilitiesResponse capabilities(String version, String... without) {
    List<String> methods = new ArrayList<>();
    for (MethodDescriptor method : WriterProto.getDescriptor().getServices().get(0).getMethods()) {
      methods.add(method.getService().getFullName() + "/" + method.getName());
    }
    List<String> fields = new ArrayList<>();
    List<String> values = new ArrayList<>();
    List<EnumDescriptor> enums = new ArrayList<>(WriterProto.getDescriptor().getEnumTypes());
    for (Descriptor message : WriterProto.getDescriptor().getMessageTypes()) {
      for (FieldDescriptor field : message.getFields()) {
        fields.add(field.getFullName());
      }
      enums.addAll(message.getEnumTypes());
    }
    for (EnumDescriptor type : enums) {
      for (EnumValueDescriptor value : type.getValues()) {
        values.add(type.getFullName() + "." + value.getName());
      }
    }
    List<String> left = List.of(without);
    methods.removeAll(left);
    fields.removeAll(left);
    values.removeAll(left);
    return CapabilitiesResponse.newBuilder()
        .setVersion(version)
        .addAllMethods(methods)
        .addAllFields(fields)
        .addAllEnumValues(values)
        .build();
  }

  @Override
  public <Q, R> ClientCall<Q, R> newCall(
      io.grpc.MethodDescriptor<Q, R> method, CallOptions options) {
    if (method
        .getFullMethodName()
        .equals(WriterServiceGrpc.getCapabilitiesMethod().getFullMethodName())) {
      return new ClientCall<>() {
        private Listener<R> listener;

        @Override
        public void start(Listener<R> listener, Metadata headers) {
          this.listener = listener;
        }

        @Override
        public void request(int messages) {}

        @Override
        public void cancel(String message, Throwable cause) {}

        @Override
        public void sendMessage(Q message) {}

        @Override
        public void halfClose() {
          @SuppressWarnings("unchecked")
          R answer = (R) capabilities("0.2.0");
          listener.onHeaders(new Metadata());
          listener.onMessage(answer);
          listener.onClose(Status.OK, new Metadata());
        }
      };
    }
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
