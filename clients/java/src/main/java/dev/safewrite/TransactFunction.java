package dev.safewrite;

/**
 * A transaction's mutation: your own code, given the fresh object and answering with what to write.
 * It is called once per attempt, each time with the next fresh object after a conflict, so it must
 * compute its change from that object alone and have no other side effects.
 *
 * <p>Return a {@link Proposal}, or {@code null} to propose {@link Fresh#object()} as it stands
 * (changed in place, or not at all: then nothing is written). Return {@link Proposal#abort(String)}
 * to end without writing. An exception thrown here also ends the transaction without writing, and
 * {@link SafewriteClient#transact} throws it as it is.
 *
 * @param <T> the type of {@link Fresh#object()}: a Jackson {@code ObjectNode}, or your own class
 */
@FunctionalInterface
public interface TransactFunction<T> {
  Proposal apply(Fresh<T> fresh);
}
