package dev.safewrite;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicLong;

/** One replica of the counter: while it leads the Lease, it adds one to n, write after write. */
final class CounterReplica {
  static final Mutation INCREMENT =
      Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}");
  // Long enough that every write gets a definite answer, even across a paused sidecar.
  static final WriteConfig WRITE = WriteConfig.builder().timeout(Duration.ofSeconds(30)).build();

  final AtomicLong acknowledged = new AtomicLong();
  final List<Reason> refused = new CopyOnWriteArrayList<>();
  volatile boolean stopped;

  void run(Leadership leadership, ObjectRef counter) throws Exception {
    leadership.whileLeading(
        (fenced, term) -> {
          while (term.isLeading() && !stopped) {
            try {
              fenced.update(counter, INCREMENT, WRITE); // carries term.fence()
              acknowledged.incrementAndGet();
            } catch (PreconditionFailedException deposed) {
              refused.add(deposed.writeFailureReason()); // NOT_LEADER or FENCED: not applied
              throw deposed; // this term is over: whileLeading waits for the next
            }
          }
        });
  }
}
