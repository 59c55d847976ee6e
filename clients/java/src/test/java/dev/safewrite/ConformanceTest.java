package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import com.google.protobuf.Any;
import com.google.protobuf.Message;
import com.google.protobuf.util.JsonFormat;
import com.google.rpc.ErrorInfo;
import dev.safewrite.v1.CapabilitiesRequest;
import dev.safewrite.v1.CapabilitiesResponse;
import dev.safewrite.v1.DeleteRequest;
import dev.safewrite.v1.GetRequest;
import dev.safewrite.v1.PatchStatusRequest;
import dev.safewrite.v1.TransactBegin;
import dev.safewrite.v1.TransactProposal;
import dev.safewrite.v1.UpdateWithRetryRequest;
import dev.safewrite.v1.WriteFailure;
import dev.safewrite.v1.WriterServiceGrpc;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The shared conformance cases of ../conformance/cases.json, run through the client's own calls and
 * error decoding (see ../conformance/README.md): its cases, one test each against the sidecar; its
 * advice table, one test per row, each row's failure answering a call as the sidecar sends it; and
 * its skew cases, one test each against the sidecar: a feature the sidecar lacks (as its own
 * Capabilities answer says) is refused by the client before sending, one it has is sent.
 */
class ConformanceTest {
  private static final Path CASES = Path.of("../conformance/cases.json");

  /** One line per case, "PASS name" or "FAIL name: why", for test.sh to print. */
  private static final Path MATRIX = Path.of("target/conformance-matrix.txt");

  private static final Map<String, String> RESULTS = new ConcurrentSkipListMap<>();

  /**
   * Cases the sidecar fails today where its behaviour contradicts the contract
   * (proto/safewrite/v1/writer.proto), not the case: expected failures, strictly, so an entry must
   * go once the sidecar is fixed (see ../conformance/README.md).
   */
  private static final Map<String, String> KNOWN_SIDECAR_BUGS = Map.of();

  /** The advice rows whose check failed, for the matrix's line of the advice table. */
  private static final Map<String, String> ADVICE_FAILURES = new ConcurrentSkipListMap<>();

  private static final AtomicInteger ADVICE_ROWS = new AtomicInteger();

  /** Each step's bound: a few seconds, as the cases' README asks. */
  private static SafewriteClient client;

  private static ObjectNode cases() throws Exception {
    return Json.object(Files.readString(CASES));
  }

  @TestFactory
  @Tag("sidecar")
  Stream<DynamicTest> conformance() throws Exception {
    ArrayNode cases = cases().withArrayProperty("cases");
    assertTrue(cases.size() > 0, "no conformance cases");
    List<DynamicTest> tests = new ArrayList<>();
    for (int i = 0; i < cases.size(); i++) {
      ObjectNode testCase = (ObjectNode) cases.get(i);
      String name = testCase.get("name").asText();
      String objectName = "conf-java-" + i + "-" + Sidecar.RUN;
      String row = String.format("%02d %s", i + 1, name);
      String knownBug = KNOWN_SIDECAR_BUGS.get(name);
      tests.add(
          DynamicTest.dynamicTest(
              name,
              () -> {
                try {
                  run(testCase, objectName);
                } catch (AssertionError failure) {
                  String why = String.valueOf(failure.getMessage()).lines().findFirst().orElse("");
                  if (knownBug != null) {
                    RESULTS.put(row, "XFAIL: known sidecar bug: " + knownBug);
                    return;
                  }
                  RESULTS.put(row, "FAIL: " + why);
                  throw failure;
                }
                if (knownBug != null) {
                  RESULTS.put(row, "FAIL: passes now; remove it from KNOWN_SIDECAR_BUGS");
                  fail(name + " passes now: remove it from KNOWN_SIDECAR_BUGS (" + knownBug + ")");
                }
                RESULTS.put(row, "PASS");
              }));
    }
    return tests.stream();
  }

