package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.Any;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.safewrite.v1.AttemptRecord;
import dev.safewrite.v1.UpdateWithRetryRequest;
import dev.safewrite.v1.WriteFailure;
import io.fabric8.kubernetes.api.model.ConfigMap;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** What needs no sidecar: decoding statuses, the Reason mapping, addresses, builders. */
class OfflineTest {

  private static StatusRuntimeException status(
      Status.Code code, String reason, Reason failureReason, Any... more) {
    com.google.rpc.Status.Builder status =
        com.google.rpc.Status.newBuilder()
            .setCode(code.value())
            .setMessage("what happened")
            .addDetails(
                Any.pack(
                    ErrorInfo.newBuilder()
                        .setDomain("safewrite.dev")
                        .setReason(reason)
                        .putMetadata("attempts", "3")
                        .putMetadata("http_status", "409")
                        .build()))
            .addDetails(
                Any.pack(
                    WriteFailure.newBuilder()
                        .setReason(Reasons.toProto(failureReason))
                        .setTraceId("abc")
                        .build()));
    for (Any detail : more) {
      status.addDetails(detail);
    }
    return StatusProto.toStatusRuntimeException(status.build());
  }

  @Test
  void theClientsReasonAndRetryAreTheProtosValueForValue() {
    List<String> proto = new ArrayList<>();
    for (dev.safewrite.v1.Reason reason : dev.safewrite.v1.Reason.values()) {
      proto.add(reason.name());
      if (reason != dev.safewrite.v1.Reason.UNRECOGNIZED) {
        assertEquals(reason, Reasons.toProto(Reasons.of(reason)));
      }
    }
    assertEquals(proto, Arrays.stream(Reason.values()).map(Enum::name).toList());
    assertEquals(Reason.UNRECOGNIZED, Reasons.of(dev.safewrite.v1.Reason.UNRECOGNIZED));
    List<String> advice = new ArrayList<>();
    for (dev.safewrite.v1.Retry retry : dev.safewrite.v1.Retry.values()) {
      if (retry != dev.safewrite.v1.Retry.RETRY_UNSPECIFIED
          && retry != dev.safewrite.v1.Retry.UNRECOGNIZED) {
        advice.add(retry.name());
      }
    }
    assertEquals(advice, Arrays.stream(Retry.values()).map(Enum::name).toList());
  }

  @Test
  void everyReasonOfTheProtoIsClassified() {
    for (Reason reason : Reason.values()) {
      if (reason == Reason.UNRECOGNIZED) {
        continue;
      }
      Retry retry = Reasons.retry(reason);
      assertNotNull(retry, reason + " has no retry option in the proto");
      for (Status.Code code : Status.Code.values()) {
        Retry advice = Reasons.advice(reason, code);
        assertTrue(
            advice == Retry.RETRY_NEVER
                || advice == Retry.RETRY_LATER
                || advice == Retry.RETRY_WITH_IDEMPOTENCY_KEY,
            reason + " " + code + ": " + advice);
      }
      String spelled = Reasons.errorInfoReason(reason);
      assertEquals("REASON_" + spelled, reason.name());
      if (reason != Reason.REASON_UNSPECIFIED) {
        assertEquals(reason, Reasons.fromErrorInfoReason(spelled).orElseThrow(), reason.name());
        // Decoding keeps it, for any code the sidecar might pair it with.
        SafewriteException e =
            SafewriteException.from(status(Status.Code.UNAVAILABLE, spelled, reason));
        assertEquals(reason, e.writeFailureReason());
      }
    }
    // A value newer than this client goes by the code, as the proto's retry_by_code says.
    assertEquals(Retry.RETRY_BY_CODE, Reasons.retry(Reason.UNRECOGNIZED));
    assertEquals(Retry.RETRY_LATER, Reasons.advice(Reason.UNRECOGNIZED, Status.Code.UNAVAILABLE));
    assertEquals(
        Retry.RETRY_WITH_IDEMPOTENCY_KEY,
        Reasons.advice(Reason.UNRECOGNIZED, Status.Code.DEADLINE_EXCEEDED));
    assertEquals(Retry.RETRY_NEVER, Reasons.advice(Reason.UNRECOGNIZED, Status.Code.NOT_FOUND));
    assertTrue(Reasons.fromErrorInfoReason("Conflict").isEmpty());
  }

