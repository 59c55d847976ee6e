package dev.safewrite;

import dev.safewrite.v1.TransactAbort;
import dev.safewrite.v1.TransactProposal;
import java.util.Objects;

/** A {@link TransactFunction}'s answer to one fresh object: a new object, a mutation, or abort. */
public final class Proposal {
  private final TransactProposal proto;

  /** An object given as a value, written when the proposal is sent; else null. */
  private final Object value;

  private Proposal(TransactProposal proto, Object value) {
    this.proto = proto;
    this.value = value;
  }

  /**
   * The whole new object: a Jackson {@code JsonNode}, or any object Jackson writes, such as a
   * fabric8 resource (fields left null are not written). {@link Fresh#object()} itself, changed in
   * place, is written as returning {@code null} writes it. Its resourceVersion is ignored: the
   * write carries the fresh object's. An object equal to the fresh one writes nothing ({@link
   * Outcome#UNCHANGED}).
   */
  public static Proposal object(Object object) {
    Objects.requireNonNull(object, "object");
    if (object instanceof String json) {
      return object(json);
    }
    return new Proposal(null, object);
  }

  /** The whole new object, as JSON text; see {@link #object(Object)}. */
  public static Proposal object(String objectJson) {
    Objects.requireNonNull(objectJson, "objectJson");
    return new Proposal(TransactProposal.newBuilder().setObjectJson(objectJson).build(), null);
  }

  /** A mutation, applied by the sidecar to the fresh object it sent. */
  public static Proposal mutation(Mutation mutation) {
    Objects.requireNonNull(mutation, "mutation");
    return new Proposal(
        TransactProposal.newBuilder().setMutation(mutation.toProto()).build(), null);
  }

  /** Ends the transaction without writing; its outcome is {@link Outcome#ABORTED}. */
  public static Proposal abort(String reason) {
    return new Proposal(
        TransactProposal.newBuilder()
            .setAbort(TransactAbort.newBuilder().setReason(Objects.requireNonNullElse(reason, "")))
            .build(),
        null);
  }

  /**
   * A proposal given as the generated message, sent as it is, except that an {@code attempt} of 0
   * is replaced by the fresh object's attempt. For tests: a wrong attempt fails the transaction
   * with {@link InvalidException}.
   */
  static Proposal of(TransactProposal proto) {
    return new Proposal(Objects.requireNonNull(proto, "proto"), null);
  }

  /** The message to send in answer to {@code fresh}. */
  TransactProposal toProto(Fresh<?> fresh) {
    TransactProposal message = proto;
    if (message == null) {
      String json = fresh.isObject(value) ? fresh.proposedJson() : Json.text(value);
      message = TransactProposal.newBuilder().setObjectJson(json).build();
    }
    if (message.getAttempt() != 0) {
      return message;
    }
    return message.toBuilder().setAttempt(fresh.attempt()).build();
  }
}
