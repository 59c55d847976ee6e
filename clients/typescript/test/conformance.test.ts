/**
 * The shared conformance cases (../conformance/cases.json, see its README) through this
 * client's public API, one subtest per case, its retry advice table through this
 * client's error decoding, one subtest per row, and its skew cases (a feature the
 * sidecar may lack: refused by the client before sending when the sidecar's
 * Capabilities says it lacks it, sent otherwise), one subtest per case. The per-case
 * matrix is also written to build/conformance-matrix.txt for test.sh to print.
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { after, describe, it } from "node:test";

import { create, fromBinary, fromJson, toBinary, type JsonValue } from "@bufbuild/protobuf";
import { anyPack, durationMs } from "@bufbuild/protobuf/wkt";
import { Client as GrpcClient, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";
import {
  abort,
  apply,
  cel,
  addFinalizer,
  fromServiceError,
  GrpcStatus,
  jsonPatch,
  mergePatch,
  Outcome,
  Reason,
  removeConditions,
  removeFinalizer,
  removeListEntry,
  removeOwnerReference,
  SafewriteError,
  setConditions,
  setOwnerReference,
  upsertListEntry,
  type ConditionInput,
  type DeleteResult,
  type GetOptions,
  type GetResult,
  type Mutation,
  type Proposal,
  type Result,
  type TransactOptions,
} from "@safewrite/client";
// The request messages, to read the cases' proto3 JSON exactly as the proto defines it.
import {
  CapabilitiesRequestSchema,
  CapabilitiesResponseSchema,
  DeleteOutcomeSchema,
  DeleteRequestSchema,
  GetRequestSchema,
  OutcomeSchema,
  PatchStatusRequestSchema,
  ReasonSchema,
  TransactBeginSchema,
  TransactProposalSchema,
  UpdateWithRetryRequestSchema,
  WriteFailureSchema,
  type Condition as ConditionMessage,
  type Mutation as MutationMessage,
  type ObjectRef as ObjectRefMessage,
  type Preconditions as PreconditionsMessage,
  type RetryPolicy as RetryPolicyMessage,
  type WriteOptions as WriteOptionsMessage,
} from "#gen/safewrite/v1/writer_pb";
import { ErrorInfoSchema } from "#gen/google/rpc/error_details_pb";
import { StatusSchema } from "#gen/google/rpc/status_pb";

import { adminClient, harness, namespace, packageRoot } from "./support.js";

interface Expect {
  outcome?: string;
  already_applied?: boolean;
  remembered?: boolean;
  object?: JsonValue;
  code?: string;
  reason?: string;
  write_failure_reason?: string;
  field_violations?: string[];
  current_object?: JsonValue;
}
interface Step {
  call: "update" | "patch_status" | "transact" | "get";
  request?: JsonValue;
  begin?: JsonValue;
  proposals?: JsonValue[];
  expect: Expect;
}
interface Case {
  name: string;
  steps: Step[];
}
/** A row of the advice table: a failure and whether the same call may be sent again. */
interface AdviceRow {
  /** A Reason value's name, e.g. "REASON_CIRCUIT_OPEN". */
  reason: string;
  /** The gRPC code's name the sidecar sends it with, e.g. "UNAVAILABLE". */
  code: string;
  retryable: boolean;
  retryable_with_key: boolean;
}

/** A skew case: a feature the sidecar may lack, and a step that uses it. */
interface SkewCase {
  name: string;
  /** An RPC path ("safewrite.v1.WriterService/Delete"), or a field's or an enum value's full name. */
  feature: string;
  /** The first version that has it. */
  since: string;
  call: "update" | "delete";
  request: JsonValue;
  expect_when_present: Expect;
}

const casesPath = `${packageRoot}../conformance/cases.json`;
const file = JSON.parse(readFileSync(casesPath, "utf8")) as {
  cases: Case[];
  advice: { cases: AdviceRow[] };
  skew: { cases: SkewCase[] };
};
const cases = file.cases;
const adviceRows = file.advice.cases;
const skewCases = file.skew.cases;
const client = adminClient();
const matrix: string[] = [];

after(() => {
  client.close();
  mkdirSync(`${packageRoot}build`, { recursive: true });
  writeFileSync(`${packageRoot}build/conformance-matrix.txt`, matrix.join("\n") + "\n");
});

/**
 * Every string of `value` with $NS, $NAME and $RV replaced; $RV (the resourceVersion
 * the step before answered with) is absent before the first step and after a failed one.
 */
