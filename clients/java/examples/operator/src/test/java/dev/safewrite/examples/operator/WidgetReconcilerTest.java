package dev.safewrite.examples.operator;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.safewrite.Fence;
import dev.safewrite.LeadConfig;
import dev.safewrite.Leadership;
import dev.safewrite.SafewriteClient;
import io.fabric8.kubernetes.api.model.Condition;
import io.fabric8.kubernetes.api.model.ObjectMetaBuilder;
import io.fabric8.kubernetes.client.Config;
import io.fabric8.kubernetes.client.ConfigBuilder;
import io.fabric8.kubernetes.client.KubernetesClient;
import io.fabric8.kubernetes.client.KubernetesClientBuilder;
import io.fabric8.kubernetes.client.dsl.Resource;
import io.javaoperatorsdk.operator.Operator;
import io.javaoperatorsdk.operator.api.reconciler.Context;
import io.javaoperatorsdk.operator.api.reconciler.ControllerConfiguration;
import io.javaoperatorsdk.operator.api.reconciler.Reconciler;
import io.javaoperatorsdk.operator.api.reconciler.UpdateControl;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Predicate;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Runs the operator against the real API server and sidecar of
 * ../../../../tests/harness/with-sidecar.sh: a Widget gets its status, and again after its spec
 * changes; a failure that is not retryable is recorded on the Widget and not retried by
 * java-operator-sdk; a retryable one is thrown and retried by it.
 */
class WidgetReconcilerTest {
  private KubernetesClient kubernetes;
  private String namespace;

  /** Each reconcile of the wrapped reconciler: the Widget's name, and whether it was a retry. */
  private record Call(String name, boolean retry) {}

  /** The example's reconciler, with each call recorded. */
  @ControllerConfiguration
  static final class Recorded implements Reconciler<Widget> {
    final WidgetReconciler reconciler;
    final List<Call> calls = new CopyOnWriteArrayList<>();

    Recorded(WidgetReconciler reconciler) {
      this.reconciler = reconciler;
    }

    @Override
    public UpdateControl<Widget> reconcile(Widget widget, Context<Widget> context) {
      calls.add(new Call(widget.getMetadata().getName(), context.getRetryInfo().isPresent()));
      return reconciler.reconcile(widget, context);
    }

    List<Call> of(Widget widget) {
      return calls.stream().filter(c -> c.name().equals(widget.getMetadata().getName())).toList();
    }
  }

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

  @BeforeEach
  void connect() throws Exception {
    Map<String, String> cp = controlPlane();
    Config config =
        new ConfigBuilder()
            .withMasterUrl(cp.get("SERVER"))
            .withOauthToken(cp.get("ADMIN_TOKEN"))
            .withCaCertFile(cp.get("CA_FILE"))
            .build();
    kubernetes = new KubernetesClientBuilder().withConfig(config).build();
    namespace = env("SAFEWRITE_NAMESPACE");
  }

  @AfterEach
  void close() {
    kubernetes.close();
  }

  /** Runs {@code reconciler} in an operator of its own, on this test's namespace. */
  private Operator start(Reconciler<Widget> reconciler) {
    Operator operator = new Operator(o -> o.withKubernetesClient(kubernetes));
    operator.register(reconciler, o -> o.settingNamespace(namespace));
    operator.start();
    return operator;
  }

  private Resource<Widget> create(String prefix, int size) {
    Widget widget = new Widget();
    widget.setMetadata(
        new ObjectMetaBuilder()
            .withName(prefix + "-" + Long.toString(System.nanoTime(), 36))
            .withNamespace(namespace)
            .build());
    widget.setSpec(new Widget.Spec());
    widget.getSpec().setSize(size);
    Resource<Widget> resource =
        kubernetes.resources(Widget.class).inNamespace(namespace).resource(widget);
    resource.create();
    return resource;
  }

  @Test
  void widgetStatusFollowsItsSpec() throws Exception {
    try (SafewriteClient safewrite = SafewriteClient.connect()) {
      Operator operator = start(new WidgetReconciler(safewrite));
      try {
        Resource<Widget> resource = create("josdk", 3);
        Widget reconciled = await(resource, w -> Long.valueOf(30).equals(capacity(w)));
        assertEquals(
            reconciled.getMetadata().getGeneration(),
            reconciled.getStatus().getObservedGeneration());

        resource.edit(
            w -> {
              w.getSpec().setSize(5);
              return w;
            });
        reconciled = await(resource, w -> Long.valueOf(50).equals(capacity(w)));
        assertEquals(5, reconciled.getSpec().getSize());
      } finally {
        operator.stop();
      }
    }
  }

