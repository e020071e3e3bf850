/**
 * An experiment's runs in Inspect's eval-log format (design 0320, decision 10): one log per
 * configuration, as the JSON file `inspect view` reads from a log directory (`version: 2`) —
 * the eval spec (task = the experiment, the configuration's model, the dataset's sample ids,
 * epochs), the results (each scorer's mean as `mean` and its clustered standard error as
 * `stderr`), the model usage, and one sample per (sample, epoch) with its messages rebuilt from
 * the run's log (system prompt, task, each reply with its tool calls, each observation), its
 * output and its scores. Timestamps come from the runs' records.
 *
 * @since 0.1.0
 */
import type { StoreError } from "@polyloop/core/Errors"
import { RunId } from "@polyloop/core/Ids"
import type * as ModelReply from "@polyloop/core/ModelReply"
import type * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { ExperimentNotFound } from "./Experiment.js"
import type * as ExperimentStore from "./ExperimentStore.js"
import * as Results from "./Results.js"

/** A JSON value. */
type Json = null | boolean | number | string | ReadonlyArray<Json> | { readonly [key: string]: Json }

const iso = (millis: number): string => new Date(millis).toISOString()

/** Inspect's stop reasons for a finish reason. */
const stopReasonOf = (reason: ModelReply.FinishReason | undefined): string =>
  reason === "stop" ? "stop" : reason === "length" ? "max_tokens" : reason === "tool-calls" ? "tool_calls" : reason === "content-filter" ? "content_filter" : "unknown"

const argumentsOf = (text: string): Json => {
  try {
    const parsed: unknown = JSON.parse(text)
    return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Json) : {}
  } catch {
    return {}
  }
}

const systemPromptOf = (log: RunLog.RunLog): string | undefined =>
  Option.match(log.started, {
    onNone: () => undefined,
    onSome: (started) => {
      const snapshot = started.snapshot as { readonly agent?: { readonly systemPrompt?: unknown } } | null
      const prompt = snapshot?.agent?.systemPrompt
      return typeof prompt === "string" ? prompt : undefined
    }
  })

/** The chat messages of a run: system prompt, task, then each step's reply and observations. */
export const messagesOf = (log: RunLog.RunLog): ReadonlyArray<Json> => {
  const messages: Array<Json> = []
  const system = systemPromptOf(log)
  if (system !== undefined) messages.push({ role: "system", content: system })
  if (Option.isSome(log.started)) messages.push({ role: "user", content: log.started.value.task })
  for (const replied of log.replies) {
    const reply = replied.reply
    messages.push({
      role: "assistant",
      content: reply.text,
      ...(reply.toolCalls.length === 0
        ? {}
        : { tool_calls: reply.toolCalls.map((call) => ({ id: call.id, function: call.name, arguments: argumentsOf(call.argumentsText), type: "function" })) })
    })
    for (const result of log.results) {
      if (result.step !== replied.step) continue
      const call = result.action._tag === "ToolCall" ? result.action : undefined
      messages.push(
        call === undefined
          ? { role: "user", content: result.outcome.observation }
          : { role: "tool", content: result.outcome.observation, tool_call_id: call.id, function: call.name }
      )
    }
  }
  return messages
}

