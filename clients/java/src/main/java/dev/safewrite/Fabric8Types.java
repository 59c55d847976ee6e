package dev.safewrite;

import io.fabric8.kubernetes.api.model.Condition;
import io.fabric8.kubernetes.api.model.HasMetadata;
import io.fabric8.kubernetes.api.model.ObjectMeta;
import io.fabric8.kubernetes.api.model.OwnerReference;
import java.time.OffsetDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * fabric8's Kubernetes model (an optional dependency) turned into the proto's messages: the
 * apiVersion and kind of a resource, conditions and owner references. Each value is checked here,
 * before anything is sent, and refused with an {@link IllegalArgumentException} naming what is
 * wrong. Only the {@link Mutation} and {@link ObjectRef} methods that take fabric8 types call it,
 * so an application without fabric8 never loads it.
 */
final class Fabric8Types {
  private static final Set<String> STATUSES = Set.of("True", "False", "Unknown");

  private Fabric8Types() {}

  /** The resource's apiVersion, else its class's {@code @Group} and {@code @Version}. */
  static String apiVersion(HasMetadata resource) {
    String apiVersion = resource.getApiVersion();
    return apiVersion == null || apiVersion.isEmpty()
        ? HasMetadata.getApiVersion(resource.getClass())
        : apiVersion;
  }

  /** The resource's kind, else its class's {@code @Kind} (or its simple name). */
  static String kind(HasMetadata resource) {
    String kind = resource.getKind();
    return kind == null || kind.isEmpty() ? HasMetadata.getKind(resource.getClass()) : kind;
  }

  /**
   * The conditions of a {@code set_condition}: at least one, each with a type, a status of True,
   * False or Unknown, and a reason, no type twice, and no field a condition does not have.
   */
  static List<dev.safewrite.v1.Condition> conditions(List<Condition> conditions) {
    Objects.requireNonNull(conditions, "conditions");
    if (conditions.isEmpty()) {
      throw new IllegalArgumentException("at least one condition is needed");
    }
    List<dev.safewrite.v1.Condition> converted = new ArrayList<>();
    Set<String> types = new HashSet<>();
    for (int i = 0; i < conditions.size(); i++) {
      dev.safewrite.v1.Condition condition = condition(conditions.get(i), i);
      if (!types.add(condition.getType())) {
        throw new IllegalArgumentException(
            "conditions[" + i + "]: type " + condition.getType() + " is given twice");
      }
      converted.add(condition);
    }
    return converted;
  }

  private static dev.safewrite.v1.Condition condition(Condition condition, int index) {
    String where = "conditions[" + index + "]";
    Objects.requireNonNull(condition, where);
    String type = Mutation.required(condition.getType(), where + ".type");
    where += " (" + type + ")";
    String status = Mutation.required(condition.getStatus(), where + ".status");
    if (!STATUSES.contains(status)) {
      throw new IllegalArgumentException(
          where + ".status is \"" + status + "\"; it must be True, False or Unknown");
    }
    Map<String, Object> extra = condition.getAdditionalProperties();
    if (extra != null && !extra.isEmpty()) {
      throw new IllegalArgumentException(
          where
              + " has fields a condition does not have, which would not be written: "
              + extra.keySet());
    }
    dev.safewrite.v1.Condition.Builder converted =
        dev.safewrite.v1.Condition.newBuilder()
            .setType(type)
            .setStatus(status)
            .setReason(Mutation.required(condition.getReason(), where + ".reason"))
            .setMessage(Objects.requireNonNullElse(condition.getMessage(), ""))
            .setLastTransitionTime(
                transitionTime(condition.getLastTransitionTime(), where + ".lastTransitionTime"));
    if (condition.getObservedGeneration() != null) {
      converted.setObservedGeneration(condition.getObservedGeneration());
    }
    return converted.build();
  }

  /**
   * An RFC 3339 time in UTC and whole seconds, as metav1.Time writes it; empty (the time of the
   * write) for null or empty.
   */
  static String transitionTime(String time, String where) {
    if (time == null || time.isEmpty()) {
      return "";
    }
    try {
      return DateTimeFormatter.ISO_INSTANT.format(
          OffsetDateTime.parse(time).toInstant().truncatedTo(ChronoUnit.SECONDS));
    } catch (DateTimeParseException notRfc3339) {
      throw new IllegalArgumentException(
          where + " is \"" + time + "\", not an RFC 3339 time such as 2026-11-26T15:04:05Z",
          notRfc3339);
    }
  }

  /**
   * An owner reference as given: apiVersion, kind and name required, a null flag false. fabric8's
   * {@code new OwnerReference()} starts as apiVersion v1, kind OwnerReference, its own type rather
   * than an owner's; left so, it is refused.
   */
  static dev.safewrite.v1.OwnerReference ownerReference(OwnerReference reference) {
    Objects.requireNonNull(reference, "reference");
    if ("OwnerReference".equals(reference.getKind())) {
      throw new IllegalArgumentException(
          "reference.kind is OwnerReference, fabric8's default: set the owner's apiVersion and kind");
    }
    return dev.safewrite.v1.OwnerReference.newBuilder()
        .setApiVersion(Mutation.required(reference.getApiVersion(), "reference.apiVersion"))
        .setKind(Mutation.required(reference.getKind(), "reference.kind"))
        .setName(Mutation.required(reference.getName(), "reference.name"))
        .setUid(Objects.requireNonNullElse(reference.getUid(), ""))
        .setController(Boolean.TRUE.equals(reference.getController()))
        .setBlockOwnerDeletion(Boolean.TRUE.equals(reference.getBlockOwnerDeletion()))
        .build();
  }

  /**
   * A reference to {@code owner}: its apiVersion, kind, name and (when {@code withUid}) uid, which
   * may be empty (the sidecar then reads the owner).
   */
  static dev.safewrite.v1.OwnerReference.Builder owner(HasMetadata owner, boolean withUid) {
    Objects.requireNonNull(owner, "owner");
    ObjectMeta metadata = owner.getMetadata();
    String name = metadata == null ? null : metadata.getName();
    String uid = metadata == null || !withUid ? null : metadata.getUid();
    return dev.safewrite.v1.OwnerReference.newBuilder()
        .setApiVersion(Mutation.required(apiVersion(owner), "owner's apiVersion"))
        .setKind(Mutation.required(kind(owner), "owner's kind"))
        .setName(Mutation.required(name, "owner's metadata.name"))
        .setUid(Objects.requireNonNullElse(uid, ""));
  }
}