  @Test
  void refusedWidgetIsRecordedAndNotRetried() throws Exception {
    try (SafewriteClient safewrite = SafewriteClient.connect()) {
      Recorded recorded = new Recorded(new WidgetReconciler(safewrite));
      Operator operator = start(recorded);
      try {
        Resource<Widget> resource = create("refused", WidgetReconciler.MAX_SIZE + 1);
        Widget refused = await(resource, w -> refusal(w).isPresent());
        assertEquals("PRECONDITION_FAILED", refusal(refused).get().getReason());
        assertEquals(null, capacity(refused), "nothing else was written");
        int calls = recorded.of(refused).size();
        // The SDK retries a failed reconcile after 2 s, then 3 s: wait past both.
        Thread.sleep(5_500);
        List<Call> after = recorded.of(refused);
        assertEquals(calls, after.size(), "reconciled again: " + after);
        assertTrue(after.stream().noneMatch(Call::retry), "retried: " + after);

        // Fixed by the user: the next change reconciles, and the refusal is gone.
        resource.edit(
            w -> {
              w.getSpec().setSize(7);
              return w;
            });
        Widget fixed = await(resource, w -> Long.valueOf(70).equals(capacity(w)));
        assertTrue(refusal(fixed).isEmpty(), "still refused: " + fixed.getStatus().getConditions());
      } finally {
        operator.stop();
      }
    }
  }

  @Test
  void retryableFailureIsThrownAndRetriedByTheSdk() throws Exception {
    // Nothing listens on port 1: every call fails with UNAVAILABLE, which is retryable.
    try (SafewriteClient unreachable = SafewriteClient.connect("127.0.0.1:1")) {
      Recorded recorded = new Recorded(new WidgetReconciler(unreachable));
      Operator operator = start(recorded);
      try {
        Resource<Widget> resource = create("retried", 3);
        Widget widget = resource.get();
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (recorded.of(widget).stream().noneMatch(Call::retry)) {
          if (System.nanoTime() > deadline) {
            fail("the SDK never retried: " + recorded.of(widget));
          }
          Thread.sleep(100);
        }
        assertTrue(refusal(resource.get()).isEmpty(), "a retryable failure is not recorded");
      } finally {
        operator.stop();
      }
    }
  }

  @Test
  void onlyWhileLeadingAndWithFencedWrites() throws Exception {
    LeadConfig lease =
        LeadConfig.builder(namespace, "widget-operator-" + Long.toString(System.nanoTime(), 36))
            .build();
    try (SafewriteClient safewrite = SafewriteClient.connect();
        Leadership leadership = safewrite.lead(lease)) {
      List<Throwable> failures = new CopyOnWriteArrayList<>();
      Thread replica =
          new Thread(
              () -> {
                try {
                  WidgetOperator.runWhileLeading(
                      leadership, kubernetes, o -> o.settingNamespace(namespace));
                } catch (Throwable failed) {
                  failures.add(failed);
                }
              });
      replica.start();
      try {
        Fence fence = leadership.awaitLeading(Duration.ofSeconds(30)).orElseThrow().fence();
        Resource<Widget> resource = create("leader", 4);
        Widget reconciled = await(resource, w -> Long.valueOf(40).equals(capacity(w)));
        // The status write was fenced: the Widget records the leader's epoch of the Lease.
        String recorded = reconciled.getMetadata().getAnnotations().get("safewrite.dev/fence");
        assertEquals(
            "{\"" + namespace + "/" + lease.name() + "\":" + fence.epoch() + "}",
            recorded.replace(" ", ""));
      } finally {
        leadership.close();
        replica.join(30_000);
      }
      assertFalse(replica.isAlive(), "the operator did not stop with the leadership");
      assertEquals(List.of(), failures);
    }
  }

  private static Long capacity(Widget widget) {
    return widget.getStatus() == null ? null : widget.getStatus().getCapacity();
  }

  private static Optional<Condition> refusal(Widget widget) {
    return widget.getStatus() == null
        ? Optional.empty()
        : widget.getStatus().getConditions().stream()
            .filter(c -> "Refused".equals(c.getType()))
            .findFirst();
  }

  private static Widget await(Resource<Widget> resource, Predicate<Widget> done)
      throws InterruptedException {
    long deadline = System.nanoTime() + 30_000_000_000L;
    Widget current = null;
    while (System.nanoTime() < deadline) {
      current = resource.get();
      if (current != null && done.test(current)) {
        return current;
      }
      Thread.sleep(100);
    }
    fail("the widget's status never got there: " + (current == null ? null : current.getStatus()));
    return null;
  }
}
