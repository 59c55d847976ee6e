package dev.safewrite;

import com.google.gson.JsonObject;

/**
 * The object as the sidecar just read it, handed to a {@link TransactFunction}: one per attempt.
 */
public final class Fresh {
  private final int attempt;
  private final String objectJson;
  private final String resourceVersion;
  private final boolean creating;
  private JsonObject object;

  Fresh(dev.safewrite.v1.FreshObject fresh) {
    this.attempt = fresh.getAttempt();
    this.objectJson = fresh.getObjectJson();
    this.resourceVersion = fresh.getResourceVersion();
    this.creating = fresh.getCreating();
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
   * The object as a Gson tree, parsed once: change it in place and return {@code null} (or {@link
   * Proposal#object(JsonObject)} of it) to propose it.
   */
  public JsonObject object() {
    if (object == null) {
      object = Json.object(objectJson);
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

  /** True once {@link #object()} was called (its tree may have been changed in place). */
  boolean objectTouched() {
    return object != null;
  }
}
