/**
 * The package's shape, which no call exercises: its API is its own (nothing of the code
 * generated from the proto is exported, not even inside a type), its enums cover the
 * proto's, and its modules import each other without a cycle. Needs no sidecar.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { describe, it } from "node:test";

import type { DescEnum } from "@bufbuild/protobuf";
import * as client from "@safewrite/client";
import {
  DeleteOutcomeSchema,
  LeadStateSchema,
  NotLeadingReasonSchema,
  OutcomeSchema,
  PropagationPolicySchema,
  ReasonSchema,
  RetrySchema,
} from "#gen/safewrite/v1/writer_pb";
import ts from "typescript";

import { packageRoot } from "./support.js";

describe("the client's enums", () => {
  // Every enum of the proto the API speaks, with the client's own of the same name.
  const pairs: [DescEnum, Record<string, string | number>][] = [
    [OutcomeSchema, client.Outcome],
    [DeleteOutcomeSchema, client.DeleteOutcome],
    [PropagationPolicySchema, client.PropagationPolicy],
    [LeadStateSchema, client.LeadState],
    [NotLeadingReasonSchema, client.NotLeadingReason],
    [ReasonSchema, client.Reason],
    [RetrySchema, client.Retry],
  ];

  for (const [schema, own] of pairs) {
    it(`${schema.name}: every value of the proto's is the client's, under its name and number`, () => {
      for (const value of schema.values) {
        assert.equal(own[value.localName], value.number, `${value.name} (${value.number}) is ${schema.name}.${value.localName}`);
        assert.equal(own[value.number], value.localName, `${schema.name}[${value.number}] names ${value.localName}`);
      }
      const names = Object.keys(own).filter((key) => Number.isNaN(Number(key)));
      assert.deepEqual(
        names.sort(),
        schema.values.map((value) => value.localName).sort(),
        "and the client's has no value the proto lacks",
      );
    });
  }
});

/** The cycles of a module graph (each once, as the modules along it, the first repeated). */
function cycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const found: string[][] = [];
  const done = new Set<string>();
  const path: string[] = [];
  const visit = (node: string): void => {
    const at = path.indexOf(node);
    if (at >= 0) {
      found.push([...path.slice(at), node]);
      return;
    }
    if (done.has(node)) {
      return;
    }
    path.push(node);
    for (const next of graph.get(node) ?? []) {
      visit(next);
    }
    path.pop();
    done.add(node);
  };
  for (const node of [...graph.keys()].sort()) {
    visit(node);
  }
  return found;
}

describe("the modules", () => {
  it("finds a cycle where there is one", () => {
    const graph = new Map([
      ["a.ts", ["b.ts"]],
      ["b.ts", ["c.ts"]],
      ["c.ts", ["a.ts", "d.ts"]],
      ["d.ts", []],
    ]);
    assert.deepEqual(cycles(graph), [["a.ts", "b.ts", "c.ts", "a.ts"]]);
    assert.deepEqual(cycles(new Map([["a.ts", ["b.ts"]], ["b.ts", []]])), []);
  });

  it("of src/ import each other without a cycle, type-only imports included", () => {
    const src = `${packageRoot}src/`;
    const modules = readdirSync(src).filter((file) => file.endsWith(".ts"));
    assert.ok(modules.includes("client.ts") && modules.includes("errors.ts"), `the sources are in ${src}`);
    const graph = new Map<string, string[]>();
    for (const file of modules) {
      // Every import: static, `import type`, `export ... from`, dynamic.
      const { importedFiles } = ts.preProcessFile(readFileSync(`${src}${file}`, "utf8"), true, true);
      graph.set(
        file,
        importedFiles
          .map((imported) => imported.fileName)
          .filter((name) => /^\.\/[^/]+\.js$/.test(name)) // a module of src/ itself, not of src/gen/
          .map((name) => name.slice(2).replace(/\.js$/, ".ts")),
      );
    }
    assert.ok((graph.get("client.ts") ?? []).includes("errors.ts"), "the imports are read");
    assert.deepEqual(cycles(graph).map((cycle) => cycle.join(" -> ")), []);
  });
});

/** Every module compiled from src/gen/, loaded. */
async function generatedModules(): Promise<Record<string, unknown>[]> {
  const gen = `${packageRoot}dist/gen/`;
  const files = readdirSync(gen, { recursive: true, encoding: "utf8" }).filter((file) => file.endsWith(".js"));
  assert.ok(files.length >= 3, `the generated code is built in ${gen}`);
  return Promise.all(files.map((file) => import(`${gen}${file}`) as Promise<Record<string, unknown>>));
}

