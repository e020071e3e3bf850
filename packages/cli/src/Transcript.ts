/**
 * The transcript of a run, read back from its log (what `polyloop show` prints): each step's
 * reply, decision, action, status, the observation that entered history (marked when synthetic)
 * and, for audit, the executor's own text; the resumes where they happened; the budget and what
 * was used of it. Also the export of a run's records as JSON or JSON lines.
 *
 * @since 0.1.0
 */
import * as Approval from "@polyloop/core/Approval"
import type { Budget } from "@polyloop/core/Budget"
import type { RunId } from "@polyloop/core/Ids"
import type * as ModelReply from "@polyloop/core/ModelReply"
import { totalTokens } from "@polyloop/core/ModelReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as HistoryPolicy from "@polyloop/core/HistoryPolicy"
import * as LogFile from "@polyloop/core/LogFile"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as StopReason from "@polyloop/core/StopReason"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { CliError } from "./CliError.js"
import * as Format from "./Format.js"
import type { Style } from "./Style.js"

/**
 * One step as the log holds it: its results in call order (several when the reply called several
 * tools, design 0150). A step whose reply is logged but that never completed has no `completed`
 * (and the results of the calls that finished before it stopped).
 */
export interface Step {
  readonly step: number
  readonly reply: RunLog.ModelReplied | undefined
  readonly results: ReadonlyArray<RunLog.ActionResulted>
  readonly completed: RunLog.StepCompleted | undefined
  /** The step's reply was logged before a crash and the step was completed by a resume. */
  readonly settledOnResume: boolean
}

/** Was this result written by a resume of its step (a resume between the step's reply and the result)? */
const settledByResume = (resumes: ReadonlyArray<RunLog.RunResumed>, reply: RunLog.ModelReplied | undefined, seq: number): boolean =>
  reply !== undefined && resumes.some((resume) => resume.seq > reply.seq && resume.seq < seq)

/** A run's transcript. */
export interface Transcript {
  readonly runId: RunId
  readonly started: RunLog.RunStarted
  readonly summary: RunLogStore.RunSummary
  /** The recorded snapshot, decoded (none if it does not decode with this version). */
  readonly snapshot: Option.Option<Snapshot.Snapshot>
  readonly steps: ReadonlyArray<Step>
  readonly resumes: ReadonlyArray<RunLog.RunResumed>
  /** Approval requests and decisions, in write order (design 0160). */
  readonly approvals: ReadonlyArray<RunLog.ApprovalRecord>
  /** History compactions (design 0300), in write order. */
  readonly compactions: ReadonlyArray<RunLog.HistoryCompacted>
  /** A conversation's messages after its task, and its finished turns (design 0300). */
  readonly userMessages: ReadonlyArray<RunLog.UserMessaged>
  readonly turns: ReadonlyArray<RunLog.TurnFinished>
  /** The calls waiting for a person's decision (a suspended run). */
  readonly waiting: ReadonlyArray<Approval.Waiting>
  readonly finished: Option.Option<RunLog.RunFinished>
}

const decodeSnapshot = Schema.decodeUnknownOption(Snapshot.Snapshot)

/** Builds the transcript of a log; none for the empty log (an unknown run). */
export const fromLog = (log: RunLog.RunLog): Option.Option<Transcript> =>
  Option.flatMap(log.started, (started) =>
    Option.map(RunLogStore.summarize(log), (summary) => {
      const byStep = new Map<number, { reply?: RunLog.ModelReplied; results?: Array<RunLog.ActionResulted>; completed?: RunLog.StepCompleted }>()
      const entry = (step: number) => {
        let found = byStep.get(step)
        if (found === undefined) {
          found = {}
          byStep.set(step, found)
        }
        return found
      }
      for (const reply of log.replies) entry(reply.step).reply = reply
      for (const result of log.results) {
        const found = entry(result.step)
        if (found.results === undefined) found.results = [result]
        else found.results.push(result)
      }
      for (const completed of log.steps) entry(completed.step).completed = completed
      const steps = [...byStep.entries()]
        .sort(([a], [b]) => a - b)
        .map(([step, found]): Step => ({
          step,
          reply: found.reply,
          results: found.results ?? [],
          completed: found.completed,
          settledOnResume: found.completed !== undefined && settledByResume(log.resumes, found.reply, found.completed.seq)
        }))
      return {
        runId: started.runId,
        started,
        summary,
        snapshot: decodeSnapshot(Snapshot.upgrade(started.snapshot)),
        steps,
        resumes: log.resumes,
        approvals: log.approvals,
        compactions: log.compactions,
        userMessages: log.userMessages,
        turns: log.turns,
        waiting: Approval.waiting(log),
        finished: log.finished
      }
    }))

