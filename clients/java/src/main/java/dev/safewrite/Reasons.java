package dev.safewrite;

import dev.safewrite.v1.RetryByCode;
import dev.safewrite.v1.WriterProto;
import io.grpc.Status;
import java.util.Collections;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The {@link Reason} values: their ErrorInfo spelling and the retry advice the proto gives for
 * each. The advice is read from the generated descriptor, not kept here: each value's {@code retry}
 * option (a {@link Retry}) and, for the values that leave it to the gRPC code, the enum's {@code
 * retry_by_code} table. A value added to the proto brings its advice with it, and this client, the
 * sidecar and the other clients give the same advice.
 */
public final class Reasons {
  private static final String PREFIX = "REASON_";

  /** The {@code retry_by_code} table: a code missing from it is {@code RETRY_NEVER}. */
  private static final Map<Status.Code, Retry> BY_CODE = byCode();

  private Reasons() {}

  /**
   * The proto's {@code retry} option of {@code reason}: {@code RETRY_NEVER}, {@code RETRY_LATER},
   * {@code RETRY_WITH_IDEMPOTENCY_KEY} or {@code RETRY_BY_CODE}. A value newer than this client
   * ({@link Reason#UNRECOGNIZED}), or one without the option, is {@code RETRY_BY_CODE}.
   */
  public static Retry retry(Reason reason) {
    if (reason == Reason.UNRECOGNIZED) {
      return Retry.RETRY_BY_CODE;
    }
    dev.safewrite.v1.Retry retry =
        toProto(reason).getValueDescriptor().getOptions().getExtension(WriterProto.retry);
    return retry == dev.safewrite.v1.Retry.RETRY_UNSPECIFIED ? Retry.RETRY_BY_CODE : of(retry);
  }

  /**
   * The advice after a failure with {@code reason} and gRPC {@code code}: {@link #retry(Reason)},
   * and where that is {@code RETRY_BY_CODE}, what the proto's {@code retry_by_code} table says of
   * the code ({@code RETRY_NEVER} for a code in neither of its lists). Never {@code RETRY_BY_CODE}.
   */
  public static Retry advice(Reason reason, Status.Code code) {
    Retry retry = retry(reason);
    if (retry != Retry.RETRY_BY_CODE) {
      return retry;
    }
    return BY_CODE.getOrDefault(code, Retry.RETRY_NEVER);
  }

  private static Map<Status.Code, Retry> byCode() {
    RetryByCode table =
        dev.safewrite.v1.Reason.getDescriptor().getOptions().getExtension(WriterProto.retryByCode);
    Map<Status.Code, Retry> byCode = new EnumMap<>(Status.Code.class);
    put(byCode, table.getWithIdempotencyKeyList(), Retry.RETRY_WITH_IDEMPOTENCY_KEY);
    put(byCode, table.getLaterList(), Retry.RETRY_LATER);
    return Collections.unmodifiableMap(byCode);
  }

  private static void put(Map<Status.Code, Retry> byCode, List<Integer> codes, Retry retry) {
    for (Status.Code code : Status.Code.values()) {
      if (codes.contains(code.value())) {
        byCode.put(code, retry);
      }
    }
  }

  /**
   * The ErrorInfo spelling of a reason: its name without {@code REASON_}, e.g. {@code
   * CIRCUIT_OPEN}. {@code REASON_API_SERVER} has none of its own (ErrorInfo then carries the API
   * server's Status reason) and answers {@code API_SERVER}.
   */
  public static String errorInfoReason(Reason reason) {
    if (reason == Reason.UNRECOGNIZED) {
      throw new IllegalArgumentException("UNRECOGNIZED has no ErrorInfo reason");
    }
    return reason.name().substring(PREFIX.length());
  }

  /**
   * The {@link Reason} an ErrorInfo reason spells, if it is a safewrite one; empty for the API
   * server's Status reasons ({@code Conflict}, {@code NotFound}, ...).
   */
  public static Optional<Reason> fromErrorInfoReason(String errorInfoReason) {
    if (errorInfoReason == null || errorInfoReason.isEmpty()) {
      return Optional.empty();
    }
    try {
      Reason reason = Reason.valueOf(PREFIX + errorInfoReason);
      return reason == Reason.REASON_UNSPECIFIED ? Optional.empty() : Optional.of(reason);
    } catch (IllegalArgumentException unknown) {
      return Optional.empty();
    }
  }

  /** The client's value of a proto {@code Reason}, by name; a newer one is {@code UNRECOGNIZED}. */
  static Reason of(dev.safewrite.v1.Reason proto) {
    if (proto == dev.safewrite.v1.Reason.UNRECOGNIZED) {
      return Reason.UNRECOGNIZED;
    }
    return Reason.valueOf(proto.name());
  }

  /** The proto's value of a {@link Reason}, by name. */
  static dev.safewrite.v1.Reason toProto(Reason reason) {
    return dev.safewrite.v1.Reason.valueOf(reason.name());
  }

  /** The client's value of a proto {@code Retry} other than {@code RETRY_UNSPECIFIED}, by name. */
  static Retry of(dev.safewrite.v1.Retry proto) {
    return Retry.valueOf(proto.name());
  }
}
