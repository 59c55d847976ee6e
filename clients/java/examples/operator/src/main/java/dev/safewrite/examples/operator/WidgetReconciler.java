package dev.safewrite.examples.operator;

import dev.safewrite.Mutation;
import dev.safewrite.NotFoundException;
import dev.safewrite.ObjectRef;
import dev.safewrite.SafewriteClient;
import dev.safewrite.SafewriteException;
import dev.safewrite.WriteConfig;
import io.javaoperatorsdk.operator.api.reconciler.Context;
import io.javaoperatorsdk.operator.api.reconciler.ControllerConfiguration;
import io.javaoperatorsdk.operator.api.reconciler.Reconciler;
import io.javaoperatorsdk.operator.api.reconciler.UpdateControl;
import java.time.Duration;

/**
 * Reconciles a Widget by writing its status through safewrite instead of the operator SDK's own
 * status update: the sidecar computes the status from the fresh object (a CEL expression), writes
 * it with the resourceVersion it read and retries conflicts itself, so a stale cache can never
 * overwrite a newer status, and an unchanged status writes nothing (no event, no reconcile loop).
 */
@ControllerConfiguration
public class WidgetReconciler implements Reconciler<Widget> {
  /** The status as a function of the fresh object, evaluated by the sidecar. */
  static final Mutation STATUS =
      Mutation.cel(
          "{\"status\": {\"capacity\": int(object.spec.size) * 10,"
              + " \"observedGeneration\": object.metadata.generation}}");

  /** Each status write is bounded; the SDK retries a failed reconcile with its own backoff. */
  static final WriteConfig BOUNDED = WriteConfig.builder().timeout(Duration.ofSeconds(10)).build();

  private final SafewriteClient safewrite;

  public WidgetReconciler(SafewriteClient safewrite) {
    this.safewrite = safewrite;
  }

  @Override
  public UpdateControl<Widget> reconcile(Widget widget, Context<Widget> context) {
    try {
      safewrite.patchStatus(ObjectRef.of(widget), STATUS, BOUNDED);
    } catch (NotFoundException deleted) {
      // Gone since the event: nothing to do.
    } catch (SafewriteException e) {
      if (!e.isRetryable()) {
        throw e; // the SDK logs it and retries with its own backoff
      }
      return UpdateControl.<Widget>noUpdate()
          .rescheduleAfter(e.retryDelay().orElse(Duration.ofSeconds(1)));
    }
    // The status is already written: the SDK has nothing to update.
    return UpdateControl.noUpdate();
  }
}