/**
 * Reads a run's transcript, every record decoded with its schema (`verify`: a person reads it,
 * so a row changed behind the store's back is reported, not shown); an unknown run id is a
 * `CliError`.
 */
export const read = (runId: RunId) =>
  Effect.flatMap(RunLogStore.RunLogStore, (store) => store.readLog(runId, { verify: true })).pipe(
    Effect.flatMap((log) =>
      Option.match(fromLog(log), {
        onNone: () => Effect.fail(new CliError({ message: `no run with id ${JSON.stringify(runId)} in the store` })),
        onSome: Effect.succeed
      })
    )
  )

/** The budget of the run, from its snapshot. */
export const budgetOf = (transcript: Transcript): Budget | undefined =>
  Option.getOrUndefined(Option.map(transcript.snapshot, (snapshot) => snapshot.agent.budget))

/** The replay policy a tool had in the run's snapshot. */
const replayPolicyOf = (transcript: Transcript, tool: string): string | undefined =>
  Option.getOrUndefined(
    Option.flatMap(transcript.snapshot, (snapshot) => Option.fromNullable(snapshot.tools.find((t) => t.name === tool)?.replayPolicy))
  )

/**
 * The status of a run with its stop reason, e.g. `Finished: Completed(Tool)`; a conversation
 * whose every message has had its turn, e.g. `Awaiting message: turn 2 Completed(Answer)`.
 */
export const statusLine = (style: Style, summary: RunLogStore.RunSummary): string =>
  Option.match(summary.stopReason, {
    onNone: () => {
      const last = summary.conversation?.lastStopReason
      if (summary.status !== "AwaitingMessage" || summary.conversation === undefined || last === undefined || last === null) return style.yellow("Unfinished")
      const formatted = StopReason.format(last)
      return `Awaiting message: turn ${summary.conversation.turns - 1} ${last._tag === "Completed" ? style.green(formatted) : style.red(formatted)}`
    },
    onSome: (reason) => `Finished: ${reason._tag === "Completed" ? style.green(StopReason.format(reason)) : style.red(StopReason.format(reason))}`
  })

const label = (style: Style, name: string) => style.dim(name.padEnd(13))

/** `120+40 tokens, 100 cached, 30 reasoning`: the billed counts, then the details the provider gave (design 0140). */
const usageFacts = (usage: ModelReply.Usage): string =>
  [
    `${usage.inputTokens}+${usage.outputTokens} tokens`,
    usage.cachedInputTokens === undefined || usage.cachedInputTokens === 0 ? undefined : `${usage.cachedInputTokens} cached`,
    usage.cacheWriteInputTokens === undefined ? undefined : `${usage.cacheWriteInputTokens} cache write`,
    usage.reasoningTokens === undefined || usage.reasoningTokens === 0 ? undefined : `${usage.reasoningTokens} reasoning`
  ].filter((fact) => fact !== undefined).join(", ")

const block = (style: Style, name: string, text: string): string => `  ${label(style, name)}${Format.indent(text === "" ? style.dim("(empty)") : text, 15)}`

/** What a step's request held of the history (design 0300): `steps 0–4 summarised · 5–9 masked · 10–11 verbatim`. */
const stepRange = (from: number, to: number) => (from === to - 1 ? `${from}` : `${from}–${to - 1}`)

