/**
 * @polyloop/ai
 *
 * @since 0.1.0
 */

/**
 * An adapter from `@effect/ai`'s `LanguageModel` to polyloop's `ModelClient`, so every `@effect/ai` provider (OpenAI, Anthropic, Google, Amazon Bedrock, OpenRouter, …) can drive a polyloop agent: polyloop messages become a `Prompt`, tool definitions become `@effect/ai` tools whose parameter schema is the definition's JSON Schema verbatim, and the response becomes a `ModelReply` (text, tool calls with their raw arguments, usage, finish reason).
 */
export * as AiModelClient from "./AiModelClient.js"

/**
 * A `ModelClient` for Anthropic's Messages API (`POST <baseUrl>/v1/messages`) through `@effect/ai-anthropic` (`AnthropicClient` + `AnthropicLanguageModel`) and `AiModelClient`, configured in code (`layer`) or from `Config` (`layerConfig`: `POLYLOOP_MODEL`, `POLYLOOP_API_KEY`, `POLYLOOP_BASE_URL`, `POLYLOOP_TIMEOUT`).
 */
export * as Anthropic from "./Anthropic.js"

/**
 * A `ModelClient` for any server that speaks OpenAI's Chat Completions API — OpenAI itself, vLLM, Ollama, LM Studio, OpenRouter, llama.cpp — on `@effect/platform`'s `HttpClient`, configured in code (`layer`) or from `Config` (`layerConfig`: `POLYLOOP_MODEL`, `POLYLOOP_BASE_URL`, `POLYLOOP_API_KEY`, `POLYLOOP_TIMEOUT`, and for Azure and organisations `POLYLOOP_API_KEY_HEADER`, `POLYLOOP_API_VERSION`, `POLYLOOP_ORGANIZATION`, `POLYLOOP_PROJECT`, `POLYLOOP_MAX_TOKENS_PARAMETER`).
 */
export * as OpenAiCompatible from "./OpenAiCompatible.js"

/**
 * A `ModelClient` for OpenAI's Responses API (`POST <baseUrl>/responses`) through `@effect/ai-openai` (`OpenAiClient` + `OpenAiLanguageModel`) and `AiModelClient`: the `@effect/ai` provider route, with the request's `ModelSettings` applied per call (`model`, `temperature`, `topP`, `maxOutputTokens`; `extra` merged verbatim into the Responses request). `seed` and `stop` do not exist in the Responses API: a request that sets them fails with a non-retryable `ModelError` rather than running with them ignored.
 */
export * as OpenAiResponses from "./OpenAiResponses.js"

/**
 * Real token counts for the history policies' token budgets (design 0300): OpenAI's encodings (`o200k_base`, `cl100k_base`) from js-tiktoken as a `TokenCounter` layer, linear in the text.
 */
export * as Tokenizers from "./Tokenizers.js"
