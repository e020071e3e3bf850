/**
 * @polyloop/core
 *
 * @since 0.1.0
 */

/**
 * Actions: what a decision asks the environment to do. Two action languages: JSON tool calls and code.
 */
export * as Action from "./Action.js"

/**
 * The action executor port: runs an action and reports an `ActionOutcome`.
 */
export * as ActionExecutor from "./ActionExecutor.js"

/**
 * What executing an action produced: exactly five fields (design 0007).
 */
export * as ActionOutcome from "./ActionOutcome.js"

/**
 * The loop (SPEC §7–§9): `Agent.run` runs an agent on a task, durably. Idempotent by run id: a fresh id starts, a started and unfinished one resumes where it stopped, a finished one returns its recorded result without calling anything.
 */
export * as Agent from "./Agent.js"

/**
 * Agents that call agents (design 0392): `SubAgent.tool` makes a tool whose call the loop runs as a durable child run under a derived run id; its answer is the call's observation, its cost counts in the parent's budget.
 */
export * as SubAgent from "./SubAgent.js"

/**
 * An agent: everything that decides what the model sees (all in the snapshot) plus the model retry policy (not in the snapshot: it changes nothing the model sees).
 */
export * as AgentDefinition from "./AgentDefinition.js"

/**
 * History policies (design 0300): what the model is sent of a run's history, as a pure function of the log; the log keeps everything. `keepAll` (the default), `maskObservations({ keepLast, every })`, `fitTokens({ window, headroom, tokenizer })` and `compose(…)`; every compaction is a `HistoryCompacted` record. In the snapshot: changing it is drift.
 */
export * as HistoryPolicy from "./HistoryPolicy.js"

/**
 * Counting tokens (design 0300): the `TokenCounter` port a token-budget history policy counts with; core's default has only `approximate` (⌈characters / 4⌉), `@polyloop/ai`'s `Tokenizers.layer` adds OpenAI's encodings.
 */
export * as TokenCounter from "./TokenCounter.js"

/**
 * Human approval that survives restarts (design 0160). A tool declares `approval` (see `Tool`); when a step's call needs it, the loop records `ApprovalRequested` and `Agent.run` stops with `Suspended`, holding nothing. `decide` records a person's `ApprovalDecided`, bound to the requested action's hash; the next `Agent.run` resumes: an approved call runs once, a rejected one is `NotExecuted` with the `rejected` text.
 */
export * as Approval from "./Approval.js"

/**
 * Content-addressed blobs in the run store (design 0330): byte strings keyed by their SHA-256, stored once however often they are put, and per-run *refs* — names that point at a blob (`sandbox/00000003` → a snapshot's manifest). A capability of a store, optional like `appendRecords`: `RunLogStore.Backend.blobs` is what an adapter implements, `Blobs.make` the front every backend gets (hashing, the hash checked on read, spans).
 */
export * as Blobs from "./Blobs.js"

/**
 * The four budget items (the seeds: "budget is four items, not two counters").
 */
export * as Budget from "./Budget.js"

/**
 * The decision parser for agents that act by writing code (dissect's case, SPEC §10): the action is the one fenced code block of the configured language in the reply text.
 */
export * as CodeBlockParser from "./CodeBlockParser.js"

/**
 * The decision parser port: reads a decision out of a model reply.
 */
export * as DecisionParser from "./DecisionParser.js"

/**
 * Typed errors. Environment failure (`ToolEnvironmentError`, `StoreError`) and ordinary failure are different types, never collapsed into `Error`.
 */
export * as Errors from "./Errors.js"

/**
 * The event sink port: where the loop sends `LoopEvent`s.
 */
export * as EventSink from "./EventSink.js"

/**
 * Forks (design 0170): a new run that starts from a recorded run's step `atStep`. Its log holds a `RunStarted` with `forkedFrom { runId, step, snapshotHash, differences }` and a copy of the parent's records of the steps before `atStep` (replies and results, never re-executed), written in one atomic append. The configuration may change (an ablation): omitted parts keep the parent's, and every difference from the parent's snapshot is recorded. The parent is only read. `Agent.run` on the fork's id continues from `atStep` (`Agent.fork` is this module's `fork`).
 */
export * as Fork from "./Fork.js"

/**
 * Identifiers: the caller-chosen run id, step indices and result ids.
 */
export * as Ids from "./Ids.js"

/**
 * The decision parser for tool calls written as JSON in the reply text (GovDoc's case, SPEC §10): finds exactly one JSON object in free text (prose around it and a ```json code fence are tolerated) and reads a tool call or a final answer out of it.
 */
export * as JsonActionParser from "./JsonActionParser.js"

/**
 * Run logs as JSON-lines files (design 0170): what `polyloop export --format jsonl` writes — each record as the store encodes it, one per line, runs one after another (each begins with its `RunStarted`) — read back and written into a store. Every line is decoded with its record schema and the sequence numbers checked before anything is written; each run is then written with one atomic append, so export → import → export gives the same bytes, and a log moves between stores (SQLite → PostgreSQL → SQLite) unchanged.
 */
export * as LogFile from "./LogFile.js"

/**
 * Events the loop emits through the `EventSink` while a run goes on. `ActionExecuted` carries the executor's own observation for audit (it never enters history when synthetic).
 */
export * as LoopEvent from "./LoopEvent.js"

/**
 * Messages of the history a `ModelRequest` carries.
 */
export * as Message from "./Message.js"

/**
 * The model port. A `ModelClient` turns a request (history, tool definitions, settings) into a reply. It never sees the run log.
 */
