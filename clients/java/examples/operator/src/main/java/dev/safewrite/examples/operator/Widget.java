package dev.safewrite.examples.operator;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import io.fabric8.kubernetes.api.model.Condition;
import io.fabric8.kubernetes.api.model.Namespaced;
import io.fabric8.kubernetes.client.CustomResource;
import io.fabric8.kubernetes.model.annotation.Group;
import io.fabric8.kubernetes.model.annotation.Kind;
import io.fabric8.kubernetes.model.annotation.Version;
import java.util.ArrayList;
import java.util.List;

/** The test harness's custom resource, widgets.test.safewrite.dev (with a status subresource). */
@Group("test.safewrite.dev")
@Version("v1")
@Kind("Widget")
public class Widget extends CustomResource<Widget.Spec, Widget.Status> implements Namespaced {
  private static final long serialVersionUID = 1L;

  /** What the user asks for. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public static class Spec {
    private int size;

    public int getSize() {
      return size;
    }

    public void setSize(int size) {
      this.size = size;
    }
  }

  /** What the controller observed; written through safewrite only. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public static class Status {
    private Long capacity;
    private Long observedGeneration;
    private List<Condition> conditions = new ArrayList<>();

    public List<Condition> getConditions() {
      return conditions;
    }

    public void setConditions(List<Condition> conditions) {
      this.conditions = conditions;
    }

    public Long getCapacity() {
      return capacity;
    }

    public void setCapacity(Long capacity) {
      this.capacity = capacity;
    }

    public Long getObservedGeneration() {
      return observedGeneration;
    }

    public void setObservedGeneration(Long observedGeneration) {
      this.observedGeneration = observedGeneration;
    }
  }
}
