package dev.safewrite;

import dev.safewrite.v1.WriteOptions;

/**
 * The fence of a {@link SafewriteClient#fenced(Fence)} view put on a request: the same fence given
 * again is accepted, another one refused before anything is sent.
 */
final class Fencing {
  private Fencing() {}

  /** {@code options} with the view's fence. */
  static WriteOptions options(Fence view, WriteOptions options) {
    return options.toBuilder()
        .setFence(fence(view, options.hasFence(), options.getFence()))
        .build();
  }

  /**
   * The view's fence, for a request that carried {@code own} when {@code given}.
   *
   * @throws IllegalArgumentException when the request carried another fence
   */
  static dev.safewrite.v1.Fence fence(Fence view, boolean given, dev.safewrite.v1.Fence own) {
    dev.safewrite.v1.Fence proto = view.toProto();
    if (given && !own.equals(proto)) {
      throw new IllegalArgumentException(
          "a client fenced with "
              + view
              + " writes under that fence only; the call asked for "
              + new Fence(own.getLeaseNamespace(), own.getLeaseName(), own.getEpoch()));
    }
    return proto;
  }
}
