// The response bodies of a batch output line, as OpenAI's official Node SDK types them (the SDK is
// generated from OpenAI's OpenAPI spec). oracle.mjs turns these into JSON Schema.
import type { ChatCompletion } from 'openai/resources/chat/completions/completions';
import type { Completion } from 'openai/resources/completions';
import type { Response } from 'openai/resources/responses/responses';
import type { ErrorObject } from 'openai/resources/shared';

export type ChatCompletionBody = ChatCompletion;
export type CompletionBody = Completion;
export type ResponseBody = Response;
// A request OpenAI rejects: HTTP 400 with this body (openai/openai-openapi#302).
export interface ErrorBody {
  error: ErrorObject;
}