describe("the package's API", () => {
  it("exports no value of the generated code", async () => {
    const generated = new Set<unknown>();
    for (const module of await generatedModules()) {
      for (const value of Object.values(module)) {
        generated.add(value);
      }
    }
    assert.ok(generated.size > 50, "the generated code's exports are loaded");
    const leaked = Object.entries(client)
      .filter(([, value]) => generated.has(value))
      .map(([name]) => name);
    assert.deepEqual(leaked, []);
  });

  it("names no type of the generated code: no export's type, nor any type it reaches, is declared in dist/gen", () => {
    const dist = `${packageRoot}dist/`;
    const program = ts.createProgram([`${dist}index.d.ts`], { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, noEmit: true, skipLibCheck: true, types: [] });
    const checker = program.getTypeChecker();
    const index = program.getSourceFile(`${dist}index.d.ts`);
    assert.ok(index !== undefined, "dist/index.d.ts is built");
    const own = (decl: ts.Declaration): boolean => decl.getSourceFile().fileName.startsWith(dist);
    const generated = (symbol: ts.Symbol | undefined): boolean =>
      (symbol?.declarations ?? []).some((decl) => decl.getSourceFile().fileName.startsWith(`${dist}gen/`));
    const leaks = new Set<string>();
    const seen = new Set<ts.Type>();

    const walkSignature = (signature: ts.Signature, where: string): void => {
      for (const parameter of signature.getParameters()) {
        walk(checker.getTypeOfSymbol(parameter), `${where}(${parameter.name})`);
      }
      for (const parameter of signature.getTypeParameters() ?? []) {
        const constraint = parameter.getConstraint();
        if (constraint !== undefined) {
          walk(constraint, `${where}<${parameter.symbol.name}>`);
        }
      }
      walk(signature.getReturnType(), `${where}()`);
    };

    // The type, what it is made of, and, for a type of this package's, its members.
    const walk = (type: ts.Type, where: string): void => {
      if (seen.has(type)) {
        return;
      }
      seen.add(type);
      if (generated(type.getSymbol()) || generated(type.aliasSymbol)) {
        leaks.add(`${where}: ${checker.typeToString(type)}`);
        return;
      }
      for (const argument of type.aliasTypeArguments ?? []) {
        walk(argument, `${where}<>`);
      }
      if (type.isUnionOrIntersection()) {
        type.types.forEach((part) => walk(part, where));
      }
      if (type.flags & ts.TypeFlags.Object && (type as ts.ObjectType).objectFlags & ts.ObjectFlags.Reference) {
        checker.getTypeArguments(type as ts.TypeReference).forEach((argument) => walk(argument, `${where}<>`));
      }
      const declarations = type.getSymbol()?.declarations ?? [];
      if (!(type.flags & ts.TypeFlags.Object) || !declarations.some(own)) {
        return; // a primitive, or a type of another package's (grpc-js, client-node, the lib)
      }
      for (const property of checker.getPropertiesOfType(type)) {
        walk(checker.getTypeOfSymbol(property), `${where}.${property.name}`);
      }
      for (const kind of [ts.SignatureKind.Call, ts.SignatureKind.Construct]) {
        checker.getSignaturesOfType(type, kind).forEach((signature) => walkSignature(signature, where));
      }
      for (const info of checker.getIndexInfosOfType(type)) {
        walk(info.type, `${where}[]`);
      }
      for (const base of type.isClassOrInterface() ? checker.getBaseTypes(type) : []) {
        walk(base, where);
      }
    };

    const exports = checker.getExportsOfModule(checker.getSymbolAtLocation(index)!);
    assert.ok(exports.length > 50, "the exports are read");
    for (const exported of exports) {
      const symbol = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
      if (generated(symbol)) {
        leaks.add(`${exported.name}: exported from the generated code`);
        continue;
      }
      if (symbol.flags & (ts.SymbolFlags.Interface | ts.SymbolFlags.TypeAlias | ts.SymbolFlags.Class | ts.SymbolFlags.Enum)) {
        walk(checker.getDeclaredTypeOfSymbol(symbol), exported.name); // an interface, alias, class's instances
      }
      if (symbol.flags & ts.SymbolFlags.Value) {
        walk(checker.getTypeOfSymbol(symbol), exported.name); // a function, constant, class's statics, enum
      }
    }
    assert.deepEqual([...leaks].sort(), []);
  });
});
