/**
 * The README's examples, every ```ts block, type-checked and run as written against the
 * real sidecar (the client reads SAFEWRITE_ADDRESS; the examples use the "default"
 * namespace, which every API server has) and, for client-node's reads, the real API
 * server (KUBECONFIG is the harness's admin kubeconfig), and its Install section followed
 * in a new project by test/install.sh.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { promisify } from "node:util";
import { describe, it } from "node:test";

import ts from "typescript";

import { harness, packageRoot } from "./support.js";

const readme = readFileSync(`${packageRoot}README.md`, "utf8");
const blocks = [...readme.matchAll(/```ts\n(.*?)```/gs)].map((m) => m[1]!);
const dir = `${packageRoot}build/readme`;
const firstOutput = /^(CREATED|UPDATED) \d+ (UPDATED|UNCHANGED)$/;
/** What the examples that show an outcome print, found by a call they make. */
const outputs: { call: string; output: RegExp }[] = [
  // One replica alone: it leads, counts, and its campaign ends by its signal.
  { call: "client.lead(", output: /^leading under epoch [1-9]\d*\n(?:deposed \(NOT_LEADER\): nothing written\n)?counted [1-9]\d*$/ },
  { call: "client.delete(", output: /^kept: Running\nDELETED true$/ },
];

/**
 * Writes the blocks as modules inside the package, so "@safewrite/client" resolves to it:
 * as written (.mts), or with their types stripped, to run (.mjs).
 */
function write(ext: "mts" | "mjs"): string[] {
  mkdirSync(dir, { recursive: true });
  return blocks.map((code, i) => {
    const file = `${dir}/example-${i + 1}.${ext}`;
    const options = { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } };
    writeFileSync(file, ext === "mts" ? code : ts.transpileModule(code, options).outputText);
    return file;
  });
}

describe("README", () => {
  it("starts with a ten-line example", () => {
    const start = readme.indexOf("```ts\n");
    assert.ok(start >= 0 && start < 40, "the first ```ts block opens the README (after its title)");
    assert.ok(blocks.length >= 4, "the README has its examples");
    assert.ok(blocks[0]!.trimEnd().split("\n").length <= 10, "the first example has at most ten lines");
    for (const { call } of outputs) {
      assert.ok(blocks.some((code) => code.includes(call)), `an example calls ${call}`);
    }
  });

  it("type-checks every example", () => {
    const config = ts.getParsedCommandLineOfConfigFile(`${packageRoot}tsconfig.json`, {}, {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => assert.fail(ts.flattenDiagnosticMessageText(d.messageText, "\n")),
    })!;
    const files = write("mts");
    const program = ts.createProgram(files, {
      ...config.options,
      noEmit: true,
      incremental: false,
      tsBuildInfoFile: undefined,
      rootDir: packageRoot,
      noUnusedLocals: false,
    });
    const diagnostics = ts.getPreEmitDiagnostics(program).map(
      (d) => `${d.file?.fileName ?? ""}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`,
    );
    assert.deepEqual(diagnostics, []);
  });

  blocks.forEach((_, i) => {
    it(`example ${i + 1} runs as written (compiled)`, async () => {
      harness("SAFEWRITE_ADDRESS");
      const file = write("mjs")[i]!;
      const env = { ...process.env, KUBECONFIG: `${dirname(harness("SAFEWRITE_CP_ENV"))}/admin.kubeconfig` };
      const { stdout } = await promisify(execFile)(process.execPath, [file], { cwd: packageRoot, env, timeout: 60_000 });
      assert.ok(stdout.trim() !== "", "the example printed nothing");
      if (i === 0) {
        assert.match(stdout.trim(), firstOutput);
      }
      for (const { call, output } of outputs) {
        if (blocks[i]!.includes(call)) {
          assert.match(stdout.trim(), output);
        }
      }
    });
  });

  it("installs into a new project (npm init, the packed package) as its Install section says, where the first example type-checks and runs", async () => {
    harness("SAFEWRITE_ADDRESS");
    const { stdout } = await promisify(execFile)("bash", [`${packageRoot}test/install.sh`], {
      cwd: packageRoot,
      timeout: 120_000,
    });
    assert.match(stdout.trim().split("\n").at(-1) ?? "", firstOutput, `the example's output, last:\n${stdout}`);
  });
});
