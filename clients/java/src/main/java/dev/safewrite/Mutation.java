package dev.safewrite;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import dev.safewrite.v1.CelMutation;
import dev.safewrite.v1.JsonPatch;
import dev.safewrite.v1.MergePatch;
import dev.safewrite.v1.ServerSideApply;
import java.util.List;
import java.util.Objects;

/**
 * The change to make to an object. The sidecar re-applies it to the fresh object on every attempt,
 * so a change computed from the object (an increment, an append) is never applied to a stale copy.
 * A mutation that leaves the object as it was writes nothing ({@link Outcome#UNCHANGED}).
 *
 * <p>JSON is given as text or as a Gson tree; text is sent as it is and checked by the sidecar.
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

  /** An RFC 7386 JSON merge patch. */
  public static Mutation mergePatch(JsonObject patch) {
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

  /** An RFC 6902 JSON Patch. */
  public static Mutation jsonPatch(JsonArray patch) {
    return jsonPatch(Json.text(Objects.requireNonNull(patch, "patch")));
  }

  /** An RFC 6902 JSON Patch made of these operations, in order. */
  public static Mutation jsonPatch(JsonPatchOp... ops) {
    return jsonPatch(List.of(ops));
  }

  /** An RFC 6902 JSON Patch made of these operations, in order. */
  public static Mutation jsonPatch(List<JsonPatchOp> ops) {
    JsonArray patch = new JsonArray();
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

  /** A server-side apply configuration; see {@link #apply(String, boolean)}. */
  public static Mutation apply(JsonObject configuration, boolean force) {
    return apply(Json.text(Objects.requireNonNull(configuration, "configuration")), force);
  }

  /** A mutation given as the generated message, sent as it is. */
  public static Mutation of(dev.safewrite.v1.Mutation proto) {
    return new Mutation(Objects.requireNonNull(proto, "proto"));
  }

  /** The generated message this mutation is sent as. */
  public dev.safewrite.v1.Mutation toProto() {
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