  /**
   * Each skew case: the runner asks the sidecar's Capabilities itself (UNIMPLEMENTED: a sidecar
   * older than 0.2.0, which knows nothing with a since option); when the sidecar lacks the case's
   * feature, the call through the client must be the client's own refusal (FAILED_PRECONDITION,
   * UNKNOWN_FIELD, refused_by=client: nothing sent) naming the feature, the sidecar's version (or
   * "older than 0.2.0") and the since version; when it has it, the call must meet {@code
   * expect_when_present}.
   */
  @TestFactory
  @Tag("sidecar")
  Stream<DynamicTest> skew() throws Exception {
    ArrayNode cases = cases().withObjectProperty("skew").withArrayProperty("cases");
    assertTrue(cases.size() > 0, "no skew cases");
    List<DynamicTest> tests = new ArrayList<>();
    for (int i = 0; i < cases.size(); i++) {
      ObjectNode testCase = (ObjectNode) cases.get(i);
      String name = testCase.get("name").asText();
      String objectName = "skew-java-" + i + "-" + Sidecar.RUN;
      String row = "skew " + name;
      tests.add(
          DynamicTest.dynamicTest(
              row,
              () -> {
                try {
                  RESULTS.put(row, "PASS: " + runSkew(testCase, objectName));
                } catch (AssertionError failure) {
                  String why = String.valueOf(failure.getMessage()).lines().findFirst().orElse("");
                  RESULTS.put(row, "FAIL: " + why);
                  throw failure;
                }
              }));
    }
    return tests.stream();
  }

