/** What needs no sidecar: retry advice from the proto, error decoding, mutations and options, generated code. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { promisify } from "node:util";
import { describe, it } from "node:test";

import { create, getOption, hasOption, toBinary } from "@bufbuild/protobuf";
import { anyPack, durationFromMs, type Any } from "@bufbuild/protobuf/wkt";
import {
  apply,
  cel,
  CancelledError,
  codeAdvice,
  ConflictError,
  decodeDetails,
  DeadlineExceededError,
  errorClass,
  GrpcStatus,
  InternalError,
  InvalidError,
  jsonPatch,
  mergePatch,
  NotFoundError,
  OutcomeUnknownError,
  PermissionDeniedError,
  PreconditionFailedError,
  Reason,
  REASON_ADVICE,
  reasonName,
  RequestTooLargeError,
  ResourceExhaustedError,
  Retry,
  retryAdvice,
  SafewriteError,
  UnauthenticatedError,
  UnavailableError,
  UnimplementedError,
} from "@safewrite/client";
import { AttemptRecordSchema, ReasonSchema, retry, retry_by_code, WriteFailureSchema } from "#gen/safewrite/v1/writer_pb";
import { messageOf } from "#internal/mutation";

import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "#gen/google/rpc/error_details_pb";
import { StatusSchema } from "#gen/google/rpc/status_pb";
import { packageRoot } from "./support.js";

describe("reasons", () => {
  it("takes every Reason value's advice from its (retry) option in the proto", () => {
    const values = ReasonSchema.values;
    assert.ok(values.length >= 27, "the generated enum lists the proto's values");
    for (const value of values) {
      assert.ok(hasOption(value, retry), `${value.name} (${value.number}) has no (retry) option`);
      assert.equal(REASON_ADVICE[value.number as Reason], getOption(value, retry), value.name);
      assert.equal(retryAdvice(value.number as Reason), getOption(value, retry), value.name);
    }
    assert.equal(Object.keys(REASON_ADVICE).length, values.length, "no advice for a value the proto lacks");
  });

  it("spells every Reason as ErrorInfo does: the value's name without REASON_", () => {
    for (const value of ReasonSchema.values) {
      assert.equal(`REASON_${reasonName(value.number as Reason)}`, value.name);
    }
  });

  it("judges a reason newer than this client by its code", () => {
    assert.equal(retryAdvice(999 as Reason), Retry.BY_CODE);
    const unavailable = new SafewriteError(GrpcStatus.UNAVAILABLE, "m", { failureReason: 999 as Reason });
    assert.equal(unavailable.advice, Retry.LATER);
    assert.equal(unavailable.retryable, true);
    const invalid = new SafewriteError(GrpcStatus.INVALID_ARGUMENT, "m", { failureReason: 999 as Reason });
    assert.equal(invalid.retryable, false);
  });

  it("advises by code as the enum's (retry_by_code) option lists the codes", () => {
    const byCode = getOption(ReasonSchema, retry_by_code);
    assert.ok(byCode.withIdempotencyKey.length > 0 && byCode.later.length > 0, "the option is set");
    for (const code of byCode.withIdempotencyKey) {
      assert.equal(codeAdvice(code), Retry.WITH_IDEMPOTENCY_KEY, GrpcStatus[code]);
    }
    for (const code of byCode.later) {
      assert.equal(codeAdvice(code), Retry.LATER, GrpcStatus[code]);
    }
    assert.equal(codeAdvice(GrpcStatus.NOT_FOUND), Retry.NEVER, "a code in neither list");
  });
});

/** The serialized google.rpc.Status the sidecar sends in grpc-status-details-bin. */
function statusBytes(code: number, reason: Reason, extra: Any[] = []): Uint8Array {
  const details = [
    anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { reason: reasonName(reason), domain: "safewrite.dev", metadata: { attempts: "2" } })),
    anyPack(
      WriteFailureSchema,
      create(WriteFailureSchema, {
        reason,
        traceId: "0af7651916cd43dd8448eb211c80319c",
        currentObjectJson: '{"data":{"n":"1"}}',
        attemptRecords: [
          create(AttemptRecordSchema, { number: 1, resourceVersionRead: "7", httpStatus: 409, reason: "Conflict", backoff: durationFromMs(25), batchSize: 1 }),
          create(AttemptRecordSchema, { number: 2, resourceVersionRead: "8" }),
        ],
      }),
    ),
    ...extra,
  ];
  return toBinary(StatusSchema, create(StatusSchema, { code, message: "from the status", details }));
}

