package dev.safewrite.examples.operator;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import dev.safewrite.SafewriteClient;
import io.fabric8.kubernetes.api.model.ObjectMetaBuilder;
import io.fabric8.kubernetes.client.Config;
import io.fabric8.kubernetes.client.ConfigBuilder;
import io.fabric8.kubernetes.client.KubernetesClient;
import io.fabric8.kubernetes.client.KubernetesClientBuilder;
import io.javaoperatorsdk.operator.Operator;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.function.Predicate;
import org.junit.jupiter.api.Test;

/**
 * Runs the operator against the real API server and sidecar of
 * ../../../../tests/harness/with-sidecar.sh: a Widget gets its status, and again after its spec
 * changes.
 */
class WidgetReconcilerTest {

  private static String env(String name) {
    String value = System.getenv(name);
    if (value == null || value.isEmpty()) {
      throw new IllegalStateException(name + " is not set: run this through run.sh");
    }
    return value;
  }

  /** The control plane's env file: SERVER, ADMIN_TOKEN, CA_FILE. */
  private static Map<String, String> controlPlane() throws Exception {
    Map<String, String> values = new HashMap<>();
    for (String line : Files.readAllLines(Path.of(env("SAFEWRITE_CP_ENV")))) {
      int eq = line.indexOf('=');
      if (eq > 0) {
        values.put(line.substring(0, eq), line.substring(eq + 1));
      }
    }
    return values;
  }

  @Test
  void widgetStatusFollowsItsSpec() throws Exception {
    Map<String, String> cp = controlPlane();
    Config config =
        new ConfigBuilder()
            .withMasterUrl(cp.get("SERVER"))
            .withOauthToken(cp.get("ADMIN_TOKEN"))
            .withCaCertFile(cp.get("CA_FILE"))
            .build();
    String namespace = env("SAFEWRITE_NAMESPACE");
    try (KubernetesClient kubernetes = new KubernetesClientBuilder().withConfig(config).build();
        SafewriteClient safewrite = SafewriteClient.connect()) {
      Operator operator = new Operator(o -> o.withKubernetesClient(kubernetes));
      operator.register(new WidgetReconciler(safewrite), o -> o.settingNamespace(namespace));
      operator.start();
      try {
        Widget widget = new Widget();
        widget.setMetadata(
            new ObjectMetaBuilder()
                .withName("josdk-" + Long.toString(System.nanoTime(), 36))
                .withNamespace(namespace)
                .build());
        widget.setSpec(new Widget.Spec());
        widget.getSpec().setSize(3);
        var resource = kubernetes.resources(Widget.class).inNamespace(namespace).resource(widget);
        resource.create();
        Widget reconciled = await(kubernetes, widget, w -> Long.valueOf(30).equals(capacity(w)));
        assertEquals(
            reconciled.getMetadata().getGeneration(),
            reconciled.getStatus().getObservedGeneration());

        resource.edit(
            w -> {
              w.getSpec().setSize(5);
              return w;
            });
        reconciled = await(kubernetes, widget, w -> Long.valueOf(50).equals(capacity(w)));
        assertEquals(5, reconciled.getSpec().getSize());
      } finally {
        operator.stop();
      }
    }
  }

  private static Long capacity(Widget widget) {
    return widget.getStatus() == null ? null : widget.getStatus().getCapacity();
  }

  private static Widget await(KubernetesClient kubernetes, Widget widget, Predicate<Widget> done)
      throws InterruptedException {
    long deadline = System.nanoTime() + 30_000_000_000L;
    Widget current = null;
    while (System.nanoTime() < deadline) {
      current =
          kubernetes
              .resources(Widget.class)
              .inNamespace(widget.getMetadata().getNamespace())
              .withName(widget.getMetadata().getName())
              .get();
      if (current != null && done.test(current)) {
        return current;
      }
      Thread.sleep(100);
    }
    fail("the widget's status never got there: " + (current == null ? null : current.getStatus()));
    return null;
  }
}
