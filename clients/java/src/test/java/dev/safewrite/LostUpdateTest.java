package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static dev.safewrite.Sidecar.data;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.parallel.ResourceLock;

/**
 * Contending writers on one object lose no update, whether the change is CEL or Java. They keep the
 * sidecar's rate limit busy, so the timing tests do not run beside them.
 */
@Tag("sidecar")
@ResourceLock(Sidecar.RATE_LIMIT)
class LostUpdateTest {
  private static final Mutation INCREMENT =
      Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}");

  private static void contend(int threads, Runnable increment) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      List<Future<?>> done = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        done.add(pool.submit(increment));
      }
      for (Future<?> future : done) {
        future.get();
      }
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void sixteenThreadsTimesTwentyCelIncrementsEndExact() throws Exception {
    ObjectRef ref = Sidecar.configMap("lost-cel");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    AtomicInteger updated = new AtomicInteger();
    AtomicInteger retries = new AtomicInteger();
    AtomicInteger largestBatch = new AtomicInteger();
    contend(
        16,
        () -> {
          for (int i = 0; i < 20; i++) {
            Result result = client().update(ref, INCREMENT);
            if (result.outcome() == Outcome.UPDATED) {
              updated.incrementAndGet();
            }
            retries.addAndGet(result.attempts() - 1);
            result
                .attemptRecords()
                .forEach(a -> largestBatch.accumulateAndGet(a.batchSize(), Math::max));
          }
        });
    assertEquals(320, updated.get());
    assertEquals("320", data(Sidecar.read(ref), "n"));
    System.out.println(
        "LostUpdateTest: 320 CEL increments needed "
            + retries.get()
            + " conflict retries; the largest group commit carried "
            + largestBatch.get());
  }

  @Test
  void eightThreadsTimesFiveTransactIncrementsEndExact() throws Exception {
    ObjectRef ref = Sidecar.configMap("lost-tx");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    AtomicInteger conflicts = new AtomicInteger();
    contend(
        8,
        () -> {
          for (int i = 0; i < 5; i++) {
            Result result =
                client()
                    .transact(
                        ref,
                        fresh -> {
                          ObjectNode data = fresh.object().withObjectProperty("data");
                          data.put(
                              "n", Integer.toString(Integer.parseInt(data.get("n").asText()) + 1));
                          return null;
                        });
            conflicts.addAndGet(result.attempts() - 1);
          }
        });
    assertEquals("40", data(Sidecar.read(ref), "n"));
    System.out.println(
        "LostUpdateTest: 40 transact increments needed " + conflicts.get() + " conflict retries");
  }
}
