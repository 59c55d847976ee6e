package dev.safewrite;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import dev.safewrite.v1.CelMutation;
import dev.safewrite.v1.FinalizerChange;
import dev.safewrite.v1.JsonPatch;
import dev.safewrite.v1.ListEntryChange;
import dev.safewrite.v1.MergePatch;
import dev.safewrite.v1.OwnerReferenceChange;
import dev.safewrite.v1.RemoveCondition;
import dev.safewrite.v1.ServerSideApply;
import dev.safewrite.v1.SetCondition;
import io.fabric8.kubernetes.api.model.Condition;
import io.fabric8.kubernetes.api.model.HasMetadata;
import io.fabric8.kubernetes.api.model.OwnerReference;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The change to make to an object. The sidecar re-applies it to the fresh object on every attempt,
 * so a change computed from the object (an increment, an append) is never applied to a stale copy.
 * A mutation that leaves the object as it was writes nothing ({@link Outcome#UNCHANGED}).
 *
 * <p>Besides the generic patches, it names the read-dependent changes to one entry of a list that
 * controllers most often get wrong, each with exact semantics: status conditions ({@link
 * #setCondition(Condition...)}, {@link #removeCondition(String...)}), finalizers ({@link
 * #addFinalizer}, {@link #removeFinalizer}), owner references ({@link
 * #setOwnerReference(HasMetadata)}, {@link #setControllerReference}, {@link
 * #removeOwnerReference(HasMetadata)}) and entries of keyed lists ({@link #upsertListEntry(String,
 * List, Object)}, {@link #removeListEntry(String, List, Object)}). Conditions, owners and owner
 * references are fabric8's types ({@code io.fabric8:kubernetes-model-core}, which an operator has;
 * the other mutations do not need it).
 *
 * <p>JSON is given as text, sent as it is and checked by the sidecar, or as an object: a Jackson
 * {@code JsonNode}, or any object Jackson writes, such as a fabric8 resource (fields left null are
 * not written). Other arguments are checked here: a missing or malformed one throws {@link
 * IllegalArgumentException} (a null one {@link NullPointerException}) before anything is sent. What
 * only the sidecar checks (the format of a condition's type and reason, of a finalizer) fails the
 * call with {@link InvalidException} naming the field, e.g. {@code
 * mutation.set_condition.conditions[0].reason}.
 */
public final class Mutation {
  private final dev.safewrite.v1.Mutation proto;

  private Mutation(dev.safewrite.v1.Mutation proto) {
    this.proto = proto;
  }

  /**
   * A CEL expression over {@code object}, the fresh object, returning a map that is merged into it,
   * e.g. {@code {"data": {"n": string(int(object.data.n) + 1)}}}. A syntax error fails the call
   * with {@link InvalidException} (reason {@code INVALID_CEL}).
   */
  public static Mutation cel(String expression) {
    Objects.requireNonNull(expression, "expression");
    return new Mutation(
        dev.safewrite.v1.Mutation.newBuilder()
            .setCel(CelMutation.newBuilder().setExpression(expression))
            .build());
  }

  /** An RFC 7386 JSON merge patch, as JSON text of an object. */
  public static Mutation mergePatch(String patchJson) {
    Objects.requireNonNull(patchJson, "patchJson");
    return new Mutation(
        dev.safewrite.v1.Mutation.newBuilder()
            .setMergePatch(MergePatch.newBuilder().setPatchJson(patchJson))
            .build());
  }

  /**
   * An RFC 7386 JSON merge patch given as an object: a Jackson {@code JsonNode} (a null field
   * removes it), a {@code Map}, or a fabric8 resource holding the fields to set.
   *
   * @throws IllegalArgumentException when Jackson cannot write it
   */
  public static Mutation mergePatch(Object patch) {
    return mergePatch(Json.text(Objects.requireNonNull(patch, "patch")));
  }

  /**
   * An RFC 6902 JSON Patch, as JSON text of an array of operations. Its {@code test} operations are
   * preconditions: a failing one fails the call with {@link PreconditionFailedException} and writes
   * nothing.
   */
  public static Mutation jsonPatch(String patchJson) {
    Objects.requireNonNull(patchJson, "patchJson");
    return new Mutation(
        dev.safewrite.v1.Mutation.newBuilder()
            .setJsonPatch(JsonPatch.newBuilder().setPatchJson(patchJson))
            .build());
  }

  /** An RFC 6902 JSON Patch, as a Jackson array of operations. */
  public static Mutation jsonPatch(ArrayNode patch) {
    return jsonPatch(Json.text(Objects.requireNonNull(patch, "patch")));
  }

  /** An RFC 6902 JSON Patch made of these operations, in order. */
  public static Mutation jsonPatch(JsonPatchOp... ops) {
    return jsonPatch(List.of(ops));
  }

  /** An RFC 6902 JSON Patch made of these operations, in order. */
  public static Mutation jsonPatch(List<JsonPatchOp> ops) {
    ArrayNode patch = Json.MAPPER.createArrayNode();
    for (JsonPatchOp op : ops) {
      patch.add(op.toJson());
    }
    return jsonPatch(patch);
  }

  /**
   * A server-side apply configuration: an object with apiVersion, kind, metadata.name and the
   * fields this manager owns. Needs a field manager ({@link WriteConfig.Builder#fieldManager}); a
   * conflict with another manager's fields fails with {@link ConflictException} (reason {@code
   * FIELD_MANAGER_CONFLICT}) unless {@code force} takes them.
   */
  public static Mutation apply(String configurationJson, boolean force) {
    Objects.requireNonNull(configurationJson, "configurationJson");
    return new Mutation(
        dev.safewrite.v1.Mutation.newBuilder()
            .setApply(
                ServerSideApply.newBuilder()
                    .setConfigurationJson(configurationJson)
                    .setForce(force))
            .build());
  }

  /**
   * A server-side apply configuration given as an object: a Jackson {@code JsonNode}, or a fabric8
   * resource (as fabric8's own {@code serverSideApply} takes it) whose fields left null are not
   * written; see {@link #apply(String, boolean)}.
   *
   * @throws IllegalArgumentException when Jackson cannot write it
   */
  public static Mutation apply(Object configuration, boolean force) {
    return apply(Json.text(Objects.requireNonNull(configuration, "configuration")), force);
  }

  /**
   * Sets status conditions in {@code status.conditions}, as apimachinery's {@code
   * meta.SetStatusCondition} does, on the fresh object of every attempt: the entry of the same type
   * is updated in place (a new type is appended after the others); its lastTransitionTime changes
   * only when its status changes; reason, message and observedGeneration are set; every other
   * entry, and every field of an entry a condition does not name, is kept as it is and where it is.
   * A condition set to what it already is writes nothing ({@link Outcome#UNCHANGED}), so a
   * controller may set its conditions on every sync.
   *
   * <p>Send it with {@link SafewriteClient#patchStatus} for a kind with a status subresource (with
   * {@link SafewriteClient#update} the sidecar refuses it, since that never writes such a status),
   * with {@code update} for a kind without one.
   *
   * <p>Each condition needs a type, a status ({@code True}, {@code False} or {@code Unknown}) and a
   * reason, and no type may come twice. A null {@code lastTransitionTime} is the time of the write;
   * one given is any RFC 3339 time, sent in UTC and whole seconds as metav1.Time writes it, and
   * used only when the entry is new or its status changes. A null {@code observedGeneration} is the
   * metadata.generation of the fresh object (read again on every attempt; none when the object has
   * none). A condition with fields metav1.Condition does not have (its additional properties) is
   * refused: they could not be written.
   *
   * @throws IllegalArgumentException when a condition lacks a field, has a status other than True,
   *     False or Unknown, a lastTransitionTime that is not RFC 3339, or a type given twice
   */
  public static Mutation setCondition(Condition... conditions) {
    return setCondition(List.of(conditions));
  }

  /** {@link #setCondition(Condition...)} of a list. */
  public static Mutation setCondition(List<Condition> conditions) {
    return setConditionAt("", conditions);
  }

  /**
   * {@link #setCondition(Condition...)} in the conditions list at {@code path}, field names joined
   * by dots, e.g. {@code status.mirror.conditions} (empty: {@code status.conditions}). The list is
   * created when missing; a path through a value that is not an object, or to one that is not a
   * list, fails the call with {@link InvalidException}.
   */
  public static Mutation setConditionAt(String path, List<Condition> conditions) {
    Objects.requireNonNull(path, "path");
    return new Mutation(
        dev.safewrite.v1.Mutation.newBuilder()
            .setSetCondition(
                SetCondition.newBuilder()
                    .addAllConditions(Fabric8Types.conditions(conditions))
                    .setPath(path))
            .build());
  }

  /**
   * Removes the conditions of these types from {@code status.conditions}; the other entries keep
   * their order. Removing a type that is not there writes nothing. Sent as {@link
   * #setCondition(Condition...)} is.
   *
   * @throws IllegalArgumentException when no type, or an empty one, is given
   */
  public static Mutation removeCondition(String... types) {
    return removeCondition(List.of(types));
  }

  /** {@link #removeCondition(String...)} of a list. */
  public static Mutation removeCondition(List<String> types) {
    return removeConditionAt("", types);
  }

  /**
   * {@link #removeCondition(String...)} from the conditions list at {@code path}; see {@link
   * #setConditionAt}.
   */
  public static Mutation removeConditionAt(String path, List<String> types) {
    Objects.requireNonNull(path, "path");
    return new Mutation(
        dev.safewrite.v1.Mutation.newBuilder()
            .setRemoveCondition(
                RemoveCondition.newBuilder().addAllTypes(names(types, "types")).setPath(path))
            .build());
  }

  /**
   * Adds {@code finalizer} (a qualified name, e.g. {@code example.com/cleanup}) to
   * metadata.finalizers, leaving the others as they are; one already there writes nothing. An
   * object being deleted (it has a deletionTimestamp) gets no new finalizer: the call fails with
   * {@link PreconditionFailedException}, {@link SafewriteException#writeFailureReason()} {@code
   * REASON_OBJECT_DELETING}, and nothing is written.
   *
   * @throws IllegalArgumentException when {@code finalizer} is empty
   */
  public static Mutation addFinalizer(String finalizer) {
    return finalizer(finalizer, false);
  }

  /**
   * Removes {@code finalizer} from metadata.finalizers, leaving the others as they are; one not
   * there writes nothing. When the object does not exist, or the API server deletes it because this
   * was the last finalizer of an object being deleted, the call answers {@link Outcome#GONE}
   * ({@link Result#gone()}): skip any status write that would follow.
   *
   * @throws IllegalArgumentException when {@code finalizer} is empty
   */
  public static Mutation removeFinalizer(String finalizer) {
    return finalizer(finalizer, true);
  }

  private static Mutation finalizer(String finalizer, boolean remove) {
    return new Mutation(
        dev.safewrite.v1.Mutation.newBuilder()
            .setFinalizer(
                FinalizerChange.newBuilder()
                    .setFinalizer(required(finalizer, "finalizer"))
                    .setRemove(remove))
            .build());
  }

  /**
   * Makes {@code owner} an owner of the object, as controller-runtime's {@code
   * controllerutil.SetOwnerReference} does: a reference with the owner's apiVersion, kind, name and
   * uid, not the controller and not blocking the owner's deletion. References are matched by API
   * group, kind and name, as controllerutil matches them (not by uid or version): the owner's
   * reference takes this one's apiVersion, uid and flags in place, so an owner deleted and
   * recreated under its name adopts the object (an identical one writes nothing); otherwise it is
   * appended. When the owner's metadata has no uid, the sidecar reads the owner by name, in the
   * object's namespace (or cluster-scoped), and takes its uid. The owner must be in the object's
   * namespace, or cluster-scoped, as Kubernetes requires.
   *
   * @throws IllegalArgumentException when the owner has no kind, apiVersion or name
   */
  public static Mutation setOwnerReference(HasMetadata owner) {
    return ownerReference(Fabric8Types.owner(owner, true).build(), false);
  }

  /**
   * Makes {@code owner} the object's managing controller, as {@code
   * controllerutil.SetControllerReference} does: {@link #setOwnerReference(HasMetadata)} with
   * {@code controller} and {@code blockOwnerDeletion} true. When another owner is the object's
   * controller already, the call fails with {@link PreconditionFailedException}, {@link
   * SafewriteException#writeFailureReason()} {@code REASON_ALREADY_OWNED}, its {@link
   * SafewriteException#description()} naming that controller, and nothing is written.
   *
   * @throws IllegalArgumentException when the owner has no kind, apiVersion or name
   */
  public static Mutation setControllerReference(HasMetadata owner) {
    return ownerReference(
        Fabric8Types.owner(owner, true).setController(true).setBlockOwnerDeletion(true).build(),
        false);
  }

  /**
   * Ensures exactly this owner reference (its {@code controller} and {@code blockOwnerDeletion} as
   * it says, null meaning false), matched by API group, kind and name as {@link
   * #setOwnerReference(HasMetadata)} does, and refused as {@link #setControllerReference} is when
   * it asks to be the controller of an object that has another.
   *
   * @throws IllegalArgumentException when the reference has no kind, apiVersion or name
   */
  public static Mutation setOwnerReference(OwnerReference reference) {
    return ownerReference(Fabric8Types.ownerReference(reference), false);
  }

  /**
   * Removes the object's reference to {@code owner}, as {@code controllerutil.RemoveOwnerReference}
   * does: the first reference with the owner's API group, kind and name, whatever its uid and
   * version. Removing a reference that is not there writes nothing; removing the last one removes
   * the list.
   *
   * @throws IllegalArgumentException when the owner has no kind, apiVersion or name
   */
  public static Mutation removeOwnerReference(HasMetadata owner) {
    return ownerReference(Fabric8Types.owner(owner, false).build(), true);
  }

  /**
   * Removes the object's first reference with this reference's API group, kind and name (its uid is
   * not compared), as {@link #removeOwnerReference(HasMetadata)} does.
   *
   * @throws IllegalArgumentException when the reference has no kind, apiVersion or name
   */
  public static Mutation removeOwnerReference(OwnerReference reference) {
    return ownerReference(Fabric8Types.ownerReference(reference), true);
  }

  private static Mutation ownerReference(dev.safewrite.v1.OwnerReference owner, boolean remove) {
    return new Mutation(
        dev.safewrite.v1.Mutation.newBuilder()
            .setOwnerReference(OwnerReferenceChange.newBuilder().setOwner(owner).setRemove(remove))
            .build());
  }

  /**
   * Upserts one entry of a list of objects keyed by some of their fields (a list that is, or should
   * have been, {@code x-kubernetes-list-type: map}), such as a route's {@code status.parents} keyed
   * by {@code controllerName}: {@code entry} is merged into the entry whose key fields all equal
   * its own, as an RFC 7386 merge patch (a null removes a field), or appended when none matches.
   * Every other entry, and the order of all of them, is kept; an upsert that changes nothing writes
   * nothing. The list, and the objects on the way to it, are created when missing.
   *
   * @param path where the list is, field names joined by dots, e.g. {@code status.parents}
   * @param keys the key fields' names, at least one
   * @param entry the entry, carrying every key field: a Jackson {@code ObjectNode}, a {@code Map},
   *     or an object Jackson writes, such as a fabric8 {@code Condition}
   * @throws IllegalArgumentException when the path or the keys are empty, or the entry lacks a key
   *     field
   */
  public static Mutation upsertListEntry(String path, List<String> keys, Object entry) {
    return listEntry(path, keys, entry, false);
  }

  /**
   * {@link #upsertListEntry(String, List, Object)} of an entry given as JSON text, sent as it is:
   * one that is not an object carrying every key field fails the call with {@link InvalidException}
   * (field {@code mutation.list_entry.entry_json}).
   */
  public static Mutation upsertListEntry(String path, List<String> keys, String entryJson) {
    return listEntry(path, keys, entryJson, false);
  }

  /**
   * Removes the entry whose key fields all equal those of {@code entry} (its other fields are not
   * used) from the keyed list at {@code path}, keeping the others in their order; removing an entry
   * that is not there writes nothing. See {@link #upsertListEntry(String, List, Object)}.
   *
   * @throws IllegalArgumentException when the path or the keys are empty, or the entry lacks a key
   *     field
   */
  public static Mutation removeListEntry(String path, List<String> keys, Object entry) {
    return listEntry(path, keys, entry, true);
  }

  /**
   * {@link #removeListEntry(String, List, Object)} of an entry given as JSON text, sent as it is.
   */
  public static Mutation removeListEntry(String path, List<String> keys, String entryJson) {
    return listEntry(path, keys, entryJson, true);
  }

  private static Mutation listEntry(String path, List<String> keys, Object entry, boolean remove) {
    JsonNode tree = Json.tree(Objects.requireNonNull(entry, "entry"));
    for (String key : names(keys, "keys")) {
      JsonNode value = tree.get(key);
      if (value == null || value.isNull()) {
        throw new IllegalArgumentException("the entry has no key field " + key + ": " + tree);
      }
    }
    return listEntry(path, keys, Json.text(tree), remove);
  }

  private static Mutation listEntry(
      String path, List<String> keys, String entryJson, boolean remove) {
    return new Mutation(
        dev.safewrite.v1.Mutation.newBuilder()
            .setListEntry(
                ListEntryChange.newBuilder()
                    .setPath(required(path, "path"))
                    .addAllKeys(names(keys, "keys"))
                    .setEntryJson(Objects.requireNonNull(entryJson, "entryJson"))
                    .setRemove(remove))
            .build());
  }

  /** Names that must be given: at least one, none empty, none twice. */
  private static List<String> names(List<String> names, String what) {
    Objects.requireNonNull(names, what);
    if (names.isEmpty()) {
      throw new IllegalArgumentException("at least one of " + what + " is needed");
    }
    Set<String> seen = new HashSet<>();
    for (int i = 0; i < names.size(); i++) {
      String name = required(names.get(i), what + "[" + i + "]");
      if (!seen.add(name)) {
        throw new IllegalArgumentException(what + "[" + i + "]: " + name + " is given twice");
      }
    }
    return names;
  }

  /** {@code value}, refused when null or empty. */
  static String required(String value, String what) {
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException(what + " is required");
    }
    return value;
  }

  /** A mutation given as the generated message, sent as it is; for tests. */
  static Mutation of(dev.safewrite.v1.Mutation proto) {
    return new Mutation(Objects.requireNonNull(proto, "proto"));
  }

  /** The generated message this mutation is sent as. */
  dev.safewrite.v1.Mutation toProto() {
    return proto;
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof Mutation that && proto.equals(that.proto);
  }

  @Override
  public int hashCode() {
    return proto.hashCode();
  }

  @Override
  public String toString() {
    return "Mutation(" + proto.getKindCase().name().toLowerCase(java.util.Locale.ROOT) + ")";
  }
}