const sentFacts = (view: HistoryPolicy.SentView, step: number): string => {
  const range = stepRange
  const parts: Array<string> = []
  if (view.replacedBefore > 0) parts.push(`steps ${range(0, view.replacedBefore)} ${view.compaction?.summarised === true ? "summarised" : "dropped"}`)
  if (view.maskedBefore > view.replacedBefore) parts.push(`${range(view.replacedBefore, view.maskedBefore)} observations masked`)
  if (step > view.maskedBefore) parts.push(`${range(view.maskedBefore, step)} verbatim`)
  return parts.length === 0 ? "the task only" : parts.join(" · ")
}

/** The transcript as text. */
export const render = (style: Style, transcript: Transcript): string => {
  const { started, summary } = transcript
  const budget = budgetOf(transcript)
  const lines: Array<string> = []
  const answer = Option.flatMap(summary.stopReason, (reason) => Option.fromNullable(reason._tag === "Completed" ? reason.answer : undefined))
  lines.push(`${style.bold(`run ${transcript.runId}`)}  agent ${style.cyan(summary.agent)}  ${statusLine(style, summary)}`)
  lines.push(`  ${label(style, "task")}${Format.indent(started.task, 15)}`)
  lines.push(`  ${label(style, "started")}${Format.time(started.startedAt)}${transcript.resumes.length > 0 ? `, resumed ${transcript.resumes.length}×` : ""}`)
  Option.map(transcript.snapshot, (snapshot) => lines.push(`  ${label(style, "parser")}${snapshot.parser}`))
  lines.push(`  ${label(style, "snapshot")}sha256 ${started.snapshotHash.slice(0, 16)}…`)
  if (started.forkedFrom !== undefined) {
    const parent = started.forkedFrom
    const changed = parent.differences.length === 0 ? "same configuration" : `changed: ${parent.differences.map((d) => d.path).join(", ")}`
    lines.push(`  ${label(style, "forked from")}${style.bold(parent.runId)} at step ${parent.step} (${changed})`)
  }
  const policy = Option.getOrUndefined(Option.flatMap(transcript.snapshot, (snapshot) => Option.fromNullable(snapshot.agent.history)))
  if (policy !== undefined && policy._tag !== "KeepAll") lines.push(`  ${label(style, "history")}${HistoryPolicy.describe(policy)}`)
  lines.push(`  ${label(style, "budget used")}${Format.budgetUsed({ ...summary, elapsed: summary.elapsed }, budget)}`)
  if (Option.isSome(answer)) lines.push(`  ${label(style, "answer")}${Format.indent(answer.value, 15)}`)
  Option.map(Option.flatMap(summary.stopReason, (r) => (r._tag === "EnvError" ? Option.some(r.message) : Option.none())), (message) =>
    lines.push(`  ${label(style, "env error")}${style.red(message)}`))

  const resumesAt = (step: number) => transcript.resumes.filter((resume) => resume.fromStep === step)
  // A conversation (design 0300): each turn's message where its turn starts, each turn's end after its last step.
  const conversation = started.conversation !== undefined
  const turnEnd = (turn: RunLog.TurnFinished) =>
    `  ${style.dim(`turn ${turn.turn} ended: ${StopReason.format(turn.stopReason)} after ${turn.counters.steps} steps, ${totalTokens(turn.counters.usage)} tokens`)}`
  const messageAt = (step: number) =>
    transcript.userMessages.filter((m) => transcript.turns.some((t) => t.turn === m.turn - 1 && t.atStep === step))
  const printTurnsAt = (step: number) => {
    if (!conversation) return
    for (const ended of transcript.turns.filter((t) => t.atStep === step)) {
      lines.push(turnEnd(ended))
      for (const m of messageAt(step).filter((m) => m.turn === ended.turn + 1)) {
        const drift = m.differences === undefined || m.differences.length === 0 ? "" : style.dim(`  (configuration changed: ${m.differences.map((d) => d.path).join(", ")})`)
        lines.push("", `${style.bold(`turn ${m.turn}`)}  ${style.dim(`message ${m.messageId}, ${Format.time(m.at)}`)}${drift}`, block(style, "user", m.text))
      }
    }
  }
  if (conversation) lines.push("", `${style.bold("turn 0")}  ${style.dim(`message ${started.conversation!.messageId}`)}`, block(style, "user", started.task))
  for (const step of transcript.steps) {
    if (step.step > 0) printTurnsAt(step.step)
    for (const resume of resumesAt(step.step)) {
      lines.push("", style.magenta(`↻ resumed at step ${resume.fromStep} (${Format.time(resume.at)})`))
    }
    const usage = step.reply?.reply.usage
    const finishReason = step.reply?.reply.finishReason
    const rawFinishReason = step.reply?.reply.rawFinishReason
    const facts = [
      step.completed === undefined ? undefined : Format.duration(step.completed.elapsed),
      usage === undefined ? undefined : usageFacts(usage),
      finishReason === undefined ? undefined : `finish ${finishReason}${rawFinishReason === undefined ? "" : ` (${rawFinishReason})`}`
    ].filter((fact) => fact !== undefined)
    lines.push("", `${style.bold(`step ${step.step}`)}  ${style.dim(facts.join(" · "))}`)
    if (policy !== undefined && policy._tag !== "KeepAll") {
      for (const c of transcript.compactions.filter((c) => c.step === step.step)) {
        const what = c.summary !== undefined ? "summarised" : "dropped"
        lines.push(block(style, "compacted", `${style.magenta(`steps ${stepRange(0, c.toStep)} ${what}`)} before this request (${c.reason}: ${c.requestTokens} tokens counted)`))
        if (c.summary !== undefined) lines.push(block(style, "summary", c.summary))
      }
      lines.push(block(style, "sent", sentFacts(HistoryPolicy.sentView(policy, transcript.compactions, step.step), step.step)))
    }
    if (step.reply !== undefined) {
      const reply = step.reply.reply
      if (reply.reasoning !== undefined) lines.push(block(style, "reasoning", reply.reasoning))
      lines.push(block(style, "reply", reply.text))
      if (reply.refusal !== undefined) lines.push(block(style, "refusal", reply.refusal))
      for (const call of reply.toolCalls) lines.push(block(style, "tool call", `${call.name}(${call.argumentsText}) [${call.id}]`))
    }
    const decision = step.completed?.decision
    if (decision !== undefined && decision._tag !== "Act") lines.push(block(style, "decision", Format.decision(decision, 10_000)))
    const several = step.results.length > 1 || (decision?._tag === "Act" && decision.actions.length > 1)
    step.results.forEach((result, i) => {
      const outcome = result.outcome
      lines.push(block(style, several ? `action ${i + 1}` : "action", Format.action(result.action, 10_000)))
      const notes: Array<string> = []
      if (settledByResume(transcript.resumes, step.reply, result.seq)) {
        const policy = result.action._tag === "ToolCall" ? replayPolicyOf(transcript, result.action.name) : undefined
        notes.push(
          outcome.observationIsSynthetic && result.executorObservation === ""
            ? `settled on resume: not run again (replay policy ${policy ?? "Never"})`
            : `settled on resume: run again (replay policy ${policy ?? "Always"})`
        )
      }
      if (result.handlerFailed) notes.push("the handler failed")
      lines.push(block(style, "status", `${Format.status(style, outcome.status)}${notes.length > 0 ? style.dim(`  (${notes.join("; ")})`) : ""}`))
      const marker = outcome.observationIsSynthetic ? `${style.magenta("[synthetic]")} ` : ""
      const cut = outcome.observationTruncatedChars > 0 ? style.dim(` [${outcome.observationTruncatedChars} characters cut]`) : ""
      lines.push(block(style, "observation", `${marker}${outcome.observation}${cut}`))
      const child = result.child
      if (child !== undefined) {
        // A sub-agent's child run (design 0392): `polyloop show <its id>` prints its own transcript.
        const deeper = child.children === undefined ? "" : `; its children: ${child.children.runs} runs, ${child.children.steps} steps, ${totalTokens(child.children.usage)} tokens`
        lines.push(block(style, "child run", `${child.runId} — ${StopReason.format(child.stopReason)} after ${child.steps} steps, ${totalTokens(child.usage)} tokens${deeper}`))
      }
      if (outcome.observationIsSynthetic || result.executorObservation !== outcome.observation) {
        lines.push(
          block(
            style,
            "executor",
            result.executorObservation === ""
              ? style.dim("(no text: the action did not run)")
              : `${style.dim("(audit, not in history)")} ${result.executorObservation}`
          )
        )
      }
    })
    if (step.completed === undefined) {
      const finished = step.results.length === 0 ? "" : ` (${step.results.length} of its calls finished and are recorded)`
      lines.push(`  ${style.yellow(`interrupted: the reply is logged but the step did not complete (the process stopped mid-step)${finished}`)}`)
      continue
    }
    if (step.results.length === 0 && decision?._tag === "Act") {
      decision.actions.forEach((action, i) => lines.push(block(style, several ? `action ${i + 1}` : "action", Format.action(action, 10_000))))
    }
  }
  printTurnsAt(transcript.steps.length)
  const held = transcript.userMessages.filter((m) => !transcript.turns.some((t) => t.turn === m.turn - 1))
  for (const m of held) lines.push("", `${style.yellow(`held: turn ${m.turn}'s message, waiting for the turn before it`)}`, block(style, "user", m.text))
  for (const resume of transcript.resumes.filter((r) => !transcript.steps.some((s) => s.step === r.fromStep))) {
    lines.push("", style.magenta(`↻ resumed at step ${resume.fromStep} (${Format.time(resume.at)})`))
  }
  lines.push("")
  lines.push(
    Option.match(transcript.finished, {
      onNone: () =>
        conversation
          ? style.dim(`a conversation of ${transcript.turns.length} finished turn(s) and ${summary.steps} steps: Agent.send continues it`)
          : style.yellow(`unfinished after ${summary.steps} steps: resume it with Agent.run on the same run id (or polyloop demo --run ${transcript.runId} for a demo run)`),
      onSome: (finished) =>
        `${style.bold("finished")} ${Format.time(finished.finishedAt)}: ${StopReason.format(finished.stopReason)} after ${finished.counters.steps} steps (${finished.counters.effectiveSteps} effective), ` +
        `${totalTokens(finished.counters.usage)} tokens, ${Format.duration(finished.counters.elapsed)} of step time` +
        (finished.counters.children === undefined
          ? ""
          : `; its sub-agents: ${finished.counters.children.runs} child runs, ${finished.counters.children.steps} steps, ${totalTokens(finished.counters.children.usage)} tokens`)
    })
  )
  return lines.join("\n")
}

const encodeUsage = (usage: { readonly inputTokens: number; readonly outputTokens: number }) => ({ input: usage.inputTokens, output: usage.outputTokens })
const encodeRecord = Schema.encodeSync(RunLog.RunRecord)
const encodeSummary = Schema.encodeSync(RunLogStore.RunSummary)
const encodeForkedFrom = Schema.encodeSync(RunLog.ForkedFrom)
const encodeWaiting = Schema.encodeSync(Approval.Waiting)

/**
 * The transcript as a JSON value (`polyloop show --json`, and the run document of `polyloop
 * serve`'s API): records in their logged (encoded) form; `snapshot` is the recorded snapshot as
 * logged (canonical JSON value, whatever version wrote it), `budget` its budget (null when the
 * snapshot does not decode with this version) and `used` what the run has used of it.
 */
/**
 * Per step, under a history policy (design 0300): what its request held (`sent`), and from which
 * step on its own answers were masked and the step replaced (dropped or summarised) in the
 * requests — the boundaries only grow, so one pass finds them. `undefined` for keep-everything.
 */
const historyOf = (transcript: Transcript): ReadonlyArray<unknown> | undefined => {
  const policy = Option.getOrUndefined(Option.flatMap(transcript.snapshot, (snapshot) => Option.fromNullable(snapshot.agent.history)))
  if (policy === undefined || policy._tag === "KeepAll") return undefined
  const steps = transcript.steps.map((step) => step.step)
  const last = steps.length === 0 ? 0 : Math.max(...steps)
  const views = Array.from({ length: last + 1 }, (_, s) => HistoryPolicy.sentView(policy, transcript.compactions, s))
  const maskedFrom: Array<number | null> = []
  const replacedFrom: Array<number | null> = []
  let m = 0
  let r = 0
  for (let k = 0; k <= last; k++) {
    while (m <= last && views[m]!.maskedBefore <= k) m++
    while (r <= last && views[r]!.replacedBefore <= k) r++
    maskedFrom.push(m <= last && (r > last || m < r) ? m : null)
    replacedFrom.push(r <= last ? r : null)
  }
  return views.map((view, s) => ({
    sent: { replacedBefore: view.replacedBefore, summarised: view.compaction?.summarised ?? false, maskedBefore: view.maskedBefore },
    maskedFrom: maskedFrom[s] ?? null,
    replacedFrom: replacedFrom[s] ?? null
  }))
}

export const toJson = (transcript: Transcript): unknown => {
  const budget = budgetOf(transcript)
  const summary = transcript.summary
  const history = historyOf(transcript)
  return {
    runId: transcript.runId,
    summary: encodeSummary(summary),
    task: transcript.started.task,
    startedAt: transcript.started.startedAt,
    snapshotHash: transcript.started.snapshotHash,
    snapshot: transcript.started.snapshot,
    budget: budget === undefined ? null : Schema.encodeSync(Snapshot.Snapshot.fields.agent.fields.budget)(budget),
    used: { steps: summary.steps, effectiveSteps: summary.effectiveSteps, tokens: summary.tokens, elapsed: summary.elapsed },
    resumes: transcript.resumes.map((resume) => ({ fromStep: resume.fromStep, at: resume.at })),
    forkedFrom: transcript.started.forkedFrom === undefined ? null : encodeForkedFrom(transcript.started.forkedFrom),
    approvals: transcript.approvals.map((record) => encodeRecord(record)),
    waiting: transcript.waiting.map((waiting) => encodeWaiting(waiting)),
    steps: transcript.steps.map((step) => ({
      step: step.step,
      completed: step.completed !== undefined,
      settledOnResume: step.settledOnResume,
      reply: step.reply === undefined ? null : encodeRecord(step.reply),
      /** The step's results in call order. */
      results: step.results.map((result) => encodeRecord(result)),
      /** The first result (the only one of a one-action step), for readers of the shape before design 0150. */
      result: step.results.length === 0 ? null : encodeRecord(step.results[0]!),
      completion: step.completed === undefined ? null : encodeRecord(step.completed),
      tokens: step.reply === undefined ? null : encodeUsage(step.reply.reply.usage),
      /** What the step's request held of the history, and when its answers were masked or replaced (design 0300); null: keep everything. */
      history: history?.[step.step] ?? null
    })),
    /** History compactions (design 0300), in write order. */
    compactions: transcript.compactions.map((record) => encodeRecord(record)),
    /** A conversation's task message id, its later messages and its finished turns (design 0300); empty for a single-task run. */
    conversation: transcript.started.conversation === undefined ? null : transcript.started.conversation,
    userMessages: transcript.userMessages.map((record) => encodeRecord(record)),
    turns: transcript.turns.map((record) => encodeRecord(record)),
    finished: Option.getOrNull(Option.map(transcript.finished, encodeRecord))
  }
}

/** Export formats. */
export type ExportFormat = "json" | "jsonl"

/**
 * A run's records as the store encodes them, in sequence order: `jsonl` is one record per line;
 * `json` is one document `{ runId, records }`. Both end with a newline.
 */
export const exportLog = (_runId: RunId, log: RunLog.RunLog, format: ExportFormat): string =>
  format === "jsonl" ? LogFile.toJsonl(log) : LogFile.toJson(log)
