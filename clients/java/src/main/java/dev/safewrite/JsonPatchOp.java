package dev.safewrite;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
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
public record JsonPatchOp(String op, String path, String from, JsonNode value) {

  public JsonPatchOp {
    Objects.requireNonNull(op, "op");
    Objects.requireNonNull(path, "path");
  }

  /** {@code {"op": "test", "path": path, "value": value}}. */
  public static JsonPatchOp test(String path, JsonNode value) {
    return new JsonPatchOp("test", path, null, orNull(value));
  }

  /** {@code test} against a string value. */
  public static JsonPatchOp test(String path, String value) {
    return test(path, TextNode.valueOf(Objects.requireNonNull(value, "value")));
  }

  /** {@code {"op": "add", "path": path, "value": value}}. */
  public static JsonPatchOp add(String path, JsonNode value) {
    return new JsonPatchOp("add", path, null, orNull(value));
  }

  /** {@code add} of a string value. */
  public static JsonPatchOp add(String path, String value) {
    return add(path, TextNode.valueOf(Objects.requireNonNull(value, "value")));
  }

  /** {@code {"op": "replace", "path": path, "value": value}}. */
  public static JsonPatchOp replace(String path, JsonNode value) {
    return new JsonPatchOp("replace", path, null, orNull(value));
  }

  /** {@code replace} with a string value. */
  public static JsonPatchOp replace(String path, String value) {
    return replace(path, TextNode.valueOf(Objects.requireNonNull(value, "value")));
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

  ObjectNode toJson() {
    ObjectNode json = Json.MAPPER.createObjectNode();
    json.put("op", op);
    json.put("path", path);
    if (from != null) {
      json.put("from", from);
    }
    if (value != null) {
      json.set("value", value.deepCopy());
    }
    return json;
  }

  private static JsonNode orNull(JsonNode value) {
    return value == null ? NullNode.getInstance() : value;
  }
}
