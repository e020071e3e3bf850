/**
 * A scripted `ModelClient` for tests, examples and benchmarks: replies from a list (one per
 * step) or from a function of the request and the step; records every request it saw; can fail
 * a given number of times with a retryable or non-retryable `ModelError`; can be slow (on
 * `Clock`, so `TestClock` drives it); can run a hook before replying (signal a `Deferred`, then
 * block, to interrupt a run mid-call); can stream its replies in chunks (design 0180), slowly,
 * holding a delta back, or cut after some of them (a retryable `ModelError`, as a lost
 * connection is).
 *
 * The step of a call is the number of `Assistant` messages in the request (the loop renders one
 * per completed step), so a script indexed by step replays the same way after a resume. It is
 * counted incrementally while the loop keeps appending to the same message array: a call costs
 * O(1), not O(history).
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import { ModelError } from "@polyloop/core/Errors"
import type * as Message from "@polyloop/core/Message"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelDelta from "@polyloop/core/ModelDelta"
import * as ModelReply from "@polyloop/core/ModelReply"

/** A scripted reply: a full `ModelReply`, or a string (a text reply with the default usage). */
export type Scripted = ModelReply.ModelReply | string

/** Where a call falls. */
export interface Call {
  /**
   * The step of the run: the loop's `ModelClient.currentCall` when it names one (a compacting
   * history policy drops steps), the number of `Assistant` messages in the request otherwise.
   */
  readonly step: number
  /** The index of this call among all calls this model received, from 0. */
  readonly call: number
  /** The index of this call among the calls for the same step, from 0 (retries count up). */
  readonly attempt: number
}

/** The script: the reply of step `k` is `script[k]`, or a function of the request and the call. */
export type Script =
  | ReadonlyArray<Scripted>
  | ((request: ModelClient.ModelRequest, call: Call) => Scripted | Effect.Effect<Scripted, ModelError>)

/** Fail calls with a `ModelError`: the first `times` calls of `step` (of any step when unset). */
export interface Failure {
  readonly step?: number
  readonly times: number
  readonly retryable: boolean
  readonly message?: string
  readonly status?: number
  /** The provider's error code, e.g. `context_length_exceeded`. */
  readonly code?: string
  /** The model's context window the refusal states (`ModelError.contextWindow`). */
  readonly contextWindow?: number
}

/** Cut the streams of a step: the first `times` streams (of `step`, or of any step) fail after `after` deltas. */
export interface Cut {
  readonly step?: number
  readonly times: number
  /** How many deltas are sent before the cut (default: half of them, rounded down). */
  readonly after?: number
}

/** How a scripted model streams (design 0180). */
export interface StreamingOptions {
  /** Characters of text, reasoning or arguments per delta (default 4). */
  readonly chunkSize?: number
  /** Each delta waits this long on `Clock` before it is sent (interruptible). */
  readonly delay?: Duration.DurationInput
  /** Runs before delta `index` of a call is sent (signal, block: hold the end of a reply back). */
  readonly beforeDelta?: (call: Call, index: number, count: number) => Effect.Effect<void>
  /** Streams cut part-way, checked in order. */
  readonly cuts?: ReadonlyArray<Cut>
}

/** Options of a scripted model. */
export interface Options {
  /** Stream replies in chunks (the client gets a `stream` method); `true` for the defaults. */
  readonly streaming?: StreamingOptions | boolean
  /** Injected failures, checked in order before the script. */
  readonly failures?: ReadonlyArray<Failure>
  /** Each call waits this long on `Clock` before replying (interruptible). */
  readonly latency?: Duration.DurationInput
  /** Runs before each reply (after latency and failures): signal, block, fail. */
  readonly onCall?: (call: Call, request: ModelClient.ModelRequest) => Effect.Effect<void, ModelError>
  /** The usage of string replies (default: no tokens). */
  readonly usage?: ModelReply.Usage
}

/** A request the model saw, with its messages as they were at the call. */
export interface SeenRequest {
  readonly call: Call
  readonly request: ModelClient.ModelRequest
}

/** A scripted model and what it observed. */
export interface ScriptedModel {
  readonly client: ModelClient.ModelClient.Service
  /** `ModelClient` served by this model (the same instance: its records accumulate). */
  readonly layer: Layer.Layer<ModelClient.ModelClient>
  /** Every request seen, in call order. */
  readonly requests: Effect.Effect<ReadonlyArray<SeenRequest>>
  /** How many calls were made (failed and interrupted ones included). */
  readonly calls: Effect.Effect<number>
  /** How many calls were interrupted while in flight. */
  readonly interruptions: Effect.Effect<number>
}