/** One configuration's runs as an Inspect eval log (a JSON value; write it with `JSON.stringify`). */
export const evalLog = (
  experiment: string,
  configuration: string,
  options: Results.Options = {}
): Effect.Effect<Json, StoreError | ExperimentNotFound, ExperimentStore.ExperimentStore | RunLogStore.RunLogStore> =>
  Effect.gen(function*() {
    const loaded = yield* Results.load(experiment)
    const results = yield* Results.compute(experiment, options)
    const store = yield* RunLogStore.RunLogStore
    const outcomes = loaded.outcomes.filter((o) => o.configuration === configuration).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    const scoresByKey = new Map<string, Array<ExperimentStore.StoredScore>>()
    for (const s of loaded.scores) {
      const list = scoresByKey.get(s.key)
      if (list === undefined) scoresByKey.set(s.key, [s])
      else list.push(s)
    }
    let started = Number.POSITIVE_INFINITY
    let completed = 0
    let model = "unknown"
    let input = 0
    let output = 0
    const samples: Array<Json> = []
    for (const o of outcomes) {
      const log = yield* store.readLog(RunId.make(o.runId))
      const last = log.replies[log.replies.length - 1]?.reply
      if (Option.isSome(log.started)) {
        started = Math.min(started, log.started.value.startedAt)
        const snapshot = log.started.value.snapshot as { readonly agent?: { readonly modelSettings?: { readonly model?: unknown } } } | null
        const name = snapshot?.agent?.modelSettings?.model
        if (typeof name === "string") model = name
      }
      if (Option.isSome(log.finished)) completed = Math.max(completed, log.finished.value.finishedAt)
      input += o.result.usage.inputTokens
      output += o.result.usage.outputTokens
      const scores: Record<string, Json> = {}
      for (const s of scoresByKey.get(o.key) ?? []) {
        scores[s.scorer] = { value: s.score.value, answer: o.answer, ...(s.score.explanation === undefined ? {} : { explanation: s.score.explanation }) }
      }
      const sample = log.started.pipe(Option.map((st) => st.task), Option.getOrElse(() => ""))
      samples.push({
        id: o.sampleId,
        epoch: o.epoch,
        input: sample,
        target: o.target ?? "",
        messages: messagesOf(log),
        output: {
          model,
          choices: last === undefined ? [] : [{ message: { role: "assistant", content: last.text }, stop_reason: stopReasonOf(last.finishReason) }],
          usage: { input_tokens: o.result.usage.inputTokens, output_tokens: o.result.usage.outputTokens, total_tokens: o.result.usage.inputTokens + o.result.usage.outputTokens }
        },
        scores,
        metadata: { polyloop_run_id: o.runId, stop_reason: o.result.stopReason._tag, steps: o.result.steps },
        store: {},
        events: [],
        model_usage: {},
        attachments: {}
      })
    }
    const configurationResults = results.configurations.find((c) => c.configuration === configuration)
    const sampleIds = [...new Set(outcomes.map((o) => o.sampleId))]
    return {
      version: 2,
      status: configurationResults !== undefined && configurationResults.finished === configurationResults.planned ? "success" : "started",
      eval: {
        run_id: experiment,
        created: iso(Number.isFinite(started) ? started : 0),
        task: experiment,
        task_id: `${experiment}/${configuration}`,
        task_version: 0,
        task_attribs: {},
        task_args: {},
        dataset: { name: loaded.definition.dataset.source, samples: loaded.definition.dataset.samples, sample_ids: sampleIds, shuffled: false },
        model,
        model_args: {},
        config: { epochs: loaded.definition.epochs },
        packages: {},
        metadata: { polyloop_configuration: configuration, dataset_sha256: loaded.definition.dataset.hash }
      },
      plan: { name: "plan", steps: [{ solver: "polyloop", params: {} }], config: {} },
      results: {
        total_samples: configurationResults?.planned ?? 0,
        completed_samples: configurationResults?.finished ?? 0,
        scores: (configurationResults?.scores ?? []).map((s) => ({
          name: s.scorer,
          scorer: s.scorer,
          params: {},
          metrics: {
            mean: { name: "mean", value: s.mean, params: {} },
            ...(s.stderr === null ? {} : { stderr: { name: "stderr", value: s.stderr, params: {} } })
          }
        }))
      },
      stats: {
        started_at: iso(Number.isFinite(started) ? started : 0),
        completed_at: iso(completed),
        model_usage: { [model]: { input_tokens: input, output_tokens: output, total_tokens: input + output } }
      },
      samples
    }
  }).pipe(Effect.withSpan("Inspect.evalLog", { attributes: { "polyloop.experiment": experiment } }))