  /** What the sidecar knows, as it answers Capabilities; null for one older than 0.2.0. */
  private static CapabilitiesResponse sidecarCapabilities() throws Exception {
    ManagedChannel channel = Channels.dial(Channels.target(Sidecar.address(), Map.of()));
    try {
      return WriterServiceGrpc.newBlockingStub(channel)
          .withDeadlineAfter(10, TimeUnit.SECONDS)
          .capabilities(CapabilitiesRequest.getDefaultInstance());
    } catch (StatusRuntimeException e) {
      if (e.getStatus().getCode() == Status.Code.UNIMPLEMENTED) {
        return null;
      }
      throw e;
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  /** Runs a skew case; says what happened (refused, or sent). */
  private static String runSkew(ObjectNode testCase, String objectName) throws Exception {
    ObjectNode substituted =
        (ObjectNode) substitute(testCase, Map.of("$NS", Sidecar.namespace(), "$NAME", objectName));
    String feature = substituted.get("feature").asText();
    String since = substituted.get("since").asText();
    CapabilitiesResponse known = sidecarCapabilities();
    Set<String> knows = new HashSet<>();
    if (known != null) {
      knows.addAll(known.getMethodsList());
      knows.addAll(known.getFieldsList());
      knows.addAll(known.getEnumValuesList());
    }
    Answer answer = null;
    SafewriteException failure = null;
    String call = substituted.get("call").asText();
    try {
      answer = skewCall(call, substituted.get("request"));
    } catch (SafewriteException e) {
      failure = e;
    }
    String where = "skew " + testCase.get("name").asText();
    if (!knows.contains(feature)) {
      assertNotNull(failure, where + ": expected the client's refusal, got " + answer);
      assertEquals(Status.Code.FAILED_PRECONDITION, failure.code(), failure.getMessage());
      assertEquals("UNKNOWN_FIELD", failure.reason(), failure.getMessage());
      assertEquals(SafewriteException.DOMAIN, failure.domain(), failure.getMessage());
      assertEquals(Reason.REASON_UNKNOWN_FIELD, failure.writeFailureReason(), failure.getMessage());
      assertEquals(
          "client",
          failure.errorMetadata().get("refused_by"),
          where + ": refused by the client, before sending: " + failure.getMessage());
      String version = known == null ? "older than 0.2.0" : known.getVersion();
      for (String part : List.of(feature, version, since)) {
        assertTrue(
            failure.description().contains(part),
            where + ": the message names " + part + ": " + failure.description());
      }
      return known == null
          ? "refused, the sidecar is older than 0.2.0"
          : "refused, the sidecar " + known.getVersion() + " lacks it";
    }
    ObjectNode expect = substituted.withObjectProperty("expect_when_present");
    if (expect.has("code")) {
      assertNotNull(failure, where + ": expected " + expect.get("code") + ", got " + answer);
      checkFailure(where, expect, failure);
    } else {
      if (failure != null) {
        fail(where + ": expected success, got " + failure.getMessage());
      }
      checkSuccess(where, expect, answer);
    }
    return "sent, the sidecar " + known.getVersion() + " has it";
  }

  private static Answer skewCall(String call, JsonNode request) throws Exception {
    if (!call.equals("delete")) {
      ObjectNode step = Json.MAPPER.createObjectNode();
      step.put("call", call);
      step.set("request", request);
      return call(step);
    }
    DeleteRequest delete = parse(request, DeleteRequest.newBuilder());
    DeleteConfig.Builder config = DeleteConfig.builder().dryRun(delete.getDryRun());
    if (delete.hasFence()) {
      config.fence(
          new Fence(
              delete.getFence().getLeaseNamespace(),
              delete.getFence().getLeaseName(),
              delete.getFence().getEpoch()));
    }
    DeleteResult result = client().delete(ref(delete.getTarget()), config.build());
    return new Answer("DELETE_OUTCOME_" + result.outcome().name(), null, null, "", null);
  }

  private static ArrayNode adviceRows() throws Exception {
    return cases().withObjectProperty("advice").withArrayProperty("cases");
  }

  /**
   * Each row of the advice table: a call made through the client, with and without an idempotency
   * key, fails with the row's reason and code as the sidecar sends them, and the client's {@link
   * SafewriteException#isRetryable()} must say what the row says.
   */
  @TestFactory
  Stream<DynamicTest> advice() throws Exception {
    ArrayNode rows = adviceRows();
    assertTrue(rows.size() > 0, "no advice rows");
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode element : rows) {
      ObjectNode row = (ObjectNode) element;
      String name = row.get("reason").asText() + " " + row.get("code").asText();
      tests.add(
          DynamicTest.dynamicTest(
              "advice " + name,
              () -> {
                ADVICE_ROWS.incrementAndGet();
                try {
                  checkAdvice(row);
                } catch (AssertionError failure) {
                  ADVICE_FAILURES.put(name, String.valueOf(failure.getMessage()));
                  throw failure;
                }
              }));
    }
    return tests.stream();
  }

  @Test
  void everyReasonHasAnAdviceRow() throws Exception {
    Set<String> rowed = new TreeSet<>();
    adviceRows().forEach(row -> rowed.add(row.get("reason").asText()));
    for (Reason reason : Reason.values()) {
      if (reason != Reason.UNRECOGNIZED) {
        assertTrue(rowed.contains(reason.name()), reason + " has no row in the advice table");
      }
    }
  }

  private static void checkAdvice(ObjectNode row) {
    Reason reason = Reason.valueOf(row.get("reason").asText());
    Status.Code code = Status.Code.valueOf(row.get("code").asText());
    StatusRuntimeException answer = sidecarFailure(reason, code);
    ObjectRef ref = ObjectRef.of("v1", "ConfigMap", "default", "advice");
    for (boolean keyed : new boolean[] {false, true}) {
      WriteConfig.Builder config = WriteConfig.builder();
      if (keyed) {
        config.idempotencyKey("advice-key");
      }
      SafewriteException e;
      try (SafewriteClient client = SafewriteClient.forChannel(new RecordingChannel(answer))) {
        e =
            assertThrows(
                SafewriteException.class,
                () -> client.update(ref, Mutation.mergePatch("{}"), config.build()));
      }
      assertEquals(reason, e.writeFailureReason(), e.getMessage());
      assertEquals(code, e.code(), e.getMessage());
      String field = keyed ? "retryable_with_key" : "retryable";
      assertEquals(
          row.get(field).asBoolean(),
          e.isRetryable(),
          field + " of " + e.getMessage() + " (advice " + e.retryAdvice() + ")");
    }
  }

  /**
   * A failure as the sidecar sends it: the google.rpc.Status with an ErrorInfo (domain
   * safewrite.dev, the reason without REASON_, or for REASON_API_SERVER a Kubernetes Status reason)
   * and a WriteFailure with the reason; REASON_UNSPECIFIED is a status without details, as when the
   * sidecar was not reached.
   */
  private static StatusRuntimeException sidecarFailure(Reason reason, Status.Code code) {
    if (reason == Reason.REASON_UNSPECIFIED) {
      return Status.fromCode(code).withDescription("no details").asRuntimeException();
    }
    String errorInfoReason =
        reason == Reason.REASON_API_SERVER ? "HTTP_500" : Reasons.errorInfoReason(reason);
    com.google.rpc.Status status =
        com.google.rpc.Status.newBuilder()
            .setCode(code.value())
            .setMessage("an advice row")
            .addDetails(
                Any.pack(
                    ErrorInfo.newBuilder()
                        .setDomain(SafewriteException.DOMAIN)
                        .setReason(errorInfoReason)
                        .build()))
            .addDetails(
                Any.pack(WriteFailure.newBuilder().setReason(Reasons.toProto(reason)).build()))
            .build();
    return StatusProto.toStatusRuntimeException(status);
  }

  @AfterAll
  static void writeMatrix() throws Exception {
    if (ADVICE_ROWS.get() > 0) {
      String verdict = ADVICE_FAILURES.isEmpty() ? "PASS" : "FAIL";
      String failed =
          ADVICE_FAILURES.isEmpty() ? "" : ": " + String.join(", ", ADVICE_FAILURES.keySet());
      RESULTS.put(
          "advice table (" + ADVICE_ROWS.get() + " rows, with and without a key)",
          verdict + failed);
    }
    StringBuilder matrix = new StringBuilder();
    RESULTS.forEach(
        (row, verdict) -> {
          int colon = verdict.indexOf(':');
          matrix.append(
              String.format("%-5s %s", colon < 0 ? verdict : verdict.substring(0, colon), row));
          matrix.append(colon < 0 ? "" : verdict.substring(colon)).append('\n');
        });
    Files.createDirectories(MATRIX.getParent());
    Files.writeString(MATRIX, matrix.toString());
    if (client != null) {
      client.close();
    }
  }

  private static synchronized SafewriteClient client() {
    if (client == null) {
      client =
          SafewriteClient.builder()
              .address(Sidecar.address())
              .defaultTimeout(Duration.ofSeconds(10))
              .build();
    }
    return client;
  }

  /**
   * What a step that succeeded answered: a write's {@link Result} or a get's {@link GetResult}, in
   * the terms the cases check.
   */
  private record Answer(
      String outcome,
      Boolean alreadyApplied,
      Boolean remembered,
      String resourceVersion,
      ObjectNode object) {

    static Answer of(Result result) {
      return new Answer(
          "OUTCOME_" + result.outcome().name(),
          result.alreadyApplied(),
          null,
          result.resourceVersion(),
          result.gone() ? null : result.object());
    }

    static Answer of(GetResult got) {
      return new Answer(null, null, got.remembered(), got.resourceVersion(), got.object());
    }

    @Override
    public String toString() {
      return outcome != null ? outcome : "an object (remembered " + remembered + ")";
    }
  }

  private static void run(ObjectNode testCase, String objectName) throws Exception {
    ObjectNode substituted =
        (ObjectNode) substitute(testCase, Map.of("$NS", Sidecar.namespace(), "$NAME", objectName));
    ArrayNode steps = substituted.withArrayProperty("steps");
    // $RV: the resourceVersion the step before answered with; empty before any, or after a failure.
    String previousVersion = "";
    for (int i = 0; i < steps.size(); i++) {
      ObjectNode step = (ObjectNode) substitute(steps.get(i), Map.of("$RV", previousVersion));
      String where = "step " + (i + 1) + " (" + step.get("call").asText() + ")";
      ObjectNode expect = step.withObjectProperty("expect");
      Answer answer = null;
      SafewriteException failure = null;
      try {
        answer = call(step);
      } catch (SafewriteException e) {
        failure = e;
      }
      previousVersion = answer == null ? "" : answer.resourceVersion();
      if (expect.has("code")) {
        assertNotNull(failure, where + ": expected " + expect.get("code") + ", got " + answer);
        checkFailure(where, expect, failure);
      } else {
        if (failure != null) {
          fail(where + ": expected success, got " + failure.getMessage());
        }
        checkSuccess(where, expect, answer);
      }
    }
  }

  private static Answer call(ObjectNode step) throws Exception {
    SafewriteClient client = client();
    switch (step.get("call").asText()) {
      case "update":
        // Through the client's own types, as a controller makes the call.
        UpdateWithRetryRequest update =
            parse(step.get("request"), UpdateWithRetryRequest.newBuilder());
        return Answer.of(
            client.update(
                ref(update.getTarget()),
                Mutation.of(update.getMutation()),
                WriteConfig.of(
                    update.getPreconditions(),
                    update.hasRetryPolicy() ? update.getRetryPolicy() : null,
                    update.getOptions())));
      case "patch_status":
        PatchStatusRequest status = parse(step.get("request"), PatchStatusRequest.newBuilder());
        return Answer.of(
            client.patchStatus(
                ref(status.getTarget()),
                Mutation.of(status.getMutation()),
                WriteConfig.of(
                    status.getPreconditions(),
                    status.hasRetryPolicy() ? status.getRetryPolicy() : null,
                    status.getOptions())));
      case "get":
        // Through the calls a controller makes: get(ref), or get(ref, minResourceVersion).
        GetRequest get = parse(step.get("request"), GetRequest.newBuilder());
        ObjectRef ref = ref(get.getTarget());
        return Answer.of(
            get.getMinResourceVersion().isEmpty()
                ? client.get(ref)
                : client.get(ref, get.getMinResourceVersion()));
      case "transact":
        // The README names it `begin`; some cases name it `request`, as for the unary calls.
        JsonNode beginJson = step.has("begin") ? step.get("begin") : step.get("request");
        TransactBegin begin = parse(beginJson, TransactBegin.newBuilder());
        List<TransactProposal> proposals = new ArrayList<>();
        for (JsonNode proposal : step.withArrayProperty("proposals")) {
          proposals.add(parse(proposal, TransactProposal.newBuilder()));
        }
        Iterator<TransactProposal> next = proposals.iterator();
        TransactFunction<ObjectNode> function =
            fresh -> {
              if (!next.hasNext()) {
                throw new IllegalStateException(
                    "the sidecar sent more fresh objects than the case has proposals");
              }
              return Proposal.of(next.next());
            };
        WriteConfig config =
            WriteConfig.of(
                begin.getPreconditions(),
                begin.hasRetryPolicy() ? begin.getRetryPolicy() : null,
                begin.getOptions());
        return Answer.of(
            begin.getStatus()
                ? client.transactStatus(ref(begin.getTarget()), function, config)
                : client.transact(ref(begin.getTarget()), function, config));
      default:
        throw new IllegalArgumentException("unknown call " + step.get("call"));
    }
  }

  private static ObjectRef ref(dev.safewrite.v1.ObjectRef target) {
    return ObjectRef.of(
        target.getApiVersion(), target.getKind(), target.getNamespace(), target.getName());
  }

  private static void checkSuccess(String where, ObjectNode expect, Answer answer) {
    if (expect.has("outcome")) {
      assertEquals(expect.get("outcome").asText(), answer.outcome(), where + ": outcome");
    }
    if (expect.has("already_applied")) {
      assertEquals(
          expect.get("already_applied").asBoolean(),
          answer.alreadyApplied(),
          where + ": already_applied");
    }
    if (expect.has("remembered")) {
      assertEquals(
          expect.get("remembered").asBoolean(), answer.remembered(), where + ": remembered");
    }
    if (expect.has("object")) {
      assertSubset(where + ": object", expect.get("object"), answer.object());
    }
  }

  private static void checkFailure(String where, ObjectNode expect, SafewriteException e) {
    assertEquals(
        expect.get("code").asText(), e.code().name(), where + ": code of " + e.getMessage());
    assertEquals(SafewriteException.DOMAIN, e.domain(), where + ": domain of " + e.getMessage());
    if (expect.has("reason")) {
      assertEquals(
          expect.get("reason").asText(), e.reason(), where + ": reason of " + e.getMessage());
    }
    if (expect.has("write_failure_reason")) {
      assertEquals(
          expect.get("write_failure_reason").asText(),
          e.writeFailureReason().name(),
          where + ": write_failure_reason of " + e.getMessage());
    }
    if (expect.has("field_violations")) {
      List<String> expected = new ArrayList<>();
      expect.withArrayProperty("field_violations").forEach(field -> expected.add(field.asText()));
      assertEquals(
          expected,
          e.fieldViolations().stream().map(FieldViolation::field).toList(),
          where + ": field_violations of " + e.getMessage());
    }
    if (expect.has("current_object")) {
      assertSubset(
          where + ": current_object",
          expect.get("current_object"),
          e.currentObject().orElseThrow(() -> new AssertionError(where + ": no current object")));
    }
  }

  /** Maps are compared as subsets, everything else by equality. */
  private static void assertSubset(String where, JsonNode expected, JsonNode actual) {
    if (expected.isObject()) {
      assertTrue(
          actual != null && actual.isObject(), where + ": expected an object, got " + actual);
      for (Map.Entry<String, JsonNode> field : expected.properties()) {
        assertSubset(where + "." + field.getKey(), field.getValue(), actual.get(field.getKey()));
      }
    } else {
      assertEquals(expected, actual, where);
    }
  }

  private static <T extends Message> T parse(JsonNode json, Message.Builder builder)
      throws Exception {
    JsonFormat.parser().merge(json.toString(), builder);
    @SuppressWarnings("unchecked")
    T message = (T) builder.build();
    return message;
  }

  private static JsonNode substitute(JsonNode element, Map<String, String> values) {
    if (element.isObject()) {
      ObjectNode out = Json.MAPPER.createObjectNode();
      element.properties().forEach(e -> out.set(e.getKey(), substitute(e.getValue(), values)));
      return out;
    }
    if (element.isArray()) {
      ArrayNode out = Json.MAPPER.createArrayNode();
      element.forEach(e -> out.add(substitute(e, values)));
      return out;
    }
    if (element.isTextual()) {
      String text = element.asText();
      for (Map.Entry<String, String> value : values.entrySet()) {
        text = text.replace(value.getKey(), value.getValue());
      }
      return TextNode.valueOf(text);
    }
    return element;
  }
}
