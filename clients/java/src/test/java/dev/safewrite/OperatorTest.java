package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.fabric8.kubernetes.api.model.ConfigMap;
import io.fabric8.kubernetes.api.model.ConfigMapBuilder;
import io.fabric8.kubernetes.api.model.Namespace;
import io.fabric8.kubernetes.api.model.NamespaceBuilder;
import io.fabric8.kubernetes.api.model.Namespaced;
import io.fabric8.kubernetes.api.model.ObjectMetaBuilder;
import io.fabric8.kubernetes.api.model.apps.Deployment;
import io.fabric8.kubernetes.api.model.apps.DeploymentBuilder;
import io.fabric8.kubernetes.client.CustomResource;
import io.fabric8.kubernetes.model.annotation.Group;
import io.fabric8.kubernetes.model.annotation.Kind;
import io.fabric8.kubernetes.model.annotation.Version;
import io.javaoperatorsdk.operator.api.reconciler.Context;
import io.javaoperatorsdk.operator.api.reconciler.Reconciler;
import io.javaoperatorsdk.operator.api.reconciler.UpdateControl;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * fabric8 objects, as java-operator-sdk hands them to a reconciler, name their targets with {@link
 * ObjectRef#of(io.fabric8.kubernetes.api.model.HasMetadata)}, and a JOSDK reconciler writes a
 * custom resource's status through the sidecar.
 */
class OperatorTest {

  /** The harness's custom resource, widgets.test.safewrite.dev, as a JOSDK operator models it. */
  @Group("test.safewrite.dev")
  @Version("v1")
  @Kind("Widget")
  public static class Widget extends CustomResource<WidgetSpec, WidgetStatus>
      implements Namespaced {
    private static final long serialVersionUID = 1L;
  }

  public static class WidgetSpec {
    public int size;
  }

  public static class WidgetStatus {
    public Long capacity;
  }

  /**
   * Writes a Widget's status, computed by the sidecar from the fresh object, with the error mapping
   * of java-operator-sdk's retry (as examples/operator does): a retryable failure is thrown, for
   * the SDK to retry with its backoff; any other would fail the same way again, so the reconcile
   * returns normally and the SDK does not retry it.
   */
  static final class WidgetReconciler implements Reconciler<Widget> {
    private static final Mutation STATUS =
        Mutation.cel("{\"status\": {\"capacity\": int(object.spec.size) * 10}}");
    private static final WriteConfig BOUNDED =
        WriteConfig.builder().timeout(Duration.ofSeconds(10)).build();

    private final SafewriteClient safewrite;
    final List<Outcome> outcomes = new ArrayList<>();
    final List<SafewriteException> refused = new ArrayList<>();

    WidgetReconciler(SafewriteClient safewrite) {
      this.safewrite = safewrite;
    }

    @Override
    public UpdateControl<Widget> reconcile(Widget widget, Context<Widget> context) {
      try {
        outcomes.add(safewrite.patchStatus(ObjectRef.of(widget), STATUS, BOUNDED).outcome());
      } catch (SafewriteException e) {
        if (e.isRetryable()) {
          throw e; // the SDK retries a thrown exception
        }
        refused.add(e); // a real reconciler records it in the status: see examples/operator
      }
      return UpdateControl.noUpdate();
    }
  }

  private static Widget widget(String namespace, String name) {
    Widget widget = new Widget();
    widget.setMetadata(new ObjectMetaBuilder().withNamespace(namespace).withName(name).build());
    return widget;
  }

  @Test
  void targetComesFromTheResource() {
    ConfigMap configMap =
        new ConfigMapBuilder()
            .withNewMetadata()
            .withNamespace("default")
            .withName("counter")
            .endMetadata()
            .build();
    assertEquals(ObjectRef.of("v1", "ConfigMap", "default", "counter"), ObjectRef.of(configMap));
    assertEquals(
        ObjectRef.of("test.safewrite.dev/v1", "Widget", "default", "gear"),
        ObjectRef.of(widget("default", "gear")));
    Deployment deployment =
        new DeploymentBuilder()
            .withNewMetadata()
            .withNamespace("a")
            .withName("b")
            .endMetadata()
            .build();
    assertEquals(ObjectRef.of("apps/v1", "Deployment", "a", "b"), ObjectRef.of(deployment));
    Namespace namespace =
        new NamespaceBuilder().withNewMetadata().withName("team").endMetadata().build();
    assertEquals(ObjectRef.clusterScoped("v1", "Namespace", "team"), ObjectRef.of(namespace));

    // An object whose apiVersion and kind were left unset: the class's annotations say them.
    configMap.setApiVersion(null);
    configMap.setKind(null);
    assertEquals(ObjectRef.of("v1", "ConfigMap", "default", "counter"), ObjectRef.of(configMap));
    // No metadata: the parts are empty, and the sidecar refuses them.
    assertEquals(ObjectRef.of("v1", "ConfigMap", "", ""), ObjectRef.of(new ConfigMap()));
  }

  @Test
  @Tag("sidecar")
  void reconcilerWritesTheStatusOfTheResourceItIsGiven() throws Exception {
    Widget widget = widget(Sidecar.namespace(), Sidecar.name("josdk"));
    Result created =
        Sidecar.client()
            .update(
                ObjectRef.of(widget),
                Mutation.mergePatch("{}"),
                WriteConfig.builder().createIfMissing("{\"spec\": {\"size\": 3}}").build());
    assertEquals(Outcome.CREATED, created.outcome());

    WidgetReconciler reconciler = new WidgetReconciler(Sidecar.client());
    assertTrue(
        reconciler.reconcile(widget, null).isNoUpdate(),
        "written already: the SDK patches nothing");
    reconciler.reconcile(widget, null);
    assertEquals(List.of(Outcome.UPDATED, Outcome.UNCHANGED), reconciler.outcomes);
    ObjectNode status = Sidecar.read(ObjectRef.of(widget)).withObjectProperty("status");
    assertEquals(30, status.get("capacity").asInt());
  }

  @Test
  @Tag("sidecar")
  void configMapIsWrittenByItsOwnName() {
    ConfigMap configMap =
        new ConfigMapBuilder()
            .withNewMetadata()
            .withNamespace(Sidecar.namespace())
            .withName(Sidecar.name("fabric8"))
            .endMetadata()
            .build();
    WriteConfig ifMissing =
        WriteConfig.builder()
            .createIfMissing("{\"data\": {\"n\": \"0\"}}")
            .timeout(Duration.ofSeconds(10))
            .build();
    Mutation increment = Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}");
    ObjectRef ref = ObjectRef.of(configMap);
    assertEquals(Outcome.CREATED, Sidecar.client().update(ref, increment, ifMissing).outcome());
    assertEquals(Outcome.UPDATED, Sidecar.client().update(ref, increment, ifMissing).outcome());
    assertEquals("2", Sidecar.data(Sidecar.read(ref), "n"));
  }

  @Test
  @Tag("sidecar")
  void reconcilerThrowsOnlyWhatTheSdkShouldRetry() throws Exception {
    Widget widget = widget(Sidecar.namespace(), Sidecar.name("josdk-errors"));
    Sidecar.client()
        .update(
            ObjectRef.of(widget),
            Mutation.mergePatch("{}"),
            WriteConfig.builder().createIfMissing("{\"spec\": {\"size\": 3}}").build());

    // A sidecar whose identity may only read: the API server refuses the write, and would
    // refuse it again. The reconcile ends normally: the SDK does not retry it.
    try (SafewriteClient readOnly =
        SafewriteClient.connect(Sidecar.env("SAFEWRITE_RESTRICTED_ADDR"))) {
      WidgetReconciler reconciler = new WidgetReconciler(readOnly);
      assertTrue(reconciler.reconcile(widget, null).isNoUpdate());
      assertEquals(1, reconciler.refused.size());
      assertInstanceOf(PermissionDeniedException.class, reconciler.refused.get(0));
      assertFalse(reconciler.refused.get(0).isRetryable());
    }

    // Nothing listens on port 1: UNAVAILABLE is retryable, so it is thrown for the SDK's retry.
    try (SafewriteClient unreachable = SafewriteClient.connect("127.0.0.1:1")) {
      WidgetReconciler reconciler = new WidgetReconciler(unreachable);
      UnavailableException thrown =
          assertThrows(UnavailableException.class, () -> reconciler.reconcile(widget, null));
      assertTrue(thrown.isRetryable());
      assertTrue(reconciler.refused.isEmpty());
    }
  }
}
