package dev.safewrite;

import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.channel.ChannelOption;
import java.util.Map;
import java.util.Objects;

/** Dialling the sidecar by address: the gRPC target an address names, and the channel to it. */
final class Channels {
  private Channels() {}

  /**
   * The gRPC target for an address, as {@link SafewriteClient#connect(String)} takes it; {@code
   * env} is read for {@code SAFEWRITE_ADDRESS} when the address is empty, and {@link
   * SafewriteClient#DEFAULT_ADDRESS} stands in when that is unset or empty too.
   */
  static String target(String address, Map<String, String> env) {
    String given = address == null ? "" : address.strip();
    if (given.isEmpty()) {
      given = Objects.requireNonNullElse(env.get(SafewriteClient.ADDRESS_ENV), "").strip();
    }
    if (given.isEmpty()) {
      given = SafewriteClient.DEFAULT_ADDRESS;
    }
    if (given.startsWith("http://")) {
      given = given.substring("http://".length());
      while (given.endsWith("/")) {
        given = given.substring(0, given.length() - 1);
      }
    }
    if (given.startsWith("/")) {
      return "unix://" + given;
    }
    if (given.startsWith("https://")) {
      throw new IllegalArgumentException(
          "TLS is not dialled by address; make the channel yourself and use "
              + "SafewriteClient.forChannel: "
              + given);
    }
    if (given.startsWith("unix:") || given.contains(":///")) {
      return given;
    }
    return "dns:///" + given;
  }

  /** A plaintext channel to {@code target} (as {@link #target} makes it); connects lazily. */
  static ManagedChannel dial(String target) {
    ManagedChannelBuilder<?> dial =
        Grpc.newChannelBuilder(target, InsecureChannelCredentials.create())
            .userAgent("safewrite-java")
            .maxInboundMessageSize(Calls.MAX_RESPONSE_BYTES);
    if (target.startsWith("unix:")) {
      // The default authority would be the socket path, which the sidecar refuses.
      dial.overrideAuthority("localhost");
      if (dial instanceof NettyChannelBuilder netty) {
        // TCP keepalive means nothing on a unix socket; Netty would warn per connection.
        netty.withOption(ChannelOption.SO_KEEPALIVE, null);
      }
    }
    return dial.build();
  }
}
