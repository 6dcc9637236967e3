#!/usr/bin/env node
// Validates Kubernetes objects (the chart's `helm template` output) against the schemas of
// the API they belong to: Kubernetes itself (kubernetes-models), KEDA, Strimzi,
// CloudNativePG, the Prometheus Operator and the Gateway API (@kubernetes-models/*,
// generated from each project's OpenAPI/CRD schemas).
//
// Two checks per object, both must pass:
//   1. schema: the model's JSON Schema validator (types, required fields, enums, formats);
//   2. fields: the model's TypeScript type, with the object as a literal, so any field the
//      API does not have is reported (what `kubectl apply --validate=strict` refuses).
// An object whose apiVersion/kind no package models is an error too.
//
//   node validate.mjs [--json] [FILE ...]    (no FILE: standard input; `-` is standard input)
//
// Exit 0: every object valid; 1: some object is not; 2: usage or YAML errors.
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import ts from "typescript";
import { parseAllDocuments } from "yaml";

import * as kubernetes from "kubernetes-models";
import * as keda from "@kubernetes-models/keda";
import * as strimzi from "@kubernetes-models/strimzi-kafka-operator";
import * as cloudnativepg from "@kubernetes-models/cloudnative-pg";
import * as prometheusOperator from "@kubernetes-models/prometheus-operator";
import * as gatewayApi from "@kubernetes-models/gateway-api";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const PACKAGES = {
  "kubernetes-models": kubernetes,
  "@kubernetes-models/keda": keda,
  "@kubernetes-models/strimzi-kafka-operator": strimzi,
  "@kubernetes-models/cloudnative-pg": cloudnativepg,
  "@kubernetes-models/prometheus-operator": prometheusOperator,
  "@kubernetes-models/gateway-api": gatewayApi,
};

/** "apiVersion/kind" -> {model, pkg}: every model class the packages export. */
function modelIndex() {
  const found = new Map();
  const walk = (ns, pkg, depth) => {
    if (ns == null || depth > 4) return;
    for (const value of Object.values(ns)) {
      if (typeof value === "function" && value.apiVersion && value.kind) {
        const key = `${value.apiVersion}/${value.kind}`;
        if (!found.has(key)) found.set(key, { model: value, pkg });
      } else if (typeof value === "object") {
        walk(value, pkg, depth + 1);
      }
    }
  };
  for (const [pkg, ns] of Object.entries(PACKAGES)) walk(ns, pkg, 0);
  return found;
}

function describe(obj) {
  return `${obj?.kind ?? "?"} ${obj?.metadata?.name ?? "?"}`;
}

/** Check 1: the model's JSON Schema. */
function schemaErrors(entry, obj) {
  try {
    new entry.model(obj).validate();
    return [];
  } catch (err) {
    const details = err.errors ?? [];
    if (!details.length) return [String(err.message ?? err)];
    return details.map((e) => `${e.instancePath || "/"} ${e.message ?? e.keyword}`);
  }
}

/** Check 2: every object as a literal of its model's type; errors by object index. */
function fieldErrors(checked) {
  const file = path.join(HERE, "__rendered_objects__.mts");
  const lines = [];
  const starts = [];
  checked.forEach(({ entry, obj }, i) => {
    const modulePath = `${entry.pkg}/${obj.apiVersion}/${obj.kind}`;
    lines.push(`import type { I${obj.kind} as T${i} } from ${JSON.stringify(modulePath)};`);
  });
  checked.forEach(({ obj }, i) => {
    starts.push(lines.length);
    const body = JSON.stringify(obj, null, 1).split("\n");
    lines.push(`export const o${i}: T${i} = ${body[0]}`, ...body.slice(1));
    lines[lines.length - 1] += ";";
  });
  const source = lines.join("\n") + "\n";
  const options = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, ...rest) =>
    path.resolve(name) === file ? ts.createSourceFile(name, source, version, true) : getSourceFile(name, version, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => path.resolve(name) === file || fileExists(name);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => (path.resolve(name) === file ? source : readFile(name));
  const program = ts.createProgram([file], options, host);
  const byObject = new Map();
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const text = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    let index = -1;
    let where = "";
    if (d.file && path.resolve(d.file.fileName) === file && d.start !== undefined) {
      const { line } = d.file.getLineAndCharacterOfPosition(d.start);
      for (let i = starts.length - 1; i >= 0; i--) {
        if (line >= starts[i]) {
          index = i;
          break;
        }
      }
      where = ` (near: ${source.split("\n")[line].trim().slice(0, 120)})`;
    }
    if (!byObject.has(index)) byObject.set(index, []);
    byObject.get(index).push(text.split("\n")[0] + where);
  }
  return byObject;
}

function main(argv) {
  const asJson = argv.includes("--json");
  const files = argv.filter((a) => a !== "--json");
  const texts = files.length ? files.map((f) => readFileSync(f === "-" ? 0 : f, "utf8")) : [readFileSync(0, "utf8")];
  const objects = [];
  for (const text of texts) {
    for (const doc of parseAllDocuments(text)) {
      if (doc.errors.length) {
        console.error(`YAML error: ${doc.errors[0].message}`);
        return 2;
      }
      const obj = doc.toJS();
      if (obj != null) objects.push(obj);
    }
  }
  const index = modelIndex();
  const errors = [];
  const checked = [];
  const kinds = {};
  objects.forEach((obj, i) => {
    const key = `${obj.apiVersion}/${obj.kind}`;
    kinds[key] = (kinds[key] ?? 0) + 1;
    const entry = index.get(key);
    if (!entry) {
      errors.push({ index: i, object: describe(obj), check: "model", message: `no schema for ${key}` });
      return;
    }
    for (const message of schemaErrors(entry, obj)) {
      errors.push({ index: i, object: describe(obj), check: "schema", message });
    }
    checked.push({ entry, obj, i });
  });
  if (checked.length) {
    for (const [n, messages] of fieldErrors(checked)) {
      const original = n >= 0 ? checked[n].i : -1;
      for (const message of messages) {
        errors.push({ index: original, object: original >= 0 ? describe(objects[original]) : "-", check: "fields", message });
      }
    }
  }
  if (asJson) {
    console.log(JSON.stringify({ objects: objects.length, kinds, errors }, null, 1));
  } else {
    for (const e of errors) console.log(`${e.object}: [${e.check}] ${e.message}`);
    const summary = Object.entries(kinds)
      .map(([k, n]) => `${n} ${k}`)
      .join(", ");
    console.log(`${objects.length} object(s), ${errors.length} error(s): ${summary}`);
  }
  return errors.length ? 1 : 0;
}

process.exitCode = main(process.argv.slice(2));
