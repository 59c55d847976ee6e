package dev.safewrite;

import dev.safewrite.v1.GetRequest;
import dev.safewrite.v1.WriterServiceGrpc;
import java.util.Objects;

/** The reads of a {@link SafewriteClient}: {@code Get}, live or not older than a version. */
final class Reads {
  private final Calls calls;

  Reads(Calls calls) {
    this.calls = calls;
  }

  /** Reads the object at least as new as {@code minResourceVersion}; empty reads live. */
  GetResult get(ObjectRef ref, String minResourceVersion) {
    Objects.requireNonNull(ref, "ref");
    Objects.requireNonNull(minResourceVersion, "minResourceVersion");
    GetRequest request =
        GetRequest.newBuilder()
            .setTarget(ref.toProto())
            .setMinResourceVersion(minResourceVersion)
            .build();
    // Nothing is written: a get is always safe to send again, bounded by the default timeout.
    return GetResult.fromProto(calls.unary(WriterServiceGrpc.getGetMethod(), request, true, null));
  }
}
