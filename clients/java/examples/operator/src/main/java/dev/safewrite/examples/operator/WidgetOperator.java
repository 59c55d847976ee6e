package dev.safewrite.examples.operator;

import dev.safewrite.LeadConfig;
import dev.safewrite.Leadership;
import dev.safewrite.SafewriteClient;
import io.fabric8.kubernetes.client.KubernetesClient;
import io.fabric8.kubernetes.client.KubernetesClientBuilder;
import io.javaoperatorsdk.operator.Operator;
import io.javaoperatorsdk.operator.api.config.ControllerConfigurationOverrider;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * Runs the Widget controller in every replica, and lets it reconcile only in the one that leads:
 * the replicas campaign for one Lease through their sidecars (java-operator-sdk's own leader
 * election stays off), the leader starts an {@link Operator}, and it stops that Operator as soon as
 * it stops leading. Every write the leader's reconciler makes carries its fence, so a leader that
 * was paused past its Lease cannot overwrite what its successor wrote. The Kubernetes client comes
 * from the kubeconfig (or the pod's service account), the sidecar's address from {@code
 * SAFEWRITE_ADDRESS}, the Lease's namespace from {@code POD_NAMESPACE} and the identity from {@code
 * POD_NAME}.
 */
public final class WidgetOperator {
  private WidgetOperator() {}

  public static void main(String[] args) throws Exception {
    String namespace = Objects.requireNonNullElse(System.getenv("POD_NAMESPACE"), "default");
    LeadConfig.Builder lease = LeadConfig.builder(namespace, "widget-operator");
    if (System.getenv("POD_NAME") != null) {
      lease.identity(System.getenv("POD_NAME"));
    }
    try (SafewriteClient safewrite = SafewriteClient.connect();
        KubernetesClient kubernetes = new KubernetesClientBuilder().build();
        Leadership leadership = safewrite.lead(lease.build())) {
      // SIGTERM: end the campaign; the sidecar releases the Lease, the next replica leads at once.
      Runtime.getRuntime().addShutdownHook(new Thread(leadership::close));
      runWhileLeading(leadership, kubernetes, controller -> {});
    }
  }

  /**
   * Runs an Operator with the Widget controller during each term of {@code leadership}, its
   * reconciler writing through the term's fenced client; returns when the leadership ends.
   */
  public static void runWhileLeading(
      Leadership leadership,
      KubernetesClient kubernetes,
      Consumer<ControllerConfigurationOverrider<Widget>> controller)
      throws Exception {
    leadership.whileLeading(
        (fenced, term) -> {
          // A new Operator per term (one that was stopped does not start again); the client is
          // shared, so the Operator must not close it.
          Operator operator =
              new Operator(o -> o.withKubernetesClient(kubernetes).withCloseClientOnStop(false));
          operator.register(new WidgetReconciler(fenced), controller);
          operator.start();
          try {
            term.awaitEnd(); // another replica leads, or the campaign ended
          } finally {
            operator.stop();
          }
        });
  }
}