  @Test
  void everyCodeMapsToOneExceptionClass() {
    Map<Status.Code, Class<? extends SafewriteException>> expected =
        new EnumMap<>(Status.Code.class);
    expected.put(Status.Code.ABORTED, ConflictException.class);
    expected.put(Status.Code.INVALID_ARGUMENT, InvalidException.class);
    expected.put(Status.Code.OUT_OF_RANGE, InvalidException.class);
    expected.put(Status.Code.FAILED_PRECONDITION, PreconditionFailedException.class);
    expected.put(Status.Code.UNAVAILABLE, UnavailableException.class);
    expected.put(Status.Code.RESOURCE_EXHAUSTED, ResourceExhaustedException.class);
    expected.put(Status.Code.PERMISSION_DENIED, PermissionDeniedException.class);
    expected.put(Status.Code.UNAUTHENTICATED, UnauthenticatedException.class);
    expected.put(Status.Code.NOT_FOUND, NotFoundException.class);
    expected.put(Status.Code.DEADLINE_EXCEEDED, DeadlineExceededException.class);
    expected.put(Status.Code.CANCELLED, CancelledException.class);
    expected.put(Status.Code.UNIMPLEMENTED, UnimplementedException.class);
    expected.put(Status.Code.UNKNOWN, InternalException.class);
    expected.put(Status.Code.INTERNAL, InternalException.class);
    expected.put(Status.Code.DATA_LOSS, InternalException.class);
    expected.put(Status.Code.ALREADY_EXISTS, InternalException.class);
    expected.put(Status.Code.OK, InternalException.class);
    for (Status.Code code : Status.Code.values()) {
      SafewriteException e =
          SafewriteException.from(Status.fromCode(code).withDescription("x").asRuntimeException());
      assertInstanceOf(expected.get(code), e, code.name());
      assertEquals(code, e.code());
      assertEquals(ErrorKind.valueOf(kindName(e)), e.kind());
    }
    SafewriteException unknown =
        SafewriteException.from(
            status(
                Status.Code.UNKNOWN, "WRITE_OUTCOME_UNKNOWN", Reason.REASON_WRITE_OUTCOME_UNKNOWN));
    assertInstanceOf(OutcomeUnknownException.class, unknown);
    assertEquals(ErrorKind.OUTCOME_UNKNOWN, unknown.kind());
    assertFalse(unknown.isRetryable(), "a lost answer without a key may not be sent again");
    StatusRuntimeException lost =
        status(Status.Code.UNKNOWN, "WRITE_OUTCOME_UNKNOWN", Reason.REASON_WRITE_OUTCOME_UNKNOWN);
    assertTrue(Errors.decode(lost, true).isRetryable(), "with a key it may");
  }

  /** ConflictException -> CONFLICT, PreconditionFailedException -> PRECONDITION_FAILED. */
  private static String kindName(SafewriteException e) {
    String simple = e.getClass().getSimpleName().replace("Exception", "");
    return simple.replaceAll("([a-z])([A-Z])", "$1_$2").toUpperCase(java.util.Locale.ROOT);
  }

