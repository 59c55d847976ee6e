package dev.safewrite;

import dev.safewrite.v1.Preconditions;
import dev.safewrite.v1.RetryPolicy;
import dev.safewrite.v1.WriteOptions;
import java.time.Duration;
import java.util.function.Consumer;

/** The options of one call, as its {@link WriteOption}s leave them. */
final class WriteConfig {
  final Preconditions.Builder preconditions = Preconditions.newBuilder();
  final WriteOptions.Builder options = WriteOptions.newBuilder();
  RetryPolicy retryPolicy;
  Duration timeout;

  WriteConfig() {}

  static WriteConfig of(WriteOption... opts) {
    WriteConfig config = new WriteConfig();
    if (opts != null) {
      for (WriteOption opt : opts) {
        if (opt != null) {
          opt.applyTo(config);
        }
      }
    }
    return config;
  }

  /**
   * Hands each part of the request that the options set to its setter of a request builder
   * (UpdateWithRetry, PatchStatus or TransactBegin); parts left unset are not touched.
   */
  void fill(
      Consumer<Preconditions> setPreconditions,
      Consumer<RetryPolicy> setRetryPolicy,
      Consumer<WriteOptions> setOptions) {
    if (hasPreconditions()) {
      setPreconditions.accept(preconditions.build());
    }
    if (retryPolicy != null) {
      setRetryPolicy.accept(retryPolicy);
    }
    if (hasOptions()) {
      setOptions.accept(options.build());
    }
  }

  boolean hasPreconditions() {
    return !preconditions.build().equals(Preconditions.getDefaultInstance());
  }

  boolean hasOptions() {
    return !options.build().equals(WriteOptions.getDefaultInstance());
  }

  boolean hasIdempotencyKey() {
    return !options.getIdempotencyKey().isEmpty();
  }
}
