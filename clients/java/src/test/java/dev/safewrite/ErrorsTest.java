package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static dev.safewrite.Sidecar.data;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Every error path the client exposes, from the real sidecar and API server. */
@Tag("sidecar")
class ErrorsTest {
  private static final Mutation INCREMENT =
      Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}");

  private static List<String> fields(SafewriteException e) {
    return e.fieldViolations().stream().map(FieldViolation::field).toList();
  }

  @Test
  void missingObjectIsNotFound() {
    NotFoundException e =
        assertThrows(
            NotFoundException.class,
            () ->
                client()
                    .update(
                        Sidecar.configMap("missing"),
                        Mutation.mergePatch("{\"data\": {\"a\": \"1\"}}")));
    assertEquals(Status.Code.NOT_FOUND, e.code());
    assertEquals("NotFound", e.reason());
    assertEquals(SafewriteException.DOMAIN, e.domain());
    assertEquals(Reason.REASON_API_SERVER, e.writeFailureReason());
    assertFalse(e.isRetryable());
    assertTrue(e.getMessage().startsWith("safewrite: NOT_FOUND (NotFound): "), e.getMessage());
    // The advice names this client's option, not the proto's field.
    assertTrue(e.getMessage().contains("set createIfMissing to create it"), e.getMessage());
    assertTrue(e.description().contains("set createIfMissing to create it"), e.description());
    assertFalse(e.getMessage().contains("create_if_missing_json"), e.getMessage());
  }

  @Test
  void unknownKindIsNotFound() {
    NotFoundException e =
        assertThrows(
            NotFoundException.class,
            () ->
                client()
                    .update(
                        ObjectRef.of("v1", "NoSuchKind", Sidecar.namespace(), "x"),
                        Mutation.mergePatch("{}")));
    assertEquals("UNKNOWN_KIND", e.reason());
    assertEquals(Reason.REASON_UNKNOWN_KIND, e.writeFailureReason());
  }

  @Test
  void malformedRequestNamesTheField() {
    InvalidException e =
        assertThrows(
            InvalidException.class,
            () ->
                client()
                    .update(
                        ObjectRef.of("v1", "ConfigMap", "acl/secrets/victim#", "x"),
                        Mutation.mergePatch("{}")));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.code());
    assertEquals(Reason.REASON_INVALID_REQUEST, e.writeFailureReason());
    assertEquals(List.of("target.namespace"), fields(e));
    assertFalse(e.fieldViolations().get(0).description().isEmpty());
  }

  @Test
  void celThatDoesNotCompileIsInvalid() {
    InvalidException e =
        assertThrows(
            InvalidException.class,
            () -> client().update(Sidecar.configMap("cel"), Mutation.cel("object.data.(")));
    // A CEL expression that does not compile is INVALID_CEL, as the proto documents.
    assertEquals(Reason.REASON_INVALID_CEL, e.writeFailureReason(), e.getMessage());
    assertEquals(List.of("mutation.cel.expression"), fields(e));
  }

  @Test
  void celThatFailsOnTheObjectIsInvalidCel() {
    ObjectRef ref = Sidecar.configMap("cel-eval");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    InvalidException e =
        assertThrows(InvalidException.class, () -> client().update(ref, Mutation.cel("1 + 1")));
    assertEquals("INVALID_CEL", e.reason());
    assertEquals(Reason.REASON_INVALID_CEL, e.writeFailureReason());
    assertEquals(List.of("mutation.cel.expression"), fields(e));
    assertFalse(e.isRetryable());
  }

  @Test
  void objectTheApiServerRefusesIsInvalidWithItsFields() {
    ObjectRef ref = Sidecar.configMap("refused");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    InvalidException e =
        assertThrows(
            InvalidException.class,
            () ->
                client()
                    .update(
                        ref,
                        Mutation.mergePatch(
                            "{\"metadata\": {\"labels\": {\"bad key!\": \"x\"}}}")));
    assertEquals("Invalid", e.reason());
    assertEquals(Reason.REASON_API_SERVER, e.writeFailureReason());
    assertEquals("422", e.errorMetadata().get("http_status"));
    assertFalse(e.fieldViolations().isEmpty());
    assertTrue(
        e.fieldViolations().get(0).field().startsWith("metadata.labels"),
        e.fieldViolations().toString());
  }

  @Test
  void requestOverTheSidecarsLimitIsOutOfRange() {
    String big = "{\"data\": {\"big\": \"" + "x".repeat(5 << 20) + "\"}}";
    InvalidException e =
        assertThrows(
            InvalidException.class,
            () ->
                client()
                    .update(
                        Sidecar.configMap("big"),
                        Mutation.mergePatch("{}"),
                        WriteConfig.builder().createIfMissing(big).build()));
    assertEquals(Status.Code.OUT_OF_RANGE, e.code());
    assertEquals(Reason.REASON_REQUEST_TOO_LARGE, e.writeFailureReason());
  }

  @Test
  void falsePreconditionCarriesTheCurrentObject() {
    ObjectRef ref = Sidecar.configMap("precondition");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    PreconditionFailedException e =
        assertThrows(
            PreconditionFailedException.class,
            () ->
                client()
                    .update(
                        ref,
                        INCREMENT,
                        WriteConfig.builder().preconditionCel("object.data.n == \"99\"").build()));
    assertEquals("PRECONDITION_FAILED", e.reason());
    assertEquals(Reason.REASON_PRECONDITION_FAILED, e.writeFailureReason());
    assertEquals("1", data(e.currentObject().orElseThrow(), "n"));
    assertFalse(e.isRetryable());

    PreconditionFailedException uid =
        assertThrows(
            PreconditionFailedException.class,
            () ->
                client()
                    .update(
                        ref,
                        INCREMENT,
                        WriteConfig.builder().uid("00000000-0000-0000-0000-000000000000").build()));
    assertEquals(Reason.REASON_PRECONDITION_FAILED, uid.writeFailureReason());

    PreconditionFailedException test =
        assertThrows(
            PreconditionFailedException.class,
            () ->
                client()
                    .update(
                        ref,
                        Mutation.jsonPatch(
                            JsonPatchOp.test("/data/n", "7"),
                            JsonPatchOp.replace("/data/n", "8"))));
    assertEquals(Reason.REASON_PRECONDITION_FAILED, test.writeFailureReason());

    PreconditionFailedException missing =
        assertThrows(
            PreconditionFailedException.class,
            () ->
                client()
                    .update(ref, Mutation.jsonPatch(JsonPatchOp.replace("/spec/missing", "x"))));
    assertEquals(Reason.REASON_MUTATION_DOES_NOT_APPLY, missing.writeFailureReason());
    assertEquals("1", data(Sidecar.read(ref), "n"));
  }

  @Test
  void staleResourceVersionIsAConflictNotRetried() {
    ObjectRef ref = Sidecar.configMap("cas");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    ConflictException e =
        assertThrows(
            ConflictException.class,
            () ->
                client()
                    .update(ref, INCREMENT, WriteConfig.builder().resourceVersion("1").build()));
    assertEquals(Status.Code.ABORTED, e.code());
    assertEquals("RESOURCE_VERSION_MISMATCH", e.reason());
    assertEquals(Reason.REASON_RESOURCE_VERSION_MISMATCH, e.writeFailureReason());
    assertFalse(e.isRetryable());
  }

  @Test
  void applyAgainstAnotherManagersFieldIsAConflictUnlessForced() {
    ObjectRef ref = Sidecar.configMap("ssa");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    String config =
        "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \""
            + ref.name()
            + "\"}, \"data\": {\"n\": \"2\"}}";
    ConflictException e =
        assertThrows(
            ConflictException.class,
            () ->
                client()
                    .update(
                        ref,
                        Mutation.apply(config, false),
                        WriteConfig.builder().fieldManager("other-manager").build()));
    assertEquals(Reason.REASON_FIELD_MANAGER_CONFLICT, e.writeFailureReason());
    assertFalse(e.isRetryable());
    Result forced =
        client()
            .update(
                ref,
                Mutation.apply(config, true),
                WriteConfig.builder().fieldManager("other-manager").build());
    assertEquals("2", data(forced.object(), "n"));
  }

  @Test
  void secretsAreDeniedByThePolicy() {
    PermissionDeniedException e =
        assertThrows(
            PermissionDeniedException.class,
            () ->
                client()
                    .update(
                        ObjectRef.of("v1", "Secret", Sidecar.namespace(), "s"),
                        Mutation.mergePatch("{\"data\": {\"a\": \"MQ==\"}}")));
    assertEquals("POLICY_DENIED", e.reason());
    assertEquals(Reason.REASON_POLICY_DENIED, e.writeFailureReason());
  }

  @Test
  void identityWithoutRightsIsForbidden() {
    ObjectRef ref = Sidecar.configMap("forbidden");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    try (SafewriteClient restricted =
        SafewriteClient.connect(Sidecar.env("SAFEWRITE_RESTRICTED_ADDR"))) {
      PermissionDeniedException e =
          assertThrows(
              PermissionDeniedException.class,
              () ->
                  restricted.update(
                      ref,
                      INCREMENT,
                      WriteConfig.builder().timeout(java.time.Duration.ofSeconds(20)).build()));
      assertEquals("Forbidden", e.reason());
      assertEquals(Reason.REASON_API_SERVER, e.writeFailureReason());
      assertEquals("403", e.errorMetadata().get("http_status"));
    }
  }

  @Test
  void statusOfAKindWithoutStatusIsRefused() {
    ObjectRef ref = Sidecar.configMap("no-status");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    InvalidException e =
        assertThrows(
            InvalidException.class,
            () -> client().patchStatus(ref, Mutation.mergePatch("{\"status\": {\"a\": \"1\"}}")));
    assertEquals(List.of("target.kind"), fields(e));
  }
}
