// The reference for tests/json_schema_diff_test.cpp: Ajv (pinned by package-lock.json), JSON
// Schema 2020-12 (ajv/dist/2020) unless the schema's $schema names draft-07 (then Ajv's default
// class, draft-07), with `strict: false` (keywords Ajv does not know are ignored, as the spec
// says) and no format assertions (ajv-formats is pinned beside it for the tests that will want
// them).
// Usage: node oracle.mjs <IN.json >OUT.json
//   IN: {"schema": {...}, "instances": ["JSON text", ...]}, or an array of those (one node start
//       for many schemas).
//   OUT: [{"valid": true|false} | {"error": "..."}, ...], one per instance (an error: the schema
//        does not compile, or the instance is not JSON); for an array IN, an array of those.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import Ajv from "ajv";

const options = { strict: false, validateFormats: false, allErrors: false };
const ajv2020 = new Ajv2020(options);
const ajv07 = new Ajv(options);

function isDraft07(schema) {
  return (
    schema !== null &&
    typeof schema === "object" &&
    typeof schema.$schema === "string" &&
    schema.$schema.includes("draft-07")
  );
}

function check(one) {
  let validate;
  try {
    validate = (isDraft07(one.schema) ? ajv07 : ajv2020).compile(one.schema);
  } catch (e) {
    const error = "schema: " + String(e && e.message ? e.message : e);
    return one.instances.map(() => ({ error }));
  }
  return one.instances.map((text) => {
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return { error: "instance: " + String(e && e.message ? e.message : e) };
    }
    return { valid: validate(value) === true };
  });
}

const input = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(Array.isArray(input) ? input.map(check) : check(input)));
