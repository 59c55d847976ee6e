package dev.safewrite;

import dev.safewrite.v1.PatchStatusRequest;
import dev.safewrite.v1.PatchStatusResponse;
import dev.safewrite.v1.TransactBegin;
import dev.safewrite.v1.TransactRequest;
import dev.safewrite.v1.UpdateWithRetryRequest;
import dev.safewrite.v1.UpdateWithRetryResponse;
import dev.safewrite.v1.WriteOptions;
import dev.safewrite.v1.WriteResult;
import dev.safewrite.v1.WriterServiceGrpc;
import io.grpc.Deadline;
import java.util.Objects;

/**
 * The writes of a {@link SafewriteClient}: {@code UpdateWithRetry}, {@code PatchStatus} and {@code
 * Transact}, each request built from the client's own types and, for a fenced view, carrying its
 * fence.
 */
final class Writes {
  private final Calls calls;

  /** Null: writes carry the fence their config gives, if any. */
  private final Fence fence;

  Writes(Calls calls, Fence fence) {
    this.calls = calls;
    this.fence = fence;
  }

  /** Applies {@code mutation} to the main resource ({@code UpdateWithRetry}). */
  Result update(ObjectRef ref, Mutation mutation, WriteConfig config) {
    check(ref, mutation, config);
    UpdateWithRetryRequest.Builder request =
        UpdateWithRetryRequest.newBuilder()
            .setTarget(ref.toProto())
            .setMutation(mutation.toProto());
    config.fill(request::setPreconditions, request::setRetryPolicy, request::setOptions);
    request.setOptions(options(request.getOptions()));
    UpdateWithRetryRequest sent = request.build();
    UpdateWithRetryResponse answer =
        calls.unary(
            WriterServiceGrpc.getUpdateWithRetryMethod(),
            sent,
            keyed(sent.getOptions()),
            config.timeout);
    return result(answer.hasResult(), answer.getResult());
  }

  /** Applies {@code mutation} to the status subresource ({@code PatchStatus}). */
  Result patchStatus(ObjectRef ref, Mutation mutation, WriteConfig config) {
    check(ref, mutation, config);
    PatchStatusRequest.Builder request =
        PatchStatusRequest.newBuilder().setTarget(ref.toProto()).setMutation(mutation.toProto());
    config.fill(request::setPreconditions, request::setRetryPolicy, request::setOptions);
    request.setOptions(options(request.getOptions()));
    PatchStatusRequest sent = request.build();
    PatchStatusResponse answer =
        calls.unary(
            WriterServiceGrpc.getPatchStatusMethod(),
            sent,
            keyed(sent.getOptions()),
            config.timeout);
    return result(answer.hasResult(), answer.getResult());
  }

  /**
   * Runs a transaction ({@code Transact}) on the main resource or, when {@code status}, the status
   * subresource, handing {@code function} the fresh objects as {@code type}.
   */
  <T> Result transact(
      ObjectRef ref,
      boolean status,
      Class<T> type,
      TransactFunction<T> function,
      WriteConfig config) {
    Objects.requireNonNull(ref, "ref");
    Objects.requireNonNull(type, "type");
    Objects.requireNonNull(function, "function");
    Objects.requireNonNull(config, "config");
    TransactBegin.Builder begin =
        TransactBegin.newBuilder().setTarget(ref.toProto()).setStatus(status);
    config.fill(begin::setPreconditions, begin::setRetryPolicy, begin::setOptions);
    begin.setOptions(options(begin.getOptions()));
    TransactBegin sent = begin.build();
    // The transaction's time budget starts now, and covers asking the sidecar's Capabilities.
    Deadline deadline = calls.deadline(config.timeout);
    calls.check(
        WriterServiceGrpc.getTransactMethod(),
        TransactRequest.newBuilder().setBegin(sent).build(),
        deadline);
    return Transaction.run(
        calls.streaming(deadline), sent, type, function, keyed(sent.getOptions()));
  }

  private static void check(ObjectRef ref, Mutation mutation, WriteConfig config) {
    Objects.requireNonNull(ref, "ref");
    Objects.requireNonNull(mutation, "mutation");
    Objects.requireNonNull(config, "config");
  }

  /** The options of a write: with the view's fence, if any. */
  private WriteOptions options(WriteOptions options) {
    return fence == null ? options : Fencing.options(fence, options);
  }

  /** Whether a write can be sent again without applying its change twice: it carries a key. */
  private static boolean keyed(WriteOptions options) {
    return !options.getIdempotencyKey().isEmpty();
  }

  /** The result of either write: both answers carry one {@code WriteResult}. */
  private static Result result(boolean present, WriteResult result) {
    if (!present) {
      throw new InternalException("the sidecar answered without a result");
    }
    return Result.fromProto(result);
  }
}