  @Test
  void everyDetailIsDecoded() {
    Any badRequest =
        Any.pack(
            BadRequest.newBuilder()
                .addFieldViolations(
                    BadRequest.FieldViolation.newBuilder()
                        .setField("target.name")
                        .setDescription("bad"))
                .build());
    Any retry =
        Any.pack(
            RetryInfo.newBuilder()
                .setRetryDelay(
                    com.google.protobuf.Duration.newBuilder().setSeconds(1).setNanos(500_000_000))
                .build());
    Any failure =
        Any.pack(
            WriteFailure.newBuilder()
                .setReason(dev.safewrite.v1.Reason.REASON_PRECONDITION_FAILED)
                .setCurrentObjectJson("{\"data\": {\"n\": \"1\"}}")
                .setTraceId("0af7651916cd43dd8448eb211c80319c")
                .addAttemptRecords(
                    AttemptRecord.newBuilder()
                        .setNumber(1)
                        .setResourceVersionRead("7")
                        .setHttpStatus(409)
                        .setReason("Conflict")
                        .setBackoff(com.google.protobuf.Duration.newBuilder().setNanos(10_000_000))
                        .setBatchSize(2))
                .build());
    com.google.rpc.Status status =
        com.google.rpc.Status.newBuilder()
            .setCode(Status.Code.FAILED_PRECONDITION.value())
            .setMessage("the precondition is false")
            .addDetails(
                Any.pack(
                    ErrorInfo.newBuilder()
                        .setDomain("safewrite.dev")
                        .setReason("PRECONDITION_FAILED")
                        .putMetadata("attempts", "4")
                        .build()))
            .addDetails(badRequest)
            .addDetails(retry)
            .addDetails(failure)
            .build();
    SafewriteException e = SafewriteException.from(StatusProto.toStatusRuntimeException(status));
    assertInstanceOf(PreconditionFailedException.class, e);
    assertEquals("PRECONDITION_FAILED", e.reason());
    assertEquals("safewrite.dev", e.domain());
    assertEquals("the precondition is false", e.description());
    assertEquals(
        "safewrite: FAILED_PRECONDITION (PRECONDITION_FAILED): the precondition is false",
        e.getMessage());
    assertEquals(Reason.REASON_PRECONDITION_FAILED, e.writeFailureReason());
    assertEquals(List.of(new FieldViolation("target.name", "bad")), e.fieldViolations());
    assertEquals(Duration.ofMillis(1500), e.retryDelay().orElseThrow());
    assertEquals(
        List.of(new dev.safewrite.AttemptRecord(1, "7", 409, "Conflict", Duration.ofMillis(10), 2)),
        e.attemptRecords());
    assertEquals(4, e.attempts(), "the metadata's count wins when larger than the records");
    assertEquals("1", e.currentObject().orElseThrow().withObjectProperty("data").get("n").asText());
    assertEquals("0af7651916cd43dd8448eb211c80319c", e.traceId());
    assertFalse(e.isRetryable());
  }

  @Test
  void reasonIsDerivedFromErrorInfoWhenWriteFailureHasNone() {
    StatusRuntimeException api = status(Status.Code.ABORTED, "Conflict", Reason.REASON_UNSPECIFIED);
    SafewriteException conflict = SafewriteException.from(api);
    assertEquals(Reason.REASON_API_SERVER, conflict.writeFailureReason());
    assertTrue(conflict.isRetryable(), "conflicts outlasting the policy may be requeued");
    SafewriteException breaker =
        SafewriteException.from(
            status(Status.Code.UNAVAILABLE, "CIRCUIT_OPEN", Reason.REASON_UNSPECIFIED));
    assertEquals(Reason.REASON_CIRCUIT_OPEN, breaker.writeFailureReason());
    assertTrue(breaker.isRetryable());
    SafewriteException tooLarge =
        SafewriteException.from(
            status(
                Status.Code.UNAVAILABLE, "RESOURCE_VERSION_TOO_LARGE", Reason.REASON_UNSPECIFIED));
    assertEquals(Reason.REASON_RESOURCE_VERSION_TOO_LARGE, tooLarge.writeFailureReason());
    assertTrue(tooLarge instanceof UnavailableException);
    assertTrue(tooLarge.isRetryable(), "a minimum the API server has not reached: later");
    SafewriteException invalid =
        SafewriteException.from(
            status(Status.Code.INVALID_ARGUMENT, "Invalid", Reason.REASON_API_SERVER));
    assertFalse(invalid.isRetryable());
    SafewriteException bare = SafewriteException.from(Status.UNAVAILABLE.asRuntimeException());
    assertEquals(Reason.REASON_UNSPECIFIED, bare.writeFailureReason());
    assertTrue(bare.isRetryable());
    assertTrue(bare.retryDelay().isEmpty());
    // The caller's own deadline, with no answer: a write may have been in flight.
    StatusRuntimeException deadline = Status.DEADLINE_EXCEEDED.asRuntimeException();
    assertEquals(Retry.RETRY_WITH_IDEMPOTENCY_KEY, SafewriteException.from(deadline).retryAdvice());
    assertFalse(Errors.decode(deadline, false).isRetryable());
    assertTrue(Errors.decode(deadline, true).isRetryable());
  }

