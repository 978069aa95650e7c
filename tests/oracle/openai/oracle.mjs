// Checks batch output lines against OpenAI's own types. Input (stdin): {"lines": [{"url":
// "/v1/chat/completions" | "/v1/completions" | "/v1/responses", "line": <the output line as
// JSON>}, ...]}.
// Output (stdout): {"definitions": <names of the generated schemas>, "violations": [{"index": i,
// "errors": [<Ajv errors as "path: message">]}, ...]}.
//
// The response bodies' schemas are generated, at each run, from the official Node SDK's types
// (`openai`, pinned in package-lock.json; the SDK is generated from OpenAI's OpenAPI spec) by
// ts-json-schema-generator, strictly: a required property is one the SDK does not mark optional,
// and no property the SDK does not declare is allowed. The line around them is the spec's
// BatchRequestOutput (the SDK has no type for it), stricter than the spec, which requires nothing:
// every field present, custom_id a string, and a response's body a ChatCompletion, a Completion or
// a Response (as the line's url says) when status_code is 200, an error object when it is 400 (a request
// OpenAI rejects: openai/openai-openapi#302).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createGenerator } from 'ts-json-schema-generator';
import Ajv from 'ajv';

const generated = createGenerator({
  path: fileURLToPath(new URL('./types.ts', import.meta.url)),
  type: '*',
  skipTypeCheck: true,
  additionalProperties: false,
  expose: 'export',
  topRef: true,
  jsDoc: 'none',
}).createSchema('*');
const defs = generated.definitions;
for (const need of ['ChatCompletion', 'Completion', 'Response', 'ErrorObject', 'ErrorBody'])
  if (!defs[need]) throw new Error(`the SDK's types gave no ${need}`);
// A Response as the API sends it: the SDK's Response less `output_text`, which the SDK adds itself
// after parsing (its "SDK-only convenience property" joining the output_text parts); the API's
// JSON has no such field, and an output line carrying one fails here.
{
  const { output_text, ...properties } = defs.Response.properties;
  if (!output_text) throw new Error("the SDK's Response no longer declares output_text");
  defs.ResponseAsSent = {
    ...defs.Response,
    properties,
    required: defs.Response.required.filter((k) => k !== 'output_text'),
  };
}

function lineSchema(body) {
  return {
    $schema: 'http://json-schema.org/draft-07/schema#',
    definitions: defs,
    type: 'object',
    properties: {
      id: { type: 'string' },
      custom_id: { type: 'string' },
      response: {
        anyOf: [
          { type: 'null' },
          {
            type: 'object',
            properties: {
              status_code: { type: 'integer' },
              request_id: { type: 'string' },
              body: {},
            },
            required: ['status_code', 'request_id', 'body'],
            additionalProperties: false,
            if: { properties: { status_code: { const: 200 } } },
            then: { properties: { body: { $ref: `#/definitions/${body}` } } },
            else: {
              properties: { status_code: { const: 400 }, body: { $ref: '#/definitions/ErrorBody' } },
            },
          },
        ],
      },
      error: {
        anyOf: [
          { type: 'null' },
          {
            type: 'object',
            properties: { code: { type: 'string' }, message: { type: 'string' } },
            required: ['code', 'message'],
            additionalProperties: false,
          },
        ],
      },
    },
    required: ['id', 'custom_id', 'response', 'error'],
    additionalProperties: false,
  };
}

const ajv = new Ajv({ allErrors: true, strict: false });
const validators = {
  '/v1/chat/completions': ajv.compile(lineSchema('ChatCompletion')),
  '/v1/completions': ajv.compile(lineSchema('Completion')),
  '/v1/responses': ajv.compile(lineSchema('ResponseAsSent')),
};
const input = JSON.parse(readFileSync(0, 'utf8'));
const violations = [];
input.lines.forEach(({ url, line }, index) => {
  const validate = validators[url];
  if (!validate) {
    violations.push({ index, errors: [`no schema for url ${url}`] });
  } else if (!validate(line)) {
    violations.push({
      index,
      errors: validate.errors.map((e) => `${e.instancePath || '/'}: ${e.message} ${JSON.stringify(e.params)}`),
    });
  }
});
process.stdout.write(JSON.stringify({ definitions: Object.keys(defs), violations }));
