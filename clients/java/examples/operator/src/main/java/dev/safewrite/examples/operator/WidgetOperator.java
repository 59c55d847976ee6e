package dev.safewrite.examples.operator;

import dev.safewrite.SafewriteClient;
import io.javaoperatorsdk.operator.Operator;

/**
 * Runs the Widget controller: the Kubernetes client comes from the kubeconfig (or the pod's service
 * account), the sidecar's address from {@code SAFEWRITE_ADDRESS}.
 */
public final class WidgetOperator {
  private WidgetOperator() {}

  public static void main(String[] args) {
    SafewriteClient safewrite = SafewriteClient.connect();
    Operator operator = new Operator();
    operator.register(new WidgetReconciler(safewrite));
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  operator.stop();
                  safewrite.close();
                }));
    operator.start();
  }
}
