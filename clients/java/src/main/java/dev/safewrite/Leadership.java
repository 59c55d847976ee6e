package dev.safewrite;

import dev.safewrite.v1.LeadRequest;
import dev.safewrite.v1.LeadResponse;
import io.grpc.ClientCall;
import io.grpc.Context;
import io.grpc.Metadata;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Consumer;

/**
 * A campaign for a Lease through the sidecar ({@code Lead}), from {@link
 * SafewriteClient#lead(LeadConfig)}; {@link #close()} ends it and releases the Lease at once when
 * the caller holds it (the next candidate leads within its retry period, not a lease duration).
 *
 * <p>The sidecar campaigns as client-go's leader election does, every write of the Lease
 * conditional, and streams what happens: {@link LeadEvent.Leading} with a {@link Fence} (the Lease
 * and the epoch of this acquisition) when the caller leads, {@link LeadEvent.NotLeading} with a
 * reason when it stops leading or sees another holder. The campaign goes on after a loss, until the
 * stream ends; the client's own last event is {@link NotLeadingReason#ENDED}.
 *
 * <p>Three ways to follow it, all safe for concurrent use:
 *
 * <ul>
 *   <li>{@link #whileLeading(LeaderWork)} runs your work once per leadership, handing it a client
 *       whose writes carry the fence;
 *   <li>listeners: {@link #onLeading(Consumer)}, {@link #onNotLeading(Consumer)}, {@link
 *       #onEvent(Consumer)}, called in order on one thread of this leadership;
 *   <li>state and waiting: {@link #fence()}, {@link #term()}, {@link #lastEvent()}, {@link
 *       #awaitLeading(Duration)}.
 * </ul>
 *
 * <p>Leadership alone does not fence: a leader paused past its Lease may still act after its
 * successor took over. Writes with the fence cannot land so: the sidecar refuses them ({@link
 * PreconditionFailedException}, {@code REASON_NOT_LEADER} or {@code REASON_FENCED}), and the API
 * server decides the check and the write as one.
 *
 * <p>The stream lasts until closed: neither the client's default timeout nor the deadline or
 * cancellation of the {@link Context} current when it was opened ends it.
 */