export * as ModelClient from "./ModelClient.js"

/**
 * A model reply as it arrives (design 0180): text, reasoning and refusal fragments, tool-call fragments by call index, the usage and the finish reason. `fold` turns deltas into exactly the `ModelReply` a non-streaming call returns; every client, the scripted model and the loop use this one fold.
 */
export * as ModelDelta from "./ModelDelta.js"

/**
 * What the model returned, exactly as logged (design 0140): text, native tool calls, usage, the finish reason in one vocabulary across providers with the provider's own word kept, and what else a provider returns that the run must not lose (a refusal, reasoning text).
 */
export * as ModelReply from "./ModelReply.js"

/**
 * Settings passed to the model with every request; part of the snapshot.
 */
export * as ModelSettings from "./ModelSettings.js"

/**
 * The decision parser for models with native tool calling (SPEC §10): the decision is read from `reply.toolCalls`, not from the text.
 */
export * as NativeToolCallParser from "./NativeToolCallParser.js"

/**
 * The decision a `DecisionParser` reads out of a model reply.
 */
export * as ParsedReply from "./ParsedReply.js"

/**
 * Replay (design 0170): a recorded run served back as a `ModelClient`. `Replay.model(log)` answers each request with the recorded reply of its step (the step is the number of `Assistant` messages in the request) after checking the request against the recorded fingerprint (`ModelReplied.requestHash`); the first request that differs fails with `ReplayDiverged`, naming the step and the first differing path of the request (`messages[0].text`, `tools[1].description`, `settings.temperature`). Requests are not stored: the expected one is rebuilt from the log, and its hash checked against the recorded one. Logs written before fingerprints are checked against the rebuilt request only.
 */
export * as Replay from "./Replay.js"

/**
 * The run log: the record kinds and the `RunLog` a store reads back (SPEC §7). History is rebuilt from the log, never stored separately. `ApprovalRequested` / `ApprovalDecided` (design 0160) are absent from logs written before approvals existed; such logs read back with `approvals` empty.
 */
export * as RunLog from "./RunLog.js"

/**
 * Checks of a run's log beyond decoding: the rules the loop and the store keep, which a log damaged outside them (a record deleted or edited by hand, a file restored from a partial copy, a store with a bug) breaks. Used by `polyloop verify` and `polyloop runs`, and by the crash suites to check every log they leave.
 */
export * as RunLogAudit from "./RunLogAudit.js"

/**
 * The run log store port (SPEC §7), split into the loop-facing service and a small backend that adapters implement. `make(backend)` adds record encoding, decoding and the sequence checks once, for every backend.
 */
export * as RunLogStore from "./RunLogStore.js"

/**
 * The snapshot of a run (SPEC §8): everything the model can see or that decides what it sees, as canonical JSON (sorted keys, no whitespace) with its SHA-256. `RunStarted` records it; a resume computes it again and refuses to continue under another configuration.
 */
export * as Snapshot from "./Snapshot.js"

/**
 * Statistics of finished runs (design 0170) — the table a paper's "how did runs end" paragraph needs. Runs are grouped by agent name and snapshot hash (one configuration); per group: the number of runs, the stop-reason distribution (`Completed(Tool|Environment|Answer)`, each `BudgetExhausted(<budget>)`, `EnvError`), steps / effective steps / tokens as median, p90 (nearest rank) and max, and how many runs were resumed and how often. Numbers come from each run's `RunFinished` counters (what the run itself recorded).
 */
export * as Stats from "./Stats.js"

/**
 * Why a run stopped. A run that broke never looks like a run that ran out of budget.
 */
export * as StopReason from "./StopReason.js"

/**
 * Texts the library writes into history instead of the executor's own (design 0007, decision 2). Templates may use `{tool}`, `{issues}` and `{tools}`; the library fills them from the validation result, a pure function of the snapshot and the reply. The optional `rejected` text (design 0160) may use `{tool}` and `{reason}`: a call a person rejected.
 */
export * as SyntheticObservations from "./SyntheticObservations.js"

/**
 * The loop's spans in the OpenTelemetry GenAI vocabulary (design 0212): `Agent.run` is an `invoke_agent`, `Agent.model` a `chat` (kind client) with the request's model and settings and the reply's usage and finish reason, `Agent.action` an `execute_tool` with the tool's name and the call's id — beside polyloop's own `polyloop.run_id` and `polyloop.step`. Install a tracer (`@effect/opentelemetry`'s `NodeSdk.layer`) to see them; without one, the per-step spans are not made at all.
 */
export * as Telemetry from "./Telemetry.js"

/**
 * A tool: name, description, a parameter Schema (decoded from the call's arguments; JSON Schema derived for the model), an optional handler, a replay policy, a completion marker (design 0008) and an optional approval rule (design 0160). The implementation hangs on the spec, so narrowing a registry carries it along.
 */
export * as Tool from "./Tool.js"

/**
 * What a tool handler may know about the call it serves (beyond the seeds): the run, the step, the call id and an idempotency key `runId/step/callId`, so a tool with side effects can make them idempotent across a crash and a replay.
 */
export * as ToolContext from "./ToolContext.js"

/**
 * The tool registry (design 0008): the tools the model may call, their JSON Schemas, pure validation of calls, narrowing, and the derived executor.
 */
export * as ToolRegistry from "./ToolRegistry.js"

/**
 * Trajectory exports of a run log (design 0170), for tools outside polyloop:
 */
export * as Trajectory from "./Trajectory.js"