  @Test
  void addressComesFromTheArgumentThenTheEnvironment() {
    Map<String, String> none = Map.of();
    // Neither: the sidecar's default, as in the Python and Go clients.
    assertEquals("dns:///127.0.0.1:50051", Channels.target(null, none));
    assertEquals("dns:///127.0.0.1:50051", Channels.target(" ", Map.of("SAFEWRITE_ADDRESS", "  ")));
    Map<String, String> env = Map.of("SAFEWRITE_ADDRESS", "127.0.0.1:50051");
    assertEquals("dns:///127.0.0.1:50051", Channels.target("", env));
    assertEquals("dns:///localhost:7000", Channels.target("localhost:7000", env));
    assertEquals("dns:///127.0.0.1:9", Channels.target("http://127.0.0.1:9/", none));
    assertEquals("unix:///run/safewrite.sock", Channels.target("unix:///run/safewrite.sock", none));
    assertEquals("unix:///run/safewrite.sock", Channels.target("/run/safewrite.sock", none));
    assertEquals(
        "unix:///x.sock", Channels.target(null, Map.of("SAFEWRITE_ADDRESS", "unix:///x.sock")));
    assertThrows(IllegalArgumentException.class, () -> Channels.target("https://x:1", none));
  }

  @Test
  void unreachableSidecarFailsAtOnceOrWaitsForTheDeadline() {
    ObjectRef ref = ObjectRef.of("v1", "ConfigMap", "default", "x");
    try (SafewriteClient client = SafewriteClient.connect("127.0.0.1:1")) {
      UnavailableException e =
          assertThrows(UnavailableException.class, () -> client.update(ref, Mutation.cel("{}")));
      assertTrue(e.isRetryable());
      assertEquals("", e.reason(), "no ErrorInfo: the sidecar was not reached");
      assertEquals(Reason.REASON_UNSPECIFIED, e.writeFailureReason());
      assertTrue(e.attemptRecords().isEmpty());
    }
    try (SafewriteClient waiting =
        SafewriteClient.builder()
            .address("127.0.0.1:1")
            .waitForReady(true)
            .defaultTimeout(Duration.ofMillis(300))
            .build()) {
      long started = System.nanoTime();
      assertThrows(DeadlineExceededException.class, () -> waiting.update(ref, Mutation.cel("{}")));
      assertTrue(System.nanoTime() - started >= 250_000_000L, "it waited for the deadline");
    }
  }

  @Test
  void writeConfigBuilderSetsWhatTheOptionsSet() {
    RetryPolicy policy = RetryPolicy.builder().maxAttempts(3).build();
    WriteConfig built =
        WriteConfig.builder()
            .uid("u")
            .resourceVersion("5")
            .preconditionCel("true")
            .retryPolicy(policy)
            .fieldManager("m")
            .dryRun(true)
            .createIfMissing("{}")
            .idempotencyKey("k")
            .writeAlone(true)
            .fence("ns", "leader", 3)
            .timeout(Duration.ofSeconds(3))
            .build();
    WriteConfig options = built.toBuilder().build();
    assertEquals(options.toString(), built.toString());
    assertEquals(built.preconditions, options.preconditions);
    assertEquals(built.options, options.options);
    assertEquals(built.retryPolicy, options.retryPolicy);
    assertEquals(built.timeout, options.timeout);

    WriteConfig other = built.toBuilder().idempotencyKey("k2").build();
    assertEquals("k2", other.options.getIdempotencyKey());
    assertEquals("k", built.options.getIdempotencyKey(), "a built config does not change");
    assertEquals(built.preconditions, other.preconditions);
    assertEquals(Duration.ofSeconds(3), other.timeout);
    assertEquals(
        "WriteConfig(timeout: PT1S)",
        WriteConfig.builder().timeout(Duration.ofSeconds(1)).build().toString());
    assertEquals("WriteConfig()", WriteConfig.builder().build().toString());
    assertThrows(
        IllegalArgumentException.class, () -> WriteConfig.builder().timeout(Duration.ofMillis(-1)));
    assertThrows(NullPointerException.class, () -> WriteConfig.builder().idempotencyKey(null));
  }

