package dev.safewrite;

import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import java.util.Objects;

/**
 * One operation of an RFC 6902 JSON Patch, for {@link Mutation#jsonPatch(JsonPatchOp...)}. A {@code
 * test} operation is a precondition: when it fails on the fresh object nothing is written and the
 * call fails with {@link PreconditionFailedException}.
 *
 * @param op {@code add}, {@code remove}, {@code replace}, {@code move}, {@code copy} or {@code
 *     test}
 * @param path the JSON Pointer the operation applies to, e.g. {@code /data/n}
 * @param from the source of {@code move} and {@code copy}, else null
 * @param value the value of {@code add}, {@code replace} and {@code test}, else null
 */
public record JsonPatchOp(String op, String path, String from, JsonElement value) {

  public JsonPatchOp {
    Objects.requireNonNull(op, "op");
    Objects.requireNonNull(path, "path");
  }

  /** {@code {"op": "test", "path": path, "value": value}}. */
  public static JsonPatchOp test(String path, JsonElement value) {
    return new JsonPatchOp("test", path, null, orNull(value));
  }

  /** {@code test} against a string value. */
  public static JsonPatchOp test(String path, String value) {
    return test(path, Json.parse(quote(value)));
  }

  /** {@code {"op": "add", "path": path, "value": value}}. */
  public static JsonPatchOp add(String path, JsonElement value) {
    return new JsonPatchOp("add", path, null, orNull(value));
  }

  /** {@code add} of a string value. */
  public static JsonPatchOp add(String path, String value) {
    return add(path, Json.parse(quote(value)));
  }

  /** {@code {"op": "replace", "path": path, "value": value}}. */
  public static JsonPatchOp replace(String path, JsonElement value) {
    return new JsonPatchOp("replace", path, null, orNull(value));
  }

  /** {@code replace} with a string value. */
  public static JsonPatchOp replace(String path, String value) {
    return replace(path, Json.parse(quote(value)));
  }

  /** {@code {"op": "remove", "path": path}}. */
  public static JsonPatchOp remove(String path) {
    return new JsonPatchOp("remove", path, null, null);
  }

  /** {@code {"op": "move", "from": from, "path": path}}. */
  public static JsonPatchOp move(String from, String path) {
    return new JsonPatchOp("move", path, Objects.requireNonNull(from, "from"), null);
  }

  /** {@code {"op": "copy", "from": from, "path": path}}. */
  public static JsonPatchOp copy(String from, String path) {
    return new JsonPatchOp("copy", path, Objects.requireNonNull(from, "from"), null);
  }

  JsonObject toJson() {
    JsonObject json = new JsonObject();
    json.addProperty("op", op);
    json.addProperty("path", path);
    if (from != null) {
      json.addProperty("from", from);
    }
    if (value != null) {
      json.add("value", value.deepCopy());
    }
    return json;
  }

  private static JsonElement orNull(JsonElement value) {
    return value == null ? JsonNull.INSTANCE : value;
  }

  private static String quote(String value) {
    return Json.text(new com.google.gson.JsonPrimitive(Objects.requireNonNull(value, "value")));
  }
}
