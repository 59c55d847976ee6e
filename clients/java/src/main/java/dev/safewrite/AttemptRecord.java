package dev.safewrite;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * A short record of one attempt of a call.
 *
 * @param number the attempt's number, starting at 1
 * @param resourceVersionRead the resourceVersion of the fresh object it read
 * @param httpStatus the HTTP status of its write (or of the read when that was refused); 0 when
 *     nothing was written or no answer came
 * @param reason the Kubernetes Status reason of the answer, e.g. {@code Conflict}; empty on success
 * @param backoff how long the sidecar slept after it; zero for the last
 * @param batchSize how many requests its write carried (more than 1 when concurrent writes were
 *     committed together); 0 when nothing was written
 */
public record AttemptRecord(
    int number,
    String resourceVersionRead,
    int httpStatus,
    String reason,
    Duration backoff,
    int batchSize) {

  static AttemptRecord fromProto(dev.safewrite.v1.AttemptRecord record) {
    com.google.protobuf.Duration backoff = record.getBackoff();
    return new AttemptRecord(
        record.getNumber(),
        record.getResourceVersionRead(),
        record.getHttpStatus(),
        record.getReason(),
        Duration.ofSeconds(backoff.getSeconds(), backoff.getNanos()),
        record.getBatchSize());
  }

  static List<AttemptRecord> fromProto(List<dev.safewrite.v1.AttemptRecord> records) {
    List<AttemptRecord> out = new ArrayList<>(records.size());
    for (dev.safewrite.v1.AttemptRecord record : records) {
      out.add(fromProto(record));
    }
    return List.copyOf(out);
  }
}