/** A text reply. */
export const text = (value: string, usage?: ModelReply.Usage): ModelReply.ModelReply =>
  ModelReply.make({ text: value, ...(usage === undefined ? {} : { usage }) })

/**
 * A reply with one native tool call; `args` is serialised as JSON (pass a string to send raw,
 * possibly invalid, argument text). An empty `id` (the default) is filled with
 * `call_s<step>_<index>` when the reply is served, so ids are unique and deterministic.
 */
export const toolCall = (
  name: string,
  args: unknown,
  options?: { readonly id?: string; readonly text?: string; readonly usage?: ModelReply.Usage }
): ModelReply.ModelReply =>
  ModelReply.make({
    text: options?.text ?? "",
    toolCalls: [{ id: options?.id ?? "", name, argumentsText: typeof args === "string" ? args : JSON.stringify(args) }],
    ...(options?.usage === undefined ? {} : { usage: options.usage })
  })

/** A reply whose text is one fenced code block of `language` (after an optional preamble). */
export const code = (language: string, source: string, options?: { readonly preamble?: string; readonly usage?: ModelReply.Usage }): ModelReply.ModelReply =>
  text(`${options?.preamble === undefined ? "" : `${options.preamble}\n`}\`\`\`${language}\n${source}\n\`\`\``, options?.usage)

const countAssistants = (messages: ReadonlyArray<Message.Message>, from: number): number => {
  let n = 0
  for (let i = from; i < messages.length; i++) if (messages[i]!._tag === "Assistant") n++
  return n
}

const fillIds = (reply: ModelReply.ModelReply, step: number): ModelReply.ModelReply => {
  if (!reply.toolCalls.some((call) => call.id === "")) return reply
  return { ...reply, toolCalls: reply.toolCalls.map((call, i) => (call.id === "" ? { ...call, id: `call_s${step}_${i}` } : call)) }
}

