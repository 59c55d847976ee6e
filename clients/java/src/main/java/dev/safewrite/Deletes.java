package dev.safewrite;

import dev.safewrite.v1.DeleteRequest;
import dev.safewrite.v1.WriterServiceGrpc;
import java.util.Objects;

/** The deletes of a {@link SafewriteClient} ({@code Delete}), fenced for a fenced view. */
final class Deletes {
  private final Calls calls;

  /** Null: deletes carry the fence their config gives, if any. */
  private final Fence fence;

  Deletes(Calls calls, Fence fence) {
    this.calls = calls;
    this.fence = fence;
  }

  DeleteResult delete(ObjectRef ref, DeleteConfig config) {
    Objects.requireNonNull(ref, "ref");
    Objects.requireNonNull(config, "config");
    DeleteRequest given = config.request(ref);
    DeleteRequest request =
        fence == null
            ? given
            : given.toBuilder()
                .setFence(Fencing.fence(fence, given.hasFence(), given.getFence()))
                .build();
    // A delete whose answer was lost is safe to send again: it answers GONE or DELETING.
    return DeleteResult.fromProto(
        calls.unary(WriterServiceGrpc.getDeleteMethod(), request, true, config.timeout));
  }
}
