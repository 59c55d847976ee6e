package dev.safewrite;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The object as the sidecar just read it, handed to a {@link TransactFunction}: one per attempt.
 *
 * @param <T> what {@link #object()} returns: {@link ObjectNode} for {@link
 *     SafewriteClient#transact(ObjectRef, TransactFunction, WriteConfig)}, the class given to
 *     {@link SafewriteClient#transact(ObjectRef, Class, TransactFunction, WriteConfig)} (such as a
 *     java-operator-sdk custom resource) for that one
 */
public final class Fresh<T> {
  private final int attempt;
  private final String objectJson;
  private final String resourceVersion;
  private final boolean creating;
  private final Class<T> type;
  private T object;

  /** The object as the caller's class saw it before the function ran; null for trees. */
  private JsonNode before;

  Fresh(dev.safewrite.v1.FreshObject fresh, Class<T> type) {
    this.attempt = fresh.getAttempt();
    this.objectJson = fresh.getObjectJson();
    this.resourceVersion = fresh.getResourceVersion();
    this.creating = fresh.getCreating();
    this.type = type;
  }

  /** The attempt this object belongs to, starting at 1. */
  public int attempt() {
    return attempt;
  }

  /** The object as JSON, as the API server returned it. */
  public String objectJson() {
    return objectJson;
  }

  /**
   * The object, read once per attempt: a Jackson {@link ObjectNode}, or an instance of the class
   * the transaction was given. Change it in place and return {@code null} (or {@link
   * Proposal#object(Object)} of it) to propose it.
   *
   * <p>For a class of yours, what is written is the fresh object with your changes to this
   * instance: fields of the object your class does not have, or ignores, are kept as they are, and
   * a field your change sets to null is removed (an array you change is written whole).
   *
   * @throws IllegalArgumentException when Jackson cannot read the object as that class (thrown from
   *     your function, it aborts the transaction)
   */
  public T object() {
    if (object == null) {
      ObjectNode tree = Json.object(objectJson);
      object = Json.as(tree, type);
      if (!(object instanceof JsonNode)) {
        before = Json.tree(object);
      }
    }
    return object;
  }

  /** The object's resourceVersion, which the write will carry; empty while creating. */
  public String resourceVersion() {
    return resourceVersion;
  }

  /** True when the object does not exist yet: the create-if-missing object, to be created. */
  public boolean creating() {
    return creating;
  }

  /** True once {@link #object()} was called (it may have been changed in place). */
  boolean objectTouched() {
    return object != null;
  }

  /** Whether {@code value} is the instance {@link #object()} handed out. */
  boolean isObject(Object value) {
    return object != null && value == object;
  }

  /**
   * The JSON to write for the object handed out, as changed in place: the tree itself, or for a
   * class, the fresh object with the changes made to the instance.
   */
  String proposedJson() {
    if (before == null) {
      return Json.text((JsonNode) object);
    }
    JsonNode patch = Json.mergeDiff(before, Json.tree(object));
    return Json.text(Json.mergeApply(Json.object(objectJson), patch));
  }
}
