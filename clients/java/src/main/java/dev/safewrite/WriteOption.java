package dev.safewrite;

import com.google.gson.JsonObject;
import java.time.Duration;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * One option of a write, as an argument of the call: the shorthand of {@link WriteConfig.Builder}'s
 * method of the same name. Pass any number of them to {@link SafewriteClient#update}, {@link
 * SafewriteClient#patchStatus} and {@link SafewriteClient#transact}; a later option of the same
 * kind replaces an earlier one.
 *
 * <pre>{@code
 * import static dev.safewrite.WriteOption.*;
 * client.update(ref, mutation, createIfMissing("{}"), timeout(Duration.ofSeconds(10)));
 * }</pre>
 */
public final class WriteOption {
  private final Consumer<WriteConfig.Builder> apply;

  private WriteOption(Consumer<WriteConfig.Builder> apply) {
    this.apply = apply;
  }

  void applyTo(WriteConfig.Builder config) {
    apply.accept(config);
  }

  /** Precondition: the object's metadata.uid must equal {@code uid}. */
  public static WriteOption uid(String uid) {
    Objects.requireNonNull(uid, "uid");
    return new WriteOption(config -> config.uid(uid));
  }

  /**
   * Strict compare-and-swap: the object's metadata.resourceVersion must equal {@code
   * resourceVersion}; otherwise the call fails at once with {@link ConflictException} (reason
   * {@code RESOURCE_VERSION_MISMATCH}), nothing written, no retry.
   */
  public static WriteOption resourceVersion(String resourceVersion) {
    Objects.requireNonNull(resourceVersion, "resourceVersion");
    return new WriteOption(config -> config.resourceVersion(resourceVersion));
  }

  /**
   * Precondition: a CEL expression over {@code object} that must return true, e.g. {@code
   * object.data.phase == "ready"}. When false, the call fails with {@link
   * PreconditionFailedException} carrying the current object.
   */
  public static WriteOption preconditionCel(String expression) {
    Objects.requireNonNull(expression, "expression");
    return new WriteOption(config -> config.preconditionCel(expression));
  }

  /** The retry policy of this call; see {@link RetryPolicy}. */
  public static WriteOption retryPolicy(RetryPolicy policy) {
    Objects.requireNonNull(policy, "policy");
    return new WriteOption(config -> config.retryPolicy(policy));
  }

  /** The field manager recorded in managedFields; required for server-side apply. */
  public static WriteOption fieldManager(String manager) {
    Objects.requireNonNull(manager, "manager");
    return new WriteOption(config -> config.fieldManager(manager));
  }

  /** The API server validates and admits the write without persisting it. */
  public static WriteOption dryRun() {
    return new WriteOption(config -> config.dryRun(true));
  }

  /**
   * The object to create, as JSON, when the target does not exist; the mutation is applied to it
   * first, so "create or change" applies the change once either way. apiVersion, kind, name and
   * namespace come from the target when absent. Not for status.
   */
  public static WriteOption createIfMissing(String objectJson) {
    Objects.requireNonNull(objectJson, "objectJson");
    return new WriteOption(config -> config.createIfMissing(objectJson));
  }

  /** {@link #createIfMissing(String)} with a Gson object. */
  public static WriteOption createIfMissing(JsonObject object) {
    return createIfMissing(Json.text(Objects.requireNonNull(object, "object")));
  }

  /**
   * Makes this change exactly-once across lost answers: the sidecar records the key on the object
   * with the change, and a later attempt or call that finds it answers {@link
   * Result#alreadyApplied()} instead of changing the object again. One key per intended change
   * (e.g. a UUID), 1 to 128 characters of {@code [A-Za-z0-9._:-]}. Not accepted with server-side
   * apply nor for the status subresource.
   */
  public static WriteOption idempotencyKey(String key) {
    Objects.requireNonNull(key, "key");
    return new WriteOption(config -> config.idempotencyKey(key));
  }

  /** Send this write on its own instead of committing it together with concurrent ones. */
  public static WriteOption writeAlone() {
    return new WriteOption(config -> config.writeAlone(true));
  }

  /**
   * Bounds this call, every attempt and backoff included; the sidecar gets it as the gRPC deadline
   * and never sleeps past it. The deadline of the current {@link io.grpc.Context} bounds the call
   * too, whichever is sooner.
   */
  public static WriteOption timeout(Duration timeout) {
    WriteConfig.positive(timeout);
    return new WriteOption(config -> config.timeout(timeout));
  }
}
