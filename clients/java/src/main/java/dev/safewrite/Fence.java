package dev.safewrite;

import java.util.Objects;

/**
 * The leadership a write is made under: a Lease and the epoch of the caller's leadership of it, as
 * a {@link LeadEvent.Leading} event carries it ({@link Leadership#fence()}, {@link
 * LeaderTerm#fence()}). A write or delete with a fence ({@link WriteConfig.Builder#fence(Fence)},
 * {@link DeleteConfig.Builder#fence(Fence)}, or any call of {@link SafewriteClient#fenced(Fence)})
 * is one a deposed leader cannot make: the sidecar sends it only while it leads the Lease under
 * that epoch (else {@link PreconditionFailedException}, {@code REASON_NOT_LEADER}), and only when
 * the object records no later epoch of the Lease (else {@code REASON_FENCED}); a write to the main
 * resource records the epoch on the object in the same request as its change.
 *
 * @param leaseNamespace the Lease's namespace
 * @param leaseName the Lease's name
 * @param epoch the epoch of the leadership, as the sidecar counts acquisitions of the Lease: an
 *     unsigned 64-bit number, never 0 for a real leadership
 */
public record Fence(String leaseNamespace, String leaseName, long epoch) {
  public Fence {
    Objects.requireNonNull(leaseNamespace, "leaseNamespace");
    Objects.requireNonNull(leaseName, "leaseName");
  }

  dev.safewrite.v1.Fence toProto() {
    return dev.safewrite.v1.Fence.newBuilder()
        .setLeaseNamespace(leaseNamespace)
        .setLeaseName(leaseName)
        .setEpoch(epoch)
        .build();
  }

  @Override
  public String toString() {
    return leaseNamespace + "/" + leaseName + " epoch " + Long.toUnsignedString(epoch);
  }
}