function substitute(value: JsonValue, vars: Record<string, string | undefined>): JsonValue {
  if (typeof value === "string") {
    let replaced = value.replaceAll("$NS", vars["$NS"]!).replaceAll("$NAME", vars["$NAME"]!);
    if (replaced.includes("$RV")) {
      const rv = vars["$RV"];
      assert.ok(rv !== undefined, `"${value}" names $RV, but the step before answered no resourceVersion`);
      replaced = replaced.replaceAll("$RV", rv);
    }
    return replaced;
  }
  if (Array.isArray(value)) {
    return value.map((v) => substitute(v, vars));
  }
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v, vars)]));
  }
  return value;
}

/** `want` is in `got`: maps compared as subsets, everything else by equality. */
function assertSubset(want: JsonValue | undefined, got: unknown, path = "object"): void {
  if (want !== null && typeof want === "object" && !Array.isArray(want)) {
    assert.ok(got !== null && typeof got === "object" && !Array.isArray(got), `${path}: want a map, got ${JSON.stringify(got)}`);
    for (const [key, value] of Object.entries(want)) {
      assertSubset(value, (got as Record<string, unknown>)[key], `${path}.${key}`);
    }
  } else {
    assert.deepEqual(got, want, `${path}: want ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
  }
}

/** The message's mutation through the client's builders (or none). */
function mutationOf(message: MutationMessage | undefined): Mutation | undefined {
  const kind = message?.kind;
  switch (kind?.case) {
    case "cel":
      return cel(kind.value.expression);
    case "mergePatch":
      return mergePatch(kind.value.patchJson);
    case "jsonPatch":
      return jsonPatch(kind.value.patchJson);
    case "apply":
      return apply(kind.value.configurationJson, { force: kind.value.force });
    case "setCondition":
      return setConditions(kind.value.conditions.map(conditionOf), { path: orUndefined(kind.value.path, "") });
    case "removeCondition":
      return removeConditions(kind.value.types, { path: orUndefined(kind.value.path, "") });
    case "finalizer": {
      const { finalizer, remove } = kind.value;
      return remove ? removeFinalizer(finalizer) : addFinalizer(finalizer);
    }
    case "ownerReference": {
      // The reference as a V1OwnerReference, written as given; an unset owner sends an
      // empty one, for the sidecar to refuse.
      const { apiVersion = "", kind: ownerKind = "", name = "", uid = "", controller = false, blockOwnerDeletion = false } =
        kind.value.owner ?? {};
      const owner = { apiVersion, kind: ownerKind, name, uid, controller, blockOwnerDeletion };
      return kind.value.remove ? removeOwnerReference(owner) : setOwnerReference(owner);
    }
    case "listEntry": {
      const { path, keys, entryJson, remove } = kind.value;
      return (remove ? removeListEntry : upsertListEntry)(path, keys, entryJson);
    }
    default:
      return undefined;
  }
}

/** A condition message as the client takes it: client-node's V1Condition, times as Dates. */
function conditionOf(c: ConditionMessage): ConditionInput {
  return {
    type: c.type,
    status: c.status,
    reason: c.reason,
    message: orUndefined(c.message, ""),
    observedGeneration: c.observedGeneration === undefined ? undefined : Number(c.observedGeneration),
    lastTransitionTime: c.lastTransitionTime === "" ? undefined : new Date(c.lastTransitionTime),
  };
}

const orUndefined = <T>(value: T, empty: T): T | undefined => (value === empty ? undefined : value);

/** The client options of a request's preconditions, retry policy and write options. */
function optionsOf(parts: {
  preconditions?: PreconditionsMessage;
  retryPolicy?: RetryPolicyMessage;
  options?: WriteOptionsMessage;
}): TransactOptions {
  const options: TransactOptions = {};
  const p = parts.preconditions;
  if (p !== undefined) {
    options.preconditions = {
      uid: orUndefined(p.uid, ""),
      resourceVersion: orUndefined(p.resourceVersion, ""),
      cel: orUndefined(p.cel, ""),
    };
  }
  const r = parts.retryPolicy;
  if (r !== undefined) {
    options.retryPolicy = {
      maxAttempts: orUndefined(r.maxAttempts, 0),
      requeue: r.requeue,
      initialBackoffMs: r.initialBackoff && durationMs(r.initialBackoff),
      maxBackoffMs: r.maxBackoff && durationMs(r.maxBackoff),
    };
  }
  const o = parts.options;
  if (o !== undefined) {
    options.fieldManager = orUndefined(o.fieldManager, "");
    options.dryRun = o.dryRun;
    options.createIfMissing = orUndefined(o.createIfMissingJson, "");
    options.idempotencyKey = orUndefined(o.idempotencyKey, "");
    options.writeAlone = o.writeAlone;
    if (o.fence !== undefined) {
      options.fence = { leaseNamespace: o.fence.leaseNamespace, leaseName: o.fence.leaseName, epoch: o.fence.epoch };
    }
  }
  return options;
}

const refOf = (target: ObjectRefMessage | undefined) => ({
  apiVersion: target?.apiVersion ?? "",
  kind: target?.kind ?? "",
  namespace: target?.namespace ?? "",
  name: target?.name ?? "",
});

/** What a step answered: a write's result or a get's. */
type Answer = Result | GetResult;

/**
 * A step through the client. A get whose minimum is what the step before answered
 * passes that answer as `atLeast`, as a controller does after its own write.
 */
async function runStep(step: Step, before: Answer | undefined): Promise<Answer> {
  switch (step.call) {
    case "get": {
      const req = fromJson(GetRequestSchema, step.request!);
      const min = req.minResourceVersion;
      const options: GetOptions =
        min === "" ? {} : before?.resourceVersion === min ? { atLeast: before } : { minResourceVersion: min };
      return client.get(refOf(req.target), options);
    }
    case "update": {
      const req = fromJson(UpdateWithRetryRequestSchema, step.request!);
      return client.update(refOf(req.target), mutationOf(req.mutation)!, optionsOf(req));
    }
    case "patch_status": {
      const req = fromJson(PatchStatusRequestSchema, step.request!);
      return client.patchStatus(refOf(req.target), mutationOf(req.mutation)!, optionsOf(req));
    }
    case "transact": {
      const begin = fromJson(TransactBeginSchema, step.begin!);
      const tx = client.beginTransaction(refOf(begin.target), { ...optionsOf(begin), status: begin.status });
      const proposals = [...(step.proposals ?? [])];
      for (;;) {
        const event = await tx.next();
        if (event.result !== undefined) {
          return event.result;
        }
        const entry = proposals.shift();
        assert.ok(entry !== undefined, "the sidecar sent a fresh object after the last proposal");
        const proposal = fromJson(TransactProposalSchema, entry);
        const setsAttempt = typeof entry === "object" && entry !== null && "attempt" in entry;
        const change = proposal.change;
        let value: Proposal;
        switch (change.case) {
          case "objectJson":
            value = JSON.parse(change.value) as Record<string, unknown>;
            break;
          case "mutation":
            value = mutationOf(change.value)!;
            break;
          case "abort":
            value = abort(change.value.reason);
            break;
          default:
            throw new Error("a proposal without a change");
        }
        tx.propose(setsAttempt ? proposal.attempt : event.fresh.attempt, value);
        if (proposals.length === 0) {
          tx.close();
        }
      }
    }
  }
}

function check(step: Step, outcome: Answer | SafewriteError): void {
  const want = step.expect;
  if (want.code !== undefined) {
    assert.ok(outcome instanceof SafewriteError, `want ${want.code}, got success ${JSON.stringify(outcome)}`);
    const err = outcome;
    assert.equal(GrpcStatus[err.code], want.code, `code (message: ${err.message})`);
    if (want.reason !== undefined) {
      assert.equal(err.reason, want.reason, "ErrorInfo.reason");
      assert.equal(err.domain, "safewrite.dev", "ErrorInfo.domain");
    }
    if (want.write_failure_reason !== undefined) {
      assert.equal(ReasonSchema.value[err.failureReason]?.name, want.write_failure_reason, "WriteFailure.reason");
    }
    if (want.field_violations !== undefined) {
      assert.deepEqual(
        err.fieldViolations.map((v) => v.field),
        want.field_violations,
        "BadRequest fields",
      );
    }
    if (want.current_object !== undefined) {
      assertSubset(want.current_object, err.currentObject, "current_object");
    }
    return;
  }
  if (outcome instanceof SafewriteError) {
    assert.fail(`want ${want.outcome ?? "success"}, got ${String(outcome)}`);
  }
  if (want.object !== undefined) {
    assertSubset(want.object, outcome.object);
  }
  if (step.call === "get") {
    assert.ok(!("outcome" in outcome), "a get answers no outcome");
    assert.equal(want.outcome, undefined, "the case expects an outcome of a get");
    assert.equal(typeof outcome.resourceVersion, "string");
    assert.equal(outcome.resourceVersion, outcome.object.metadata.resourceVersion, "resource_version is the object's");
    if (want.remembered !== undefined) {
      assert.equal(outcome.remembered, want.remembered, "remembered");
    }
    return;
  }
  assert.ok("outcome" in outcome, "a write answers an outcome");
  assert.equal(OutcomeSchema.value[outcome.outcome]?.name, want.outcome, "outcome");
  assert.equal(outcome.gone, outcome.outcome === Outcome.GONE, "gone says whether the outcome is GONE");
  if (want.already_applied !== undefined) {
    assert.equal(outcome.alreadyApplied, want.already_applied, "already_applied");
  }
}

/**
 * The error of a grpc-js call failing as the sidecar fails it: the code, and in the
 * grpc-status-details-bin trailer a google.rpc.Status with ErrorInfo and WriteFailure
 * (none for REASON_UNSPECIFIED: a failure without safewrite details).
 */
function serviceError(code: GrpcStatus, reason: Reason): ServiceError {
  const metadata = new Metadata();
  if (reason !== Reason.UNSPECIFIED) {
    const name = ReasonSchema.value[reason]!.name.replace(/^REASON_/, "");
    const status = create(StatusSchema, {
      code,
      message: "advice row",
      details: [
        anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { reason: name, domain: "safewrite.dev" })),
        anyPack(WriteFailureSchema, create(WriteFailureSchema, { reason })),
      ],
    });
    metadata.set("grpc-status-details-bin", Buffer.from(toBinary(StatusSchema, status)));
  }
  return Object.assign(new Error(`${code} ${GrpcStatus[code]}: advice row`), { code, details: "advice row", metadata });
}

describe("retry advice", () => {
  it("has a row for every Reason value this client knows", () => {
    const covered = new Set(adviceRows.map((row) => row.reason));
    const missing = ReasonSchema.values.filter((value) => !covered.has(value.name)).map((value) => value.name);
    assert.deepEqual(missing, [], "Reason values without a row in the advice table");
  });

  let passed = 0;
  after(() => matrix.push(`${passed === adviceRows.length ? "pass" : "FAIL"}  retry advice: ${passed} of ${adviceRows.length} rows`));
  for (const row of adviceRows) {
    it(`${row.reason} with ${row.code}: retryable ${row.retryable}, with a key ${row.retryable_with_key}`, () => {
      const reason = ReasonSchema.values.find((value) => value.name === row.reason);
      assert.ok(reason !== undefined, `${row.reason} is not a Reason value of this client`);
      const code = GrpcStatus[row.code as keyof typeof GrpcStatus];
      assert.ok(code !== undefined, `${row.code} is not a gRPC code`);
      const err = serviceError(code, reason.number as Reason);
      const without = fromServiceError(err, false);
      assert.equal(without.code, code, "code");
      assert.equal(without.failureReason, reason.number, "WriteFailure.reason");
      assert.equal(without.retryable, row.retryable, "retryable without an idempotency key");
      assert.equal(fromServiceError(err, true).retryable, row.retryable_with_key, "retryable with an idempotency key");
      passed++;
    });
  }
});

describe("conformance", () => {
  assert.ok(cases.length > 0, `no cases in ${casesPath}`);
  cases.forEach((c, n) => {
    it(c.name, async () => {
      const vars: Record<string, string | undefined> = {
        $NS: namespace(),
        $NAME: `conf-ts-${n}-${randomBytes(3).toString("hex")}`,
      };
      let passed = false;
      let before: Answer | undefined;
      try {
        for (const [i, raw] of c.steps.entries()) {
          const step = substitute(raw as unknown as JsonValue, vars) as unknown as Step;
          const outcome = await runStep(step, before).catch((err: unknown) => {
            if (err instanceof SafewriteError) {
              return err;
            }
            throw err;
          });
          try {
            check(step, outcome);
          } catch (err) {
            throw new Error(`step ${i + 1} (${step.call}): ${(err as Error).message}`, { cause: err });
          }
          before = outcome instanceof SafewriteError ? undefined : outcome;
          vars["$RV"] = before?.resourceVersion;
        }
        passed = true;
      } finally {
        matrix.push(`${passed ? "pass" : "FAIL"}  ${c.name}`);
      }
    });
  });
});

/**
 * What the sidecar says it knows, asked by the runner itself (not through the client):
 * its version and every RPC, field and enum value it knows; undefined for a sidecar
 * older than 0.2.0, which answers UNIMPLEMENTED and knows nothing with a since option.
 */
async function sidecarCapabilities(): Promise<{ version: string; knows: Set<string> } | undefined> {
  const grpc = new GrpcClient(harness("SAFEWRITE_ADDRESS"), credentials.createInsecure());
  try {
    return await new Promise((resolve, reject) => {
      grpc.makeUnaryRequest(
        "/safewrite.v1.WriterService/Capabilities",
        () => Buffer.from(toBinary(CapabilitiesRequestSchema, create(CapabilitiesRequestSchema))),
        (bytes: Buffer) => fromBinary(CapabilitiesResponseSchema, bytes),
        {},
        new Metadata(),
        { deadline: Date.now() + 10_000 },
        (err, answer) => {
          if (err?.code === GrpcStatus.UNIMPLEMENTED) {
            resolve(undefined);
          } else if (err || answer === undefined) {
            reject(err ?? new Error("Capabilities answered no message"));
          } else {
            resolve({ version: answer.version, knows: new Set([...answer.methods, ...answer.fields, ...answer.enumValues]) });
          }
        },
      );
    });
  } finally {
    grpc.close();
  }
}

/** A skew case's step through the client. */
function runSkewStep(c: SkewCase): Promise<Result | DeleteResult> {
  switch (c.call) {
    case "update": {
      const req = fromJson(UpdateWithRetryRequestSchema, c.request);
      return client.update(refOf(req.target), mutationOf(req.mutation)!, optionsOf(req));
    }
    case "delete": {
      const req = fromJson(DeleteRequestSchema, c.request);
      const { preconditions, retryPolicy } = optionsOf(req);
      return client.delete(refOf(req.target), {
        preconditions,
        retryPolicy,
        // The numbers are the proto's.
        propagationPolicy: req.propagationPolicy as number,
        dryRun: req.dryRun,
        fence: req.fence && { leaseNamespace: req.fence.leaseNamespace, leaseName: req.fence.leaseName, epoch: req.fence.epoch },
      });
    }
  }
}

describe("skew", () => {
  assert.ok(skewCases.length > 0, `no skew cases in ${casesPath}`);
  let sidecar: Promise<{ version: string; knows: Set<string> } | undefined> | undefined;
  skewCases.forEach((c, n) => {
    it(c.name, async () => {
      let verdict = "FAIL";
      try {
        sidecar ??= sidecarCapabilities();
        const known = await sidecar;
        const has = known !== undefined && known.knows.has(c.feature);
        const vars = { $NS: namespace(), $NAME: `skew-ts-${n}-${randomBytes(3).toString("hex")}` };
        const step = { ...c, request: substitute(c.request, vars) };
        const outcome = await runSkewStep(step).catch((err: unknown) => {
          if (err instanceof SafewriteError) {
            return err;
          }
          throw err;
        });
        if (!has) {
          assert.ok(outcome instanceof SafewriteError, `want the client's refusal, got success ${JSON.stringify(outcome)}`);
          assert.equal(GrpcStatus[outcome.code], "FAILED_PRECONDITION", `code (message: ${outcome.message})`);
          assert.equal(outcome.reason, "UNKNOWN_FIELD", "ErrorInfo.reason");
          assert.equal(outcome.domain, "safewrite.dev", "ErrorInfo.domain");
          assert.equal(outcome.failureReason, Reason.UNKNOWN_FIELD, "WriteFailure.reason");
          assert.equal(outcome.errorMetadata["refused_by"], "client", "refused by the client, before sending");
          const version = known === undefined ? "older than 0.2.0" : known.version;
          for (const part of [c.feature, version, c.since]) {
            assert.ok(outcome.message.includes(part), `the message names ${part}: ${outcome.message}`);
          }
          verdict = `pass (refused: the sidecar ${known === undefined ? "is older than 0.2.0" : `${known.version} lacks it`})`;
          return;
        }
        const want = c.expect_when_present;
        if (want.code !== undefined || c.call === "update") {
          check({ call: "update", expect: want }, outcome as Result | SafewriteError);
        } else {
          assert.ok(!(outcome instanceof SafewriteError), `want ${want.outcome}, got ${String(outcome)}`);
          assert.equal(DeleteOutcomeSchema.value[(outcome as DeleteResult).outcome]?.name, want.outcome, "outcome");
        }
        verdict = `pass (sent: the sidecar ${known.version} has it)`;
      } finally {
        matrix.push(verdict === "FAIL" ? `FAIL  skew ${c.name}` : `pass  skew ${c.name} ${verdict.replace(/^pass /, "")}`);
      }
    });
  });
});