describe("error details", () => {
  it("decodes ErrorInfo, BadRequest, RetryInfo and WriteFailure", () => {
    const bytes = statusBytes(GrpcStatus.INVALID_ARGUMENT, Reason.INVALID_REQUEST, [
      anyPack(BadRequestSchema, create(BadRequestSchema, { fieldViolations: [{ field: "target.name", description: "bad" }] })),
      anyPack(RetryInfoSchema, create(RetryInfoSchema, { retryDelay: durationFromMs(1500) })),
    ]);
    const d = decodeDetails(bytes);
    assert.equal(d.reason, "INVALID_REQUEST");
    assert.equal(d.domain, "safewrite.dev");
    assert.deepEqual(d.errorMetadata, { attempts: "2" });
    assert.equal(d.failureReason, Reason.INVALID_REQUEST);
    assert.deepEqual(d.fieldViolations, [{ field: "target.name", description: "bad" }]);
    assert.equal(d.retryDelayMs, 1500);
    assert.equal(d.traceId, "0af7651916cd43dd8448eb211c80319c");
    assert.deepEqual(d.currentObject, { data: { n: "1" } });
    assert.deepEqual(d.attemptRecords, [
      { number: 1, resourceVersionRead: "7", httpStatus: 409, reason: "Conflict", backoffMs: 25, batchSize: 1 },
      { number: 2, resourceVersionRead: "8", httpStatus: 0, reason: "", backoffMs: 0, batchSize: 0 },
    ]);
    assert.equal(d.message, "from the status");
  });

  const cases: [number, Reason, new (...args: never[]) => SafewriteError, boolean][] = [
    [GrpcStatus.ABORTED, Reason.API_SERVER, ConflictError, true],
    [GrpcStatus.ABORTED, Reason.RESOURCE_VERSION_MISMATCH, ConflictError, false],
    [GrpcStatus.INVALID_ARGUMENT, Reason.INVALID_REQUEST, InvalidError, false],
    [GrpcStatus.FAILED_PRECONDITION, Reason.PRECONDITION_FAILED, PreconditionFailedError, false],
    [GrpcStatus.FAILED_PRECONDITION, Reason.OBJECT_DELETING, PreconditionFailedError, false],
    [GrpcStatus.FAILED_PRECONDITION, Reason.ALREADY_OWNED, PreconditionFailedError, false],
    [GrpcStatus.FAILED_PRECONDITION, Reason.FENCED, PreconditionFailedError, false],
    [GrpcStatus.FAILED_PRECONDITION, Reason.NOT_LEADER, PreconditionFailedError, false],
    [GrpcStatus.UNAVAILABLE, Reason.CIRCUIT_OPEN, UnavailableError, true],
    [GrpcStatus.UNAVAILABLE, Reason.RETRY_BUDGET_EXHAUSTED, UnavailableError, true],
    [GrpcStatus.UNAVAILABLE, Reason.RESOURCE_VERSION_TOO_LARGE, UnavailableError, true],
    [GrpcStatus.RESOURCE_EXHAUSTED, Reason.OVERLOADED, ResourceExhaustedError, true],
    [GrpcStatus.RESOURCE_EXHAUSTED, Reason.CEL_BUSY, ResourceExhaustedError, true],
    [GrpcStatus.PERMISSION_DENIED, Reason.POLICY_DENIED, PermissionDeniedError, false],
    [GrpcStatus.UNAUTHENTICATED, Reason.TOKEN_REQUIRED, UnauthenticatedError, false],
    [GrpcStatus.NOT_FOUND, Reason.UNKNOWN_KIND, NotFoundError, false],
    [GrpcStatus.DEADLINE_EXCEEDED, Reason.DEADLINE_EXCEEDED, DeadlineExceededError, true],
    [GrpcStatus.DEADLINE_EXCEEDED, Reason.TRANSACTION_IDLE, DeadlineExceededError, true],
    [GrpcStatus.CANCELLED, Reason.TRANSACTION_CANCELLED, CancelledError, false],
    [GrpcStatus.UNKNOWN, Reason.WRITE_OUTCOME_UNKNOWN, OutcomeUnknownError, false],
    [GrpcStatus.INTERNAL, Reason.API_SERVER, InternalError, true],
    [GrpcStatus.DATA_LOSS, Reason.BAD_ANSWER, InternalError, false],
    [GrpcStatus.UNIMPLEMENTED, Reason.UNIMPLEMENTED, UnimplementedError, false],
    [GrpcStatus.OUT_OF_RANGE, Reason.REQUEST_TOO_LARGE, RequestTooLargeError, false],
  ];
  for (const [code, reason, cls, retryable] of cases) {
    it(`${GrpcStatus[code]} with ${reasonName(reason)} is a ${cls.name}, retryable: ${retryable}`, () => {
      const details = decodeDetails(statusBytes(code, reason));
      const Cls = errorClass(code, details.failureReason!, details.reason);
      assert.equal(Cls, cls);
      const err = new Cls(code, "m", details);
      assert.ok(err instanceof SafewriteError);
      assert.equal(err.name, cls.name);
      assert.equal(err.failureReason, reason);
      assert.equal(err.attempts, 2);
      assert.equal(err.retryable, retryable);
    });
  }

  it("a write of unknown outcome is retryable only with an idempotency key", () => {
    const details = decodeDetails(statusBytes(GrpcStatus.UNKNOWN, Reason.WRITE_OUTCOME_UNKNOWN));
    assert.equal(new OutcomeUnknownError(GrpcStatus.UNKNOWN, "m", details).retryable, false);
    assert.equal(new OutcomeUnknownError(GrpcStatus.UNKNOWN, "m", details, { idempotent: true }).retryable, true);
  });

  it("any other UNKNOWN is a plain SafewriteError", () => {
    assert.equal(errorClass(GrpcStatus.UNKNOWN, Reason.UNSPECIFIED), SafewriteError);
  });
});

