package dev.safewrite;

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * JSON text to and from Jackson trees and the caller's own classes. Numbers keep their value
 * (integers of any size, decimals as BigDecimal), so int64 values survive. A class's fields left
 * null are not written, as fabric8 writes them (a null in a Map or a tree is); fields of the JSON a
 * class does not have are ignored when reading it (the transaction keeps them on the object: {@link
 * #mergeDiff}).
 */
final class Json {
  static final ObjectMapper MAPPER =
      JsonMapper.builder()
          .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
          .disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
          .disable(JsonNodeFeature.STRIP_TRAILING_BIGDECIMAL_ZEROES)
          .defaultPropertyInclusion(
              JsonInclude.Value.construct(
                  JsonInclude.Include.NON_NULL, JsonInclude.Include.USE_DEFAULTS))
          .build();

  private Json() {}

  static String text(JsonNode node) {
    try {
      return MAPPER.writeValueAsString(node);
    } catch (JsonProcessingException cannot) {
      throw new IllegalStateException("a JSON tree could not be written: " + cannot, cannot);
    }
  }

  /**
   * {@code value} as JSON text: a {@link JsonNode} as it is, any other object as Jackson writes it
   * (a fabric8 resource, a {@code Map}, your own class).
   *
   * @throws IllegalArgumentException when Jackson cannot write it
   */
  static String text(Object value) {
    return text(tree(value));
  }

  /** {@code value} as a tree; see {@link #text(Object)}. */
  static JsonNode tree(Object value) {
    Objects.requireNonNull(value, "value");
    if (value instanceof String) {
      throw new IllegalArgumentException("a String here would be a JSON string, not an object");
    }
    return value instanceof JsonNode node ? node : MAPPER.valueToTree(value);
  }

  /** Parses a JSON object; the sidecar and the API server only ever send objects. */
  static ObjectNode object(String text) {
    JsonNode node = parse(text);
    if (!(node instanceof ObjectNode object)) {
      throw new IllegalArgumentException("not a JSON object: " + abbreviate(text));
    }
    return object;
  }

  static JsonNode parse(String text) {
    try {
      return MAPPER.readTree(text);
    } catch (JsonProcessingException malformed) {
      throw new IllegalArgumentException("malformed JSON: " + malformed.getOriginalMessage());
    }
  }

  /**
   * The object as an instance of {@code type}: the tree itself for {@link JsonNode} and {@link
   * ObjectNode}, else bound by Jackson (a fabric8 resource, your own class).
   *
   * @throws IllegalArgumentException when Jackson cannot bind it to {@code type}
   */
  static <T> T as(ObjectNode object, Class<T> type) {
    Objects.requireNonNull(type, "type");
    if (type.isInstance(object)) {
      return type.cast(object);
    }
    try {
      return MAPPER.treeToValue(object, type);
    } catch (JsonProcessingException cannot) {
      throw new IllegalArgumentException(
          "the object cannot be read as a " + type.getName() + ": " + cannot.getOriginalMessage(),
          cannot);
    }
  }

  /**
   * The RFC 7386 merge patch that turns {@code before} into {@code after}: changed fields, removed
   * fields as null, and a changed array whole. Fields in neither are not in it.
   */
  static JsonNode mergeDiff(JsonNode before, JsonNode after) {
    if (!(before instanceof ObjectNode old) || !(after instanceof ObjectNode now)) {
      return after;
    }
    ObjectNode patch = MAPPER.createObjectNode();
    for (Map.Entry<String, JsonNode> field : now.properties()) {
      JsonNode was = old.get(field.getKey());
      if (was == null || !was.equals(field.getValue())) {
        patch.set(
            field.getKey(), was == null ? field.getValue() : mergeDiff(was, field.getValue()));
      }
    }
    List<String> removed = new ArrayList<>();
    old.fieldNames().forEachRemaining(name -> removed.add(name));
    for (String name : removed) {
      if (!now.has(name)) {
        patch.set(name, NullNode.getInstance());
      }
    }
    return patch;
  }

  /** {@code target} with the RFC 7386 merge patch applied, in place where it is an object. */
  static JsonNode mergeApply(JsonNode target, JsonNode patch) {
    if (!(patch instanceof ObjectNode changes)) {
      return patch;
    }
    ObjectNode result = target instanceof ObjectNode object ? object : MAPPER.createObjectNode();
    for (Map.Entry<String, JsonNode> field : changes.properties()) {
      if (field.getValue().isNull()) {
        result.remove(field.getKey());
      } else {
        JsonNode current = result.get(field.getKey());
        result.set(
            field.getKey(),
            mergeApply(current == null ? NullNode.getInstance() : current, field.getValue()));
      }
    }
    return result;
  }

  private static String abbreviate(String text) {
    return text.length() <= 80 ? text : text.substring(0, 80) + "...";
  }
}
