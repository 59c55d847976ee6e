/**
 * The shared conformance cases (../conformance/cases.json, see its README) through this
 * client's public API, one subtest per case. The per-case matrix is also written to
 * build/conformance-matrix.txt for test.sh to print.
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { after, describe, it } from "node:test";

import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { durationMs } from "@bufbuild/protobuf/wkt";
import {
  abort,
  apply,
  cel,
  GrpcStatus,
  jsonPatch,
  mergePatch,
  OutcomeSchema,
  ReasonSchema,
  SafewriteError,
  type Mutation,
  type Proposal,
  type Result,
  type TransactOptions,
} from "@safewrite/client";
// The request messages, to read the cases' proto3 JSON exactly as the proto defines it.
import {
  PatchStatusRequestSchema,
  TransactBeginSchema,
  TransactProposalSchema,
  UpdateWithRetryRequestSchema,
  type Mutation as MutationMessage,
  type ObjectRef as ObjectRefMessage,
  type Preconditions as PreconditionsMessage,
  type RetryPolicy as RetryPolicyMessage,
  type WriteOptions as WriteOptionsMessage,
} from "@safewrite/client/v1";

import { adminClient, namespace, packageRoot } from "./support.js";

interface Expect {
  outcome?: string;
  already_applied?: boolean;
  object?: JsonValue;
  code?: string;
  reason?: string;
  write_failure_reason?: string;
  field_violations?: string[];
  current_object?: JsonValue;
}
interface Step {
  call: "update" | "patch_status" | "transact";
  request?: JsonValue;
  begin?: JsonValue;
  proposals?: JsonValue[];
  expect: Expect;
}
interface Case {
  name: string;
  steps: Step[];
}

const casesPath = `${packageRoot}../conformance/cases.json`;
const cases = (JSON.parse(readFileSync(casesPath, "utf8")) as { cases: Case[] }).cases;
const client = adminClient();
const matrix: string[] = [];

after(() => {
  client.close();
  mkdirSync(`${packageRoot}build`, { recursive: true });
  writeFileSync(`${packageRoot}build/conformance-matrix.txt`, matrix.join("\n") + "\n");
});

/** Every string of `value` with $NS and $NAME replaced. */
function substitute(value: JsonValue, vars: Record<string, string>): JsonValue {
  if (typeof value === "string") {
    return value.replaceAll("$NS", vars["$NS"]!).replaceAll("$NAME", vars["$NAME"]!);
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
    default:
      return undefined;
  }
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
  }
  return options;
}

const refOf = (target: ObjectRefMessage | undefined) => ({
  apiVersion: target?.apiVersion ?? "",
  kind: target?.kind ?? "",
  namespace: target?.namespace ?? "",
  name: target?.name ?? "",
});

async function runStep(step: Step): Promise<Result> {
  switch (step.call) {
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

function check(step: Step, outcome: Result | SafewriteError): void {
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
    assert.fail(`want ${want.outcome}, got ${String(outcome)}`);
  }
  assert.equal(OutcomeSchema.value[outcome.outcome]?.name, want.outcome, "outcome");
  if (want.already_applied !== undefined) {
    assert.equal(outcome.alreadyApplied, want.already_applied, "already_applied");
  }
  if (want.object !== undefined) {
    assertSubset(want.object, outcome.object);
  }
}

describe("conformance", () => {
  assert.ok(cases.length > 0, `no cases in ${casesPath}`);
  cases.forEach((c, n) => {
    it(c.name, async () => {
      const vars = { $NS: namespace(), $NAME: `conf-ts-${n}-${randomBytes(3).toString("hex")}` };
      let passed = false;
      try {
        for (const [i, raw] of c.steps.entries()) {
          const step = substitute(raw as unknown as JsonValue, vars) as unknown as Step;
          const outcome = await runStep(step).catch((err: unknown) => {
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
        }
        passed = true;
      } finally {
        matrix.push(`${passed ? "pass" : "FAIL"}  ${c.name}`);
      }
    });
  });
});