  @Test
  void buildersMakeTheMessagesTheSidecarExpects() {
    assertEquals(
        "[{\"op\":\"test\",\"path\":\"/data/n\",\"value\":\"1\"},{\"op\":\"remove\",\"path\":\"/a\"},"
            + "{\"op\":\"move\",\"path\":\"/b\",\"from\":\"/c\"}]",
        Mutation.jsonPatch(
                JsonPatchOp.test("/data/n", "1"),
                JsonPatchOp.remove("/a"),
                JsonPatchOp.move("/c", "/b"))
            .toProto()
            .getJsonPatch()
            .getPatchJson());
    assertEquals("x", Mutation.cel("x").toProto().getCel().getExpression());
    assertTrue(Mutation.apply("{}", true).toProto().getApply().getForce());
    assertEquals(
        "{\"a\":null}",
        Mutation.mergePatch(Json.object("{\"a\": null}")).toProto().getMergePatch().getPatchJson());
    Map<String, Object> removal = new java.util.HashMap<>();
    removal.put("a", null);
    assertEquals(
        "{\"a\":null}",
        Mutation.mergePatch(removal).toProto().getMergePatch().getPatchJson(),
        "a null in a Map is written: it removes the field");

    WriteConfig config =
        WriteConfig.builder()
            .uid("u")
            .resourceVersion("5")
            .preconditionCel("true")
            .retryPolicy(
                RetryPolicy.builder().maxAttempts(3).initialBackoff(Duration.ofMillis(20)).build())
            .fieldManager("m")
            .dryRun(true)
            .createIfMissing("{}")
            .idempotencyKey("k1")
            .idempotencyKey("k2")
            .writeAlone(true)
            .fence("ns", "leader", 3)
            .timeout(Duration.ofSeconds(3))
            .build();
    assertEquals("u", config.preconditions.getUid());
    assertEquals("5", config.preconditions.getResourceVersion());
    assertEquals("true", config.preconditions.getCel());
    assertEquals(3, config.retryPolicy.getMaxAttempts());
    assertEquals(20_000_000, config.retryPolicy.getInitialBackoff().getNanos());
    assertEquals("m", config.options.getFieldManager());
    assertTrue(config.options.getDryRun());
    assertEquals("{}", config.options.getCreateIfMissingJson());
    assertEquals(
        "k2", config.options.getIdempotencyKey(), "a later option replaces an earlier one");
    assertTrue(config.options.getWriteAlone());
    assertEquals(
        dev.safewrite.v1.Fence.newBuilder()
            .setLeaseNamespace("ns")
            .setLeaseName("leader")
            .setEpoch(3)
            .build(),
        config.options.getFence());
    assertEquals(Duration.ofSeconds(3), config.timeout);
    assertTrue(RetryPolicy.requeue().toProto().getRequeue());
    assertFalse(WriteConfig.DEFAULTS.hasOptions());
    assertThrows(
        IllegalArgumentException.class, () -> WriteConfig.builder().timeout(Duration.ZERO).build());
    assertThrows(IllegalArgumentException.class, () -> RetryPolicy.builder().maxAttempts(-1));
  }

  @Test
  void resultAndProposalConvert() {
    dev.safewrite.v1.WriteResult proto =
        dev.safewrite.v1.WriteResult.newBuilder()
            .setOutcome(dev.safewrite.v1.Outcome.OUTCOME_CREATED)
            .setObjectJson("{\"n\": 9007199254740993}")
            .setResourceVersion("12")
            .setAttempts(1)
            .setAlreadyApplied(true)
            .build();
    Result result = Result.fromProto(proto);
    assertEquals(Outcome.CREATED, result.outcome());
    assertEquals(
        "9007199254740993",
        result.object().get("n").bigIntegerValue().toString(),
        "int64 survives");
    assertTrue(result.alreadyApplied());
    assertThrows(
        InternalException.class,
        () ->
            Result.fromProto(
                proto.toBuilder()
                    .setOutcome(dev.safewrite.v1.Outcome.OUTCOME_UNSPECIFIED)
                    .build()));
    Fresh<ObjectNode> fresh = fresh(4, "{}", ObjectNode.class);
    assertEquals(4, Proposal.abort(null).toProto(fresh).getAttempt());
    assertEquals(
        7,
        Proposal.of(dev.safewrite.v1.TransactProposal.newBuilder().setAttempt(7).build())
            .toProto(fresh)
            .getAttempt());
    assertNotNull(UpdateWithRetryRequest.getDefaultInstance());
  }

