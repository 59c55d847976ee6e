package dev.safewrite;

import com.google.gson.JsonObject;

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

  /** The object as a Gson tree, parsed anew on every call (change it freely). */
  public JsonObject object() {
    return Json.object(objectJson);
  }

  static GetResult fromProto(dev.safewrite.v1.GetResponse response) {
    return new GetResult(
        response.getObjectJson(),
        response.getResourceVersion(),
        response.getRemembered(),
        response.getTraceId());
  }
}