/** Makes a scripted model. */
export const make = (script: Script, options: Options = {}): Effect.Effect<ScriptedModel> =>
  Effect.sync(() => {
    // Requests are kept as (messages array, length): the loop only appends, so the prefix is the
    // request as it was; copies are made when `requests` is read, never on the hot path.
    const seen: Array<{ readonly call: Call; readonly request: ModelClient.ModelRequest; readonly length: number }> = []
    const failuresLeft = (options.failures ?? []).map((failure) => failure.times)
    const attemptsByStep = new Map<number, number>()
    let calls = 0
    let interruptions = 0
    let lastMessages: ReadonlyArray<Message.Message> | undefined
    let lastLength = 0
    let lastAssistants = 0
    const latency = options.latency === undefined ? undefined : Duration.decode(options.latency)

    const stepOf = (messages: ReadonlyArray<Message.Message>): number => {
      if (messages === lastMessages && messages.length >= lastLength) {
        lastAssistants += countAssistants(messages, lastLength)
      } else {
        lastAssistants = countAssistants(messages, 0)
      }
      lastMessages = messages
      lastLength = messages.length
      return lastAssistants
    }

    const reply = (request: ModelClient.ModelRequest, call: Call): Effect.Effect<ModelReply.ModelReply, ModelError> => {
      const failures = options.failures ?? []
      for (let i = 0; i < failures.length; i++) {
        const failure = failures[i]!
        if ((failure.step === undefined || failure.step === call.step) && failuresLeft[i]! > 0) {
          failuresLeft[i] = failuresLeft[i]! - 1
          return Effect.fail(
            new ModelError({
              retryable: failure.retryable,
              message: failure.message ?? `scripted failure at step ${call.step} (call ${call.call})`,
              ...(failure.status === undefined ? {} : { status: failure.status }),
              ...(failure.code === undefined ? {} : { code: failure.code }),
              ...(failure.contextWindow === undefined ? {} : { contextWindow: failure.contextWindow })
            })
          )
        }
      }
      const scripted: Effect.Effect<Scripted, ModelError> = typeof script === "function"
        ? Effect.suspend(() => {
            const out = script(request, call)
            return Effect.isEffect(out) ? out : Effect.succeed(out)
          })
        : call.step < script.length
        ? Effect.succeed(script[call.step]!)
        : Effect.dieMessage(`ScriptedModel: no reply scripted for step ${call.step} (the script has ${script.length})`)
      return Effect.map(scripted, (out) => fillIds(typeof out === "string" ? text(out, options.usage) : out, call.step))
    }

    /** Records a call and makes its reply (after latency, the hook and injected failures). */
    const start = (request: ModelClient.ModelRequest): Effect.Effect<{ readonly call: Call; readonly reply: ModelReply.ModelReply }, ModelError> =>
      Effect.flatMap(FiberRef.get(ModelClient.currentCall), (current) => {
        const step = current !== undefined ? current.step : stepOf(request.messages)
        const attempt = attemptsByStep.get(step) ?? 0
        attemptsByStep.set(step, attempt + 1)
        const call: Call = { step, call: calls, attempt }
        calls += 1
        seen.push({ call, request, length: request.messages.length })
        let effect = reply(request, call)
        if (options.onCall !== undefined) effect = Effect.zipRight(options.onCall(call, request), effect)
        if (latency !== undefined) effect = Effect.zipRight(Effect.sleep(latency), effect)
        return Effect.map(effect, (replied) => ({ call, reply: replied }))
      })

    const generate = (request: ModelClient.ModelRequest): Effect.Effect<ModelReply.ModelReply, ModelError> =>
      Effect.onInterrupt(Effect.map(start(request), (started) => started.reply), () =>
        Effect.sync(() => {
          interruptions += 1
        }))

    const streaming = options.streaming === undefined || options.streaming === false
      ? undefined
      : options.streaming === true
      ? {}
      : options.streaming
    const cutsLeft = (streaming?.cuts ?? []).map((cut) => cut.times)
    const delay = streaming?.delay === undefined ? undefined : Duration.decode(streaming.delay)
    const counted = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E> =>
      Effect.onInterrupt(effect, () =>
        Effect.sync(() => {
          interruptions += 1
        }))

    /** How many deltas a stream of `count` sends before it is cut, if it is. */
    const cutOf = (call: Call, count: number): number | undefined => {
      const cuts = streaming?.cuts ?? []
      for (let i = 0; i < cuts.length; i++) {
        const cut = cuts[i]!
        if ((cut.step === undefined || cut.step === call.step) && cutsLeft[i]! > 0) {
          cutsLeft[i] = cutsLeft[i]! - 1
          return Math.min(count, Math.max(0, cut.after ?? Math.floor(count / 2)))
        }
      }
      return undefined
    }

    const stream = (request: ModelClient.ModelRequest): Stream.Stream<ModelDelta.ModelDelta, ModelError> =>
      Stream.unwrap(Effect.map(counted(start(request)), ({ call, reply: replied }) => {
        const deltas = ModelDelta.chunked(replied, streaming?.chunkSize ?? 4)
        const cut = cutOf(call, deltas.length)
        const sent = cut === undefined ? deltas : deltas.slice(0, cut)
        const before = streaming?.beforeDelta
        let out: Stream.Stream<ModelDelta.ModelDelta, ModelError> = Stream.fromIterable(sent)
        if (delay !== undefined || before !== undefined) {
          out = Stream.mapEffect(Stream.zipWithIndex(out), ([delta, index]) => {
            let wait: Effect.Effect<void> = Effect.void
            if (delay !== undefined) wait = Effect.sleep(delay)
            if (before !== undefined) wait = Effect.zipRight(wait, before(call, index, deltas.length))
            return counted(Effect.as(wait, delta))
          })
        }
        return cut === undefined
          ? out
          : Stream.concat(
            out,
            Stream.fail(new ModelError({ retryable: true, message: `scripted stream of step ${call.step} cut after ${cut} of ${deltas.length} deltas (call ${call.call})` }))
          )
      }))

    const client = ModelClient.make(generate, streaming === undefined ? undefined : stream)
    return {
      client,
      layer: Layer.succeed(ModelClient.ModelClient, client),
      requests: Effect.sync(() =>
        seen.map(({ call, length, request }) => ({
          call,
          request: { ...request, messages: request.messages.slice(0, length) }
        }))
      ),
      calls: Effect.sync(() => calls),
      interruptions: Effect.sync(() => interruptions)
    }
  })

/** A scripted model as a layer (when the test does not need to inspect it). */
export const layer = (script: Script, options?: Options): Layer.Layer<ModelClient.ModelClient> =>
  Layer.unwrapEffect(Effect.map(make(script, options), (model) => model.layer))

/** A model that must not be called: calling it is a defect (it proves a code path calls nothing). */
export const unreachable: Layer.Layer<ModelClient.ModelClient> = ModelClient.layer(() =>
  Effect.dieMessage("ScriptedModel.unreachable: the model was called")
)