public final class Leadership implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger(Leadership.class.getName());

  private final SafewriteClient client;
  private final LeadConfig config;
  private final ExecutorService dispatcher;
  private final CountDownLatch answered = new CountDownLatch(1);

  private final Object lock = new Object();
  // Guarded by lock.
  private ClientCall<LeadRequest, LeadResponse> call;
  private LeadEvent last;
  private LeaderTerm term;
  private boolean closing;
  private boolean ended;
  private SafewriteException failure;
  private boolean dispatcherDone;
  // Confined to the dispatcher (or, once it is done, read under lock).
  private final List<BiConsumer<LeadEvent, LeaderTerm>> listeners = new ArrayList<>();
  private LeadEvent dispatched;
  private LeaderTerm dispatchedTerm;

  private Leadership(SafewriteClient client, LeadConfig config) {
    this.client = client;
    this.config = config;
    String name = "safewrite-lead-" + config.namespace() + "/" + config.name();
    this.dispatcher =
        Executors.newSingleThreadExecutor(
            task -> {
              Thread thread = new Thread(task, name);
              thread.setDaemon(true);
              return thread;
            });
  }

  /**
   * Opens the stream and waits until the sidecar accepts the campaign (its answer's headers) or
   * refuses it, at most {@code acceptTimeout} when given.
   */
  static Leadership open(
      SafewriteClient client,
      LeadConfig config,
      java.util.function.Supplier<ClientCall<LeadRequest, LeadResponse>> newCall,
      Duration acceptTimeout) {
    Leadership leadership = new Leadership(client, config);
    // A context of its own: the campaign outlives the caller's deadline and cancellation.
    Context campaign = Context.current().fork();
    Context previous = campaign.attach();
    try {
      ClientCall<LeadRequest, LeadResponse> call = newCall.get();
      synchronized (leadership.lock) {
        leadership.call = call;
      }
      call.start(leadership.new Listener(), new Metadata());
      call.sendMessage(config.toProto());
      call.halfClose();
      call.request(1);
    } finally {
      campaign.detach(previous);
    }
    leadership.awaitAnswer(acceptTimeout);
    return leadership;
  }

  private void awaitAnswer(Duration timeout) {
    boolean answeredInTime;
    try {
      if (timeout == null) {
        answered.await();
        answeredInTime = true;
      } else {
        answeredInTime = answered.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
      }
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      cancel("the calling thread was interrupted", interrupted);
      throw Errors.decode(
          Status.CANCELLED
              .withDescription("the calling thread was interrupted")
              .withCause(interrupted)
              .asRuntimeException(),
          true);
    }
    if (!answeredInTime) {
      cancel("the sidecar did not answer the campaign in time", null);
      throw Errors.decode(
          Status.DEADLINE_EXCEEDED
              .withDescription("the sidecar did not accept the campaign within " + timeout)
              .asRuntimeException(),
          true);
    }
    synchronized (lock) {
      if (failure != null) {
        throw failure;
      }
    }
  }

  /** The Lease this campaign is for, and its timings. */
  public LeadConfig config() {
    return config;
  }

  /**
   * The fence of the current leadership: present while this client has heard {@link
   * LeadEvent.Leading} and nothing since.
   */
  public Optional<Fence> fence() {
    return term().map(LeaderTerm::fence);
  }

  /** The current leadership, while the caller leads. */
  public Optional<LeaderTerm> term() {
    synchronized (lock) {
      return Optional.ofNullable(term);
    }
  }

  /** Whether the caller leads, as last heard. */
  public boolean isLeading() {
    return term().isPresent();
  }

  /** The last event received (or {@link NotLeadingReason#ENDED}); empty before the first. */
  public Optional<LeadEvent> lastEvent() {
    synchronized (lock) {
      return Optional.ofNullable(last);
    }
  }

  /**
   * Why the stream ended, when it failed: e.g. {@link UnavailableException} when the sidecar went
   * away. Empty while it runs, and after {@link #close()} or the sidecar's release.
   */
  public Optional<SafewriteException> failure() {
    synchronized (lock) {
      return Optional.ofNullable(failure);
    }
  }

  /** Whether the stream has ended (closed, released by the sidecar, or failed). */
  public boolean isEnded() {
    synchronized (lock) {
      return ended;
    }
  }

  /**
   * Waits until the caller leads, at most {@code timeout}.
   *
   * @return the current leadership; empty when the timeout passed first, or the stream ended
   *     without a failure
   * @throws SafewriteException when the stream failed (see {@link #failure()})
   */
  public Optional<LeaderTerm> awaitLeading(Duration timeout) throws InterruptedException {
    Objects.requireNonNull(timeout, "timeout");
    long deadline = System.nanoTime() + timeout.toNanos();
    synchronized (lock) {
      while (term == null && !ended) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          return Optional.empty();
        }
        TimeUnit.NANOSECONDS.timedWait(lock, left);
      }
      if (term == null && failure != null) {
        throw failure;
      }
      return Optional.ofNullable(term);
    }
  }

  /**
   * Runs {@code work} on this thread once per leadership, until the stream ends or the work returns
   * while it still leads: on every {@link LeadEvent.Leading} it calls the work with {@link
   * SafewriteClient#fenced(Fence) client.fenced(fence)}, a view whose writes and deletes all carry
   * the term's fence, and the {@link LeaderTerm}. The work stops when the term ends ({@link
   * LeaderTerm#isLeading()} turns false, {@link LeaderTerm#awaitEnd()} returns); nothing is
   * interrupted, so every write in flight gets a definite answer, and what the work writes after
   * the term ended is refused by the sidecar, never applied. Then it waits for the next term (a
   * higher epoch) and runs the work again.
   *
   * <p>A {@link PreconditionFailedException} with reason {@code REASON_NOT_LEADER} or {@code
   * REASON_FENCED} thrown out of the work ends its term too: the sidecar knew of the loss before
   * this client did. Any other exception is rethrown as it is; the campaign goes on until you close
   * this leadership.
   *
   * <pre>{@code
   * try (Leadership leadership = client.lead(LeadConfig.builder("default", "counter").build())) {
   *   leadership.whileLeading((fenced, term) -> {
   *     while (term.isLeading()) {
   *       fenced.update(ref, INCREMENT);
   *     }
   *   });
   * }
   * }</pre>
   *
   * @return when the work returned while leading, or the stream ended without a failure ({@link
   *     #close()} from another thread, the sidecar's release)
   * @throws SafewriteException when the stream failed
   * @throws Exception what the work threw
   */
  public void whileLeading(LeaderWork work) throws Exception {
    Objects.requireNonNull(work, "work");
    long lastEpoch = 0;
    boolean any = false;
    while (true) {
      LeaderTerm current;
      synchronized (lock) {
        while (!ended
            && (term == null || (any && Long.compareUnsigned(term.epoch(), lastEpoch) <= 0))) {
          lock.wait();
        }
        if (ended) {
          if (failure != null) {
            throw failure;
          }
          return;
        }
        current = term;
      }
      any = true;
      lastEpoch = current.epoch();
      try {
        work.run(client.fenced(current.fence()), current);
      } catch (PreconditionFailedException refused) {
        Reason reason = refused.writeFailureReason();
        if (reason != Reason.REASON_NOT_LEADER && reason != Reason.REASON_FENCED) {
          throw refused;
        }
        continue; // deposed: wait for the next term
      }
      if (current.isLeading()) {
        return;
      }
    }
  }

  /**
   * Calls {@code listener} on every {@link LeadEvent.Leading}, with the new term; at once (on this
   * leadership's thread) when the last event was one. The term may have ended by the time the
   * listener runs: {@link LeaderTerm#isLeading()} says.
   */
  public Leadership onLeading(Consumer<? super LeaderTerm> listener) {
    Objects.requireNonNull(listener, "listener");
    return listen(
        (event, term) -> {
          if (term != null) {
            listener.accept(term);
          }
        });
  }

  /**
   * Calls {@code listener} on every {@link LeadEvent.NotLeading}, the last one ({@link
   * NotLeadingReason#ENDED}) included; at once with the last event when it was one.
   */
  public Leadership onNotLeading(Consumer<? super LeadEvent.NotLeading> listener) {
    Objects.requireNonNull(listener, "listener");
    return listen(
        (event, term) -> {
          if (event instanceof LeadEvent.NotLeading notLeading) {
            listener.accept(notLeading);
          }
        });
  }

  /**
   * Calls {@code listener} on every event, in order, on one thread of this leadership; first, at
   * once, with the last event when there was one. Listeners should not block: later events wait for
   * them (the state this class answers does not). An exception a listener throws is logged and does
   * not stop the others.
   */
  public Leadership onEvent(Consumer<? super LeadEvent> listener) {
    Objects.requireNonNull(listener, "listener");
    return listen((event, term) -> listener.accept(event));
  }

  private Leadership listen(BiConsumer<LeadEvent, LeaderTerm> listener) {
    Runnable add =
        () -> {
          listeners.add(listener);
          if (dispatched != null) {
            call(listener, dispatched, dispatchedTerm);
          }
        };
    boolean inline;
    synchronized (lock) {
      inline = dispatcherDone;
      if (!inline) {
        dispatcher.execute(add);
      }
    }
    if (inline) {
      add.run(); // every event has been delivered: only the replay of the last is left
    }
    return this;
  }

  /**
   * Ends the campaign: the stream is closed, and the sidecar releases the Lease at once when the
   * caller holds it. The current term ends, and listeners get {@link NotLeadingReason#ENDED}.
   * Idempotent.
   */
  @Override
  public void close() {
    cancel("closed", null);
  }

  private void cancel(String why, Throwable cause) {
    ClientCall<LeadRequest, LeadResponse> toCancel;
    synchronized (lock) {
      if (ended || closing) {
        return;
      }
      closing = true;
      toCancel = call;
    }
    toCancel.cancel(why, cause);
  }

  @Override
  public String toString() {
    return "Leadership(" + config.namespace() + "/" + config.name() + ", " + lastEvent() + ")";
  }

  private static void call(
      BiConsumer<LeadEvent, LeaderTerm> listener, LeadEvent event, LeaderTerm term) {
    try {
      listener.accept(event, term);
    } catch (RuntimeException | Error failed) {
      LOG.log(System.Logger.Level.WARNING, "a Leadership listener failed on " + event, failed);
    }
  }

  /** Records an event and hands it to the dispatcher; on gRPC's thread, quick. */
  private void received(LeadEvent event, boolean last) {
    synchronized (lock) {
      LeaderTerm started = null;
      if (event instanceof LeadEvent.Leading leading) {
        if (term != null) {
          term.end();
        }
        started = new LeaderTerm(leading.fence());
        term = started;
      } else if (term != null) {
        term.end();
        term = null;
      }
      this.last = event;
      lock.notifyAll();
      LeaderTerm eventTerm = started;
      dispatcher.execute(
          () -> {
            dispatched = event;
            dispatchedTerm = eventTerm;
            for (BiConsumer<LeadEvent, LeaderTerm> listener : listeners) {
              call(listener, event, eventTerm);
            }
            if (last) {
              synchronized (lock) {
                dispatcherDone = true;
              }
              dispatcher.shutdown();
            }
          });
    }
  }

  private LeadEvent event(LeadResponse response) {
    Fence fence = new Fence(config.namespace(), config.name(), response.getEpoch());
    if (response.getState() == dev.safewrite.v1.LeadState.LEAD_STATE_LEADING) {
      return new LeadEvent.Leading(fence, response.getHolder(), response.getIdentity());
    }
    // NOT_LEADING, or a state newer than this client: not leading either way.
    return new LeadEvent.NotLeading(
        NotLeadingReason.fromProto(response.getReason()),
        response.getHolder(),
        response.getIdentity());
  }

  private final class Listener extends ClientCall.Listener<LeadResponse> {
    @Override
    public void onHeaders(Metadata headers) {
      answered.countDown(); // the sidecar accepted the campaign
    }

    @Override
    public void onMessage(LeadResponse response) {
      answered.countDown();
      received(event(response), false);
      ClientCall<LeadRequest, LeadResponse> current;
      synchronized (lock) {
        current = call;
      }
      current.request(1);
    }

    @Override
    public void onClose(Status status, Metadata trailers) {
      String identity;
      synchronized (lock) {
        ended = true;
        if (!status.isOk() && !closing) {
          failure = Errors.decode(status.asRuntimeException(trailers), true);
        }
        identity = last == null ? "" : last.identity();
      }
      received(new LeadEvent.NotLeading(NotLeadingReason.ENDED, "", identity), true);
      answered.countDown();
    }
  }
}