  private static <T> Fresh<T> fresh(int attempt, String json, Class<T> type) {
    return new Fresh<>(
        dev.safewrite.v1.FreshObject.newBuilder().setAttempt(attempt).setObjectJson(json).build(),
        type);
  }

  @Test
  void aTypedObjectWritesItsChangesAndKeepsWhatItsClassLacks() {
    Fresh<ConfigMap> fresh =
        fresh(
            1,
            "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\","
                + " \"metadata\": {\"name\": \"c\", \"resourceVersion\": \"7\"},"
                + " \"data\": {\"n\": \"1\", \"gone\": \"x\"},"
                + " \"future\": {\"big\": 9007199254740993, \"f\": 1.50}}",
            ConfigMap.class);
    ConfigMap map = fresh.object();
    assertSame(map, fresh.object(), "one object per attempt");
    map.getData().put("n", "2");
    map.getData().remove("gone");
    map.getMetadata().setLabels(Map.of("a", "b"));
    ObjectNode written = Json.object(Proposal.object(map).toProto(fresh).getObjectJson());
    assertEquals("2", written.get("data").get("n").asText());
    assertFalse(written.get("data").has("gone"), "a removed entry is removed");
    assertEquals("b", written.get("metadata").get("labels").get("a").asText());
    assertEquals("7", written.get("metadata").get("resourceVersion").asText());
    assertEquals(
        "{\"big\":9007199254740993,\"f\":1.50}",
        Json.text(written.get("future")),
        "a field the class lacks is kept as it was, numbers and all");

    Fresh<ConfigMap> untouched = fresh(1, "{\"kind\": \"ConfigMap\", \"x\": 1}", ConfigMap.class);
    untouched.object();
    assertEquals(
        "{\"kind\":\"ConfigMap\",\"x\":1}",
        Proposal.object(untouched.object()).toProto(untouched).getObjectJson(),
        "an unchanged object is written as read");

    ConfigMap other = new ConfigMap();
    other.setData(Map.of("only", "this"));
    assertEquals(
        "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"data\":{\"only\":\"this\"}}",
        Proposal.object(other).toProto(fresh).getObjectJson(),
        "another object is written whole, nulls left out");
    assertThrows(
        IllegalArgumentException.class,
        () -> fresh(1, "{\"data\": 5}", ConfigMap.class).object(),
        "an object the class cannot read");
  }

  @Test
  void updateAndPatchStatusSendTheSameRequestEachToItsMethod() {
    // The two requests are one message under two names: same fields, numbers and types.
    List<String> update =
        UpdateWithRetryRequest.getDescriptor().getFields().stream()
            .map(f -> f.getNumber() + " " + f.getName() + " " + f.toProto().getTypeName())
            .toList();
    List<String> status =
        dev.safewrite.v1.PatchStatusRequest.getDescriptor().getFields().stream()
            .map(f -> f.getNumber() + " " + f.getName() + " " + f.toProto().getTypeName())
            .toList();
    assertEquals(update, status);

    RecordingChannel channel = new RecordingChannel();
    SafewriteClient client = SafewriteClient.forChannel(channel);
    ObjectRef ref = ObjectRef.of("v1", "ConfigMap", "ns", "name");
    Mutation mutation = Mutation.mergePatch("{\"status\": {\"n\": 1}}");
    WriteConfig config =
        WriteConfig.builder().uid("u").fieldManager("m").retryPolicy(RetryPolicy.requeue()).build();
    assertThrows(UnavailableException.class, () -> client.update(ref, mutation, config));
    assertThrows(UnavailableException.class, () -> client.patchStatus(ref, mutation, config));
    assertEquals(2, channel.sent.size());
    assertInstanceOf(UpdateWithRetryRequest.class, channel.sent.get(0));
    assertInstanceOf(dev.safewrite.v1.PatchStatusRequest.class, channel.sent.get(1));
    assertEquals(
        ((UpdateWithRetryRequest) channel.sent.get(0)).toByteString(),
        ((dev.safewrite.v1.PatchStatusRequest) channel.sent.get(1)).toByteString());
  }
}