describe("mutations", () => {
  it("builds each kind from objects or JSON text", () => {
    assert.equal(cel("x").kind, "cel");
    const merge = mergePatch({ data: { a: "1" } });
    assert.equal(merge.kind, "mergePatch");
    assert.deepEqual(messageOf(merge).kind.value, messageOf(mergePatch('{"data":{"a":"1"}}')).kind.value);
    assert.equal(jsonPatch([{ op: "remove", path: "/data/a" }]).kind, "jsonPatch");
    const ssa = apply({ kind: "ConfigMap" }, { force: true });
    assert.equal(ssa.kind, "apply");
    const message = messageOf(ssa);
    assert.deepEqual(message.kind.case === "apply" && message.kind.value.force, true);
  });

  it("refuses a patch that is not JSON", () => {
    assert.throws(() => mergePatch(undefined as unknown as string), TypeError);
  });
});

describe("the package", () => {
  const manifest = JSON.parse(readFileSync(`${packageRoot}package.json`, "utf8")) as {
    name: string;
    license: string;
    private?: boolean;
    types: string;
    files: string[];
    exports: Record<string, { types: string; default: string }>;
    peerDependencies: Record<string, string>;
    peerDependenciesMeta?: Record<string, { optional?: boolean }>;
    devDependencies: Record<string, string>;
  };

  it("is ready to publish: npm pack takes the built code, its types, README, LICENSE and CHANGELOG, nothing else", async () => {
    assert.equal(manifest.name, "@safewrite/client");
    assert.equal(manifest.license, "Apache-2.0");
    assert.equal(manifest.private, undefined, "a private package cannot be published");
    const { stdout } = await promisify(execFile)("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
      cwd: packageRoot,
    });
    const [pack] = JSON.parse(stdout) as { name: string; files: { path: string }[] }[];
    const files = pack!.files.map((f) => f.path).sort();
    for (const required of ["package.json", "README.md", "LICENSE", "CHANGELOG.md", "dist/index.js", "dist/index.d.ts"]) {
      assert.ok(files.includes(required), `the package holds ${required}`);
    }
    assert.ok(files.includes(manifest.types.replace(/^\.\//, "")), "the package holds its `types`");
    const stray = files.filter(
      (f) => !["package.json", "README.md", "LICENSE", "CHANGELOG.md"].includes(f) && !/^dist\/.*\.(js|d\.ts)$/.test(f),
    );
    assert.deepEqual(stray, [], "no sources, tests, maps or build output");
    // Every module the built code loads is in the package.
    const built = readdirSync(`${packageRoot}dist`, { recursive: true, encoding: "utf8" })
      .filter((f) => f.endsWith(".js"))
      .map((f) => `dist/${f}`);
    assert.deepEqual(built.filter((f) => !files.includes(f)), []);
  });

  it("exports only the public API, not the generated code", async () => {
    assert.deepEqual(Object.keys(manifest.exports), ["."]);
    for (const hidden of ["@safewrite/client/v1", "@safewrite/client/dist/gen/safewrite/v1/writer_pb.js", "@safewrite/client/dist/client.js"]) {
      await assert.rejects(import(hidden), (err: NodeJS.ErrnoException) => err.code === "ERR_PACKAGE_PATH_NOT_EXPORTED", hidden);
    }
  });

  it("takes @kubernetes/client-node as a peer dependency from the version it is tested with", () => {
    const tested = manifest.devDependencies["@kubernetes/client-node"]!;
    const installed = (
      JSON.parse(readFileSync(`${packageRoot}node_modules/@kubernetes/client-node/package.json`, "utf8")) as { version: string }
    ).version;
    assert.equal(installed, tested, "the tests run with the pinned version");
    assert.equal(manifest.peerDependencies["@kubernetes/client-node"], `^${tested}`);
    assert.equal(manifest.peerDependenciesMeta?.["@kubernetes/client-node"]?.optional, undefined, "not optional");
  });
});

describe("generated code", () => {
  it("is what generate.sh makes from the proto", async () => {
    const run = promisify(execFile);
    await run("bash", [`${packageRoot}generate.sh`, "--check"], { cwd: packageRoot });
  });
});
