package dev.safewrite;

import com.google.gson.JsonObject;
import dev.safewrite.v1.TransactAbort;
import dev.safewrite.v1.TransactProposal;
import java.util.Objects;

/** A {@link TransactFunction}'s answer to one fresh object: a new object, a mutation, or abort. */
public final class Proposal {
  private final TransactProposal proto;

  private Proposal(TransactProposal proto) {
    this.proto = proto;
  }

  /**
   * The whole new object. Its resourceVersion is ignored: the write carries the fresh object's. An
   * object equal to the fresh one writes nothing ({@link Outcome#UNCHANGED}).
   */
  public static Proposal object(JsonObject object) {
    return object(Json.text(Objects.requireNonNull(object, "object")));
  }

  /** The whole new object, as JSON text; see {@link #object(JsonObject)}. */
  public static Proposal object(String objectJson) {
    Objects.requireNonNull(objectJson, "objectJson");
    return new Proposal(TransactProposal.newBuilder().setObjectJson(objectJson).build());
  }

  /** A mutation, applied by the sidecar to the fresh object it sent. */
  public static Proposal mutation(Mutation mutation) {
    Objects.requireNonNull(mutation, "mutation");
    return new Proposal(TransactProposal.newBuilder().setMutation(mutation.toProto()).build());
  }

  /** Ends the transaction without writing; its outcome is {@link Outcome#ABORTED}. */
  public static Proposal abort(String reason) {
    return new Proposal(
        TransactProposal.newBuilder()
            .setAbort(TransactAbort.newBuilder().setReason(Objects.requireNonNullElse(reason, "")))
            .build());
  }

  /**
   * A proposal given as the generated message, sent as it is, except that an {@code attempt} of 0
   * is replaced by the fresh object's attempt. For tests and tools: a wrong attempt fails the
   * transaction with {@link InvalidException}.
   */
  public static Proposal of(TransactProposal proto) {
    return new Proposal(Objects.requireNonNull(proto, "proto"));
  }

  TransactProposal toProto(int attempt) {
    if (proto.getAttempt() != 0) {
      return proto;
    }
    return proto.toBuilder().setAttempt(attempt).build();
  }
}
