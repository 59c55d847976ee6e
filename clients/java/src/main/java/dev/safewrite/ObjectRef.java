package dev.safewrite;

import java.util.Objects;

/**
 * Names one Kubernetes object: its apiVersion ({@code "v1"}, {@code "apps/v1"}), kind ({@code
 * "ConfigMap"}), namespace (empty for a cluster-scoped kind) and name.
 *
 * <p>The sidecar checks every part before anything is sent and refuses a malformed one with an
 * {@link InvalidException} naming the field ({@code target.namespace}, ...).
 */
public record ObjectRef(String apiVersion, String kind, String namespace, String name) {

  /** Null parts are taken as empty; the sidecar refuses the required ones when empty. */
  public ObjectRef {
    apiVersion = Objects.requireNonNullElse(apiVersion, "");
    kind = Objects.requireNonNullElse(kind, "");
    namespace = Objects.requireNonNullElse(namespace, "");
    name = Objects.requireNonNullElse(name, "");
  }

  /** A namespaced object, e.g. {@code ObjectRef.of("v1", "ConfigMap", "default", "counter")}. */
  public static ObjectRef of(String apiVersion, String kind, String namespace, String name) {
    return new ObjectRef(apiVersion, kind, namespace, name);
  }

  /** A cluster-scoped object (no namespace), e.g. a Namespace or a ClusterRole. */
  public static ObjectRef clusterScoped(String apiVersion, String kind, String name) {
    return new ObjectRef(apiVersion, kind, "", name);
  }

  dev.safewrite.v1.ObjectRef toProto() {
    return dev.safewrite.v1.ObjectRef.newBuilder()
        .setApiVersion(apiVersion)
        .setKind(kind)
        .setNamespace(namespace)
        .setName(name)
        .build();
  }

  @Override
  public String toString() {
    String where = namespace.isEmpty() ? name : namespace + "/" + name;
    return apiVersion + " " + kind + " " + where;
  }
}
