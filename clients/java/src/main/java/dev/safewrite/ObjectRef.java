package dev.safewrite;

import io.fabric8.kubernetes.api.model.HasMetadata;
import io.fabric8.kubernetes.api.model.ObjectMeta;
import java.util.Objects;

/**
 * Names one Kubernetes object: its apiVersion ({@code "v1"}, {@code "apps/v1"}), kind ({@code
 * "ConfigMap"}), namespace (empty for a cluster-scoped kind) and name. {@link #of(HasMetadata)}
 * takes them from a fabric8 object, such as a java-operator-sdk resource.
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

  /**
   * The object a fabric8 resource names (a {@code ConfigMap}, a java-operator-sdk {@code
   * CustomResource}, ...): its apiVersion and kind (from the class's {@code @Group},
   * {@code @Version} and {@code @Kind} when the object leaves them unset), and its metadata's
   * namespace and name. Parts it lacks are empty, and the sidecar refuses the required ones. Needs
   * {@code io.fabric8:kubernetes-model-core} on the class path, which this client does not bring:
   * an operator has it already.
   */
  public static ObjectRef of(HasMetadata resource) {
    Objects.requireNonNull(resource, "resource");
    String apiVersion = Fabric8Types.apiVersion(resource);
    String kind = Fabric8Types.kind(resource);
    ObjectMeta metadata = resource.getMetadata();
    return metadata == null
        ? new ObjectRef(apiVersion, kind, "", "")
        : new ObjectRef(apiVersion, kind, metadata.getNamespace(), metadata.getName());
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
