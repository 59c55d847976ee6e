package dev.safewrite.examples.operator;

import dev.safewrite.Mutation;
import dev.safewrite.NotFoundException;
import dev.safewrite.ObjectRef;
import dev.safewrite.Reason;
import dev.safewrite.SafewriteClient;
import dev.safewrite.SafewriteException;
import dev.safewrite.WriteConfig;
import io.fabric8.kubernetes.api.model.ConditionBuilder;
import io.javaoperatorsdk.operator.api.reconciler.Context;
import io.javaoperatorsdk.operator.api.reconciler.ControllerConfiguration;
import io.javaoperatorsdk.operator.api.reconciler.Reconciler;
import io.javaoperatorsdk.operator.api.reconciler.UpdateControl;
import java.time.Duration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reconciles a Widget by writing its status through safewrite instead of the operator SDK's own
 * status update: the sidecar hands the transaction the fresh Widget, writes the status computed
 * from it with the resourceVersion it read and retries conflicts itself, so a stale cache can never
 * overwrite a newer status, and an unchanged status writes nothing (no event, no reconcile loop).
 *
 * <p>Errors follow java-operator-sdk's retry: a failure safewrite says is worth retrying is thrown,
 * and the SDK retries it with its backoff; any other failure would fail the same way again, so it
 * is recorded on the Widget as a {@code Refused} condition and the reconcile returns normally: the
 * SDK does not retry it, and the next change to the Widget reconciles again.
 *
 * <p>Run by {@link WidgetOperator} only while its replica leads, with a fenced client: a write
 * refused because another replica leads now ({@code NOT_LEADER}, {@code FENCED}) is neither
 * recorded nor retried.
 */
@ControllerConfiguration
public class WidgetReconciler implements Reconciler<Widget> {
  private static final Logger LOG = LoggerFactory.getLogger(WidgetReconciler.class);

  /** The largest size served; a larger Widget is refused until its spec changes. */
  static final int MAX_SIZE = 1000;

  /** Each status write is bounded, and refused for a Widget larger than {@link #MAX_SIZE}. */
  static final WriteConfig STATUS_WRITE =
      WriteConfig.builder()
          .preconditionCel("int(object.spec.size) <= " + MAX_SIZE)
          .timeout(Duration.ofSeconds(10))
          .build();

  /** A failure's record is bounded too. */
  static final WriteConfig BOUNDED = WriteConfig.builder().timeout(Duration.ofSeconds(10)).build();

  private final SafewriteClient safewrite;

  public WidgetReconciler(SafewriteClient safewrite) {
    this.safewrite = safewrite;
  }

  @Override
  public UpdateControl<Widget> reconcile(Widget widget, Context<Widget> context) {
    ObjectRef ref = ObjectRef.of(widget);
    try {
      safewrite.transactStatus(
          ref,
          Widget.class,
          fresh -> {
            Widget current = fresh.object();
            Widget.Status status = current.getStatus();
            if (status == null) {
              status = new Widget.Status();
              current.setStatus(status);
            }
            status.setCapacity(current.getSpec().getSize() * 10L);
            status.setObservedGeneration(current.getMetadata().getGeneration());
            status.getConditions().removeIf(c -> "Refused".equals(c.getType()));
            return null; // write the fresh Widget as changed here
          },
          STATUS_WRITE);
    } catch (NotFoundException deleted) {
      // Gone since the event: nothing to do.
    } catch (SafewriteException e) {
      if (deposed(e)) {
        // Run by WidgetOperator while leading: another replica leads now, and this Operator is
        // being stopped. Nothing was written; the new leader reconciles the Widget.
        LOG.info("{}: not the leader any more: {}", ref, e.description());
        return UpdateControl.noUpdate();
      }
      if (e.isRetryable()) {
        throw e; // the SDK logs it and retries with its own backoff
      }
      refused(ref, e);
    }
    // The status is already written: the SDK has nothing to update, and retries nothing.
    return UpdateControl.noUpdate();
  }

  /** A fenced write refused: this replica no longer leads under the fence it wrote with. */
  static boolean deposed(SafewriteException e) {
    return e.writeFailureReason() == Reason.REASON_NOT_LEADER
        || e.writeFailureReason() == Reason.REASON_FENCED;
  }

  /** Says on the Widget why its status could not be written; never asks the SDK to retry. */
  private void refused(ObjectRef ref, SafewriteException e) {
    String reason = e.reason().isEmpty() ? e.code().name() : e.reason();
    try {
      safewrite.patchStatus(
          ref,
          Mutation.setCondition(
              new ConditionBuilder()
                  .withType("Refused")
                  .withStatus("True")
                  .withReason(reason)
                  .withMessage(e.description().isEmpty() ? e.getMessage() : e.description())
                  .build()),
          BOUNDED);
    } catch (SafewriteException unrecorded) {
      LOG.warn("{}: {}; and it could not be recorded: {}", ref, e, unrecorded.toString());
    }
  }
}
