package dev.safewrite;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ForwardingClientCall.SimpleForwardingClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;

/**
 * The metadata a client adds to every call it starts, unary or streaming: {@code authorization:
 * Bearer <token>} when it has a token, and the current trace context ({@link TraceContext}) when it
 * propagates traces.
 */
final class CallHeaders implements ClientInterceptor {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  /** {@code Bearer <token>}, or null to send none. */
  private final String authorization;

  private final boolean propagateTrace;

  private CallHeaders(String authorization, boolean propagateTrace) {
    this.authorization = authorization;
    this.propagateTrace = propagateTrace;
  }

  /**
   * {@code channel} with the headers added to its calls: {@code token} (null for none, else checked
   * by {@link #checkToken}) and, when {@code propagateTrace} and opentelemetry-api is on the class
   * path, the trace context. {@code channel} itself when there is nothing to add.
   */
  static Channel intercept(Channel channel, String token, boolean propagateTrace) {
    boolean trace = propagateTrace && TraceContext.AVAILABLE;
    if (token == null && !trace) {
      return channel;
    }
    return ClientInterceptors.intercept(
        channel, new CallHeaders(token == null ? null : "Bearer " + token, trace));
  }

  /**
   * {@code token} without surrounding whitespace, as the sidecar reads its token file.
   *
   * @throws IllegalArgumentException when nothing is left, or when a character is not one a gRPC
   *     metadata value can carry (printable ASCII and space)
   */
  static String checkToken(String token) {
    String stripped = token.strip();
    if (stripped.isEmpty()) {
      throw new IllegalArgumentException(
          "the sidecar's token is empty: give the content of its --token-file");
    }
    for (int i = 0; i < stripped.length(); i++) {
      char c = stripped.charAt(i);
      if (c < 0x20 || c > 0x7e) {
        // The message names the character and its place, never the token.
        throw new IllegalArgumentException(
            String.format(
                "the sidecar's token holds U+%04X at index %d, which a gRPC metadata value cannot"
                    + " carry (only printable ASCII and spaces)",
                (int) c, i));
      }
    }
    return stripped;
  }

  @Override
  public <Q, R> ClientCall<Q, R> interceptCall(
      MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
    return new SimpleForwardingClientCall<>(next.newCall(method, options)) {
      @Override
      public void start(Listener<R> listener, Metadata headers) {
        if (authorization != null) {
          headers.put(AUTHORIZATION, authorization);
        }
        if (propagateTrace) {
          TraceContext.inject(headers);
        }
        super.start(listener, headers);
      }
    };
  }
}
