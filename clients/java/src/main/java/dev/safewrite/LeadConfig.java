package dev.safewrite;

import dev.safewrite.v1.LeadRequest;
import java.time.Duration;
import java.util.Objects;

/**
 * What to campaign for with {@link SafewriteClient#lead(LeadConfig)}: a {@code
 * coordination.k8s.io/v1} Lease, the identity to hold it under, and the campaign's timings.
 * Immutable, built with {@link #builder(String, String)}.
 *
 * <pre>{@code
 * LeadConfig config = LeadConfig.builder("default", "widget-controller")
 *     .identity(System.getenv("POD_NAME"))
 *     .leaseDuration(Duration.ofSeconds(15))
 *     .renewDeadline(Duration.ofSeconds(10))
 *     .retryPeriod(Duration.ofSeconds(2))
 *     .build();
 * }</pre>
 *
 * <p>The sidecar checks everything before it campaigns, as client-go does: the namespace a DNS-1123
 * label, the name a DNS-1123 subdomain, lease duration (whole seconds, 1 s to 1 h) longer than the
 * renew deadline, the renew deadline longer than 1.2 retry periods, the retry period at least 10
 * ms. A config that breaks a rule makes {@code lead} throw {@link InvalidException} whose {@link
 * SafewriteException#fieldViolations()} name the field ({@code name}, {@code renew_deadline}, ...).
 */
public final class LeadConfig {
  private final LeadRequest request;

  private LeadConfig(LeadRequest request) {
    this.request = request;
  }

  /**
   * A builder for the Lease {@code namespace/name}; unset timings take the sidecar's defaults
   * (client-go's: lease 15 s, renew deadline 10 s, retry period 2 s) and an unset identity one the
   * sidecar makes unique to the campaign.
   */
  public static Builder builder(String namespace, String name) {
    return new Builder(namespace, name);
  }

  /** The Lease's namespace. */
  public String namespace() {
    return request.getNamespace();
  }

  /** The Lease's name. */
  public String name() {
    return request.getName();
  }

  LeadRequest toProto() {
    return request;
  }

  @Override
  public String toString() {
    return "LeadConfig(" + request.toString().replace('\n', ' ').strip() + ")";
  }

  /** Builds a {@link LeadConfig}; setting a value again replaces it. */
  public static final class Builder {
    private final LeadRequest.Builder request = LeadRequest.newBuilder();

    private Builder(String namespace, String name) {
      request
          .setNamespace(Objects.requireNonNull(namespace, "namespace"))
          .setName(Objects.requireNonNull(name, "name"));
    }

    /**
     * The identity the Lease is held under (its {@code spec.holderIdentity}), e.g. the pod's name:
     * 1 to 253 printable ASCII characters, no spaces. Unset: the sidecar makes one unique to the
     * campaign. A campaign never takes over a Lease held under its own identity by another campaign
     * before it expires, so two candidates given the same identity never both lead.
     */
    public Builder identity(String identity) {
      request.setIdentity(Objects.requireNonNull(identity, "identity"));
      return this;
    }

    /**
     * How long the Lease lasts after its last renewal, as other candidates see it: whole seconds,
     * longer than the renew deadline. Unset: 15 s.
     */
    public Builder leaseDuration(Duration duration) {
      request.setLeaseDuration(proto(duration));
      return this;
    }

    /**
     * How long the leader keeps leading without a successful renewal: shorter than the lease
     * duration, longer than 1.2 retry periods. Unset: 10 s.
     */
    public Builder renewDeadline(Duration deadline) {
      request.setRenewDeadline(proto(deadline));
      return this;
    }

    /** How often the sidecar tries to acquire or renew the Lease: at least 10 ms. Unset: 2 s. */
    public Builder retryPeriod(Duration period) {
      request.setRetryPeriod(proto(period));
      return this;
    }

    public LeadConfig build() {
      return new LeadConfig(request.build());
    }

    /** Sent as it is: the sidecar checks the value, and names the field when it refuses it. */
    private static com.google.protobuf.Duration proto(Duration value) {
      Objects.requireNonNull(value, "duration");
      return com.google.protobuf.Duration.newBuilder()
          .setSeconds(value.getSeconds())
          .setNanos(value.getNano())
          .build();
    }
  }
}
