package dev.safewrite;

import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * An object read with {@link SafewriteClient#get}: at least as new as the minimum resourceVersion
 * the call named (the caller's own write), or as read live when it named none.
 *
 * @param objectJson the object as JSON
 * @param resourceVersion its {@code metadata.resourceVersion}; pass it (or this result) to a later
 *     {@code get} to read nothing older
 * @param remembered true when the sidecar answered from its remembered copy of the object (as it
 *     last read or wrote it, at or past the minimum) without a request to the API server; false for
 *     a live read
 * @param traceId the W3C trace id of the sidecar's span of the call; empty when its tracing is off
 */
public record GetResult(
    String objectJson, String resourceVersion, boolean remembered, String traceId) {

  /** The object as a Jackson tree, parsed anew on every call (change it freely). */
  public ObjectNode object() {
    return Json.object(objectJson);
  }

  /**
   * The object as an instance of {@code type}, read by Jackson anew on every call: your fabric8
   * class (such as a java-operator-sdk custom resource) or any class Jackson binds.
   *
   * @throws IllegalArgumentException when Jackson cannot read the object as {@code type}
   */
  public <T> T object(Class<T> type) {
    return Json.as(object(), type);
  }

  static GetResult fromProto(dev.safewrite.v1.GetResponse response) {
    return new GetResult(
        response.getObjectJson(),
        response.getResourceVersion(),
        response.getRemembered(),
        response.getTraceId());
  }
}
