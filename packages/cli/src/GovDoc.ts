/**
 * A GovDoc-like agent: it edits documents in a workspace directory by calling tools written as
 * JSON in its replies (read through `JsonActionParser`). `tool-agent.ts` runs it, the
 * `polyloop demo` command runs it, and `crash-and-resume.ts` kills it mid-step.
 *
 * The toolset shows the three kinds of tool a product agent has:
 * - reads (`list_files`, `read_file`) with `replayPolicy: "Always"`: running them again after
 *   a crash is harmless, so an interrupted read is simply re-run on resume;
 * - writes (`replace_in_file`, `append_to_file`) with `replayPolicy: "Never"` (the default): an
 *   interrupted write is not run again on resume — the model is told it "may or may not have
 *   taken effect" and checks. Each write also records the call's `ToolContext.idempotencyKey`
 *   in a ledger next to the files and refuses to apply the same key twice, so even a caller
 *   that retries the same call cannot apply it twice;
 * - a completing tool (`submit`, `completesRun: true`): the run completes when it returns.
 *
 * Failures are typed: a missing file or a text that is not found is an ordinary error the model
 * sees and corrects (`Executed`); a workspace that cannot be written is a `ToolEnvironmentError`
 * (the run ends with `StopReason.EnvError`).
 *
 * The scripted model behaves like a careful model would: it follows a plan, makes two mistakes
 * on the way (a text that is not in the file, a call with a missing argument), and after an
 * interrupted write it re-reads the file before deciding whether to write again.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import type { PlatformError } from "@effect/platform/Error"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { ToolEnvironmentError } from "@polyloop/core/Errors"
import type * as Message from "@polyloop/core/Message"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as Tool from "@polyloop/core/Tool"
import { ToolContext } from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import type * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as path from "node:path"

// -----------------------------------------------------------------------------
// The workspace
// -----------------------------------------------------------------------------

/** The files a fresh workspace holds. */
export const initialFiles: Readonly<Record<string, string>> = {
  "policy.md": [
    "# Customer data retention policy",
    "",
    "1. Customer records are kept for 30 days after an account is closed.",
    "2. Backups are kept for 30 days, then destroyed.",
    "3. Access logs are kept for one year.",
    ""
  ].join("\n"),
  "CHANGELOG.md": ["# Changelog", "", "- First version of the retention policy.", ""].join("\n")
}

/** The ledger of applied writes (one JSON line per idempotency key), hidden from `list_files`. */
export const ledgerFile = ".effects.jsonl"

/** One applied write, as the ledger records it (one JSON line). */
export const LedgerEntry = Schema.Struct({ key: Schema.String, tool: Schema.String, path: Schema.String })
/** One applied write, as the ledger records it. */
export interface LedgerEntry extends Schema.Schema.Type<typeof LedgerEntry> {}

/** A line of the ledger is not a ledger entry: which writes were applied can no longer be told. */
export class CorruptLedger extends Schema.TaggedError<CorruptLedger>()("CorruptLedger", {
  /** The ledger file. */
  file: Schema.String,
  /** The line that cannot be read (from 1). */
  line: Schema.Int,
  message: Schema.String
}) {}

const decodeEntry = Schema.decodeEither(Schema.parseJson(LedgerEntry))

/** Writes the initial files into `root` (created if needed). */
export const seed = (root: string): Effect.Effect<void, PlatformError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    yield* fs.makeDirectory(root, { recursive: true })
    for (const [name, content] of Object.entries(initialFiles)) {
      yield* fs.writeFileString(path.join(root, name), content)
    }
  })

/** The applied writes recorded in the workspace's ledger, in order; `CorruptLedger` names the first line that is not an entry. */
export const ledger = (root: string): Effect.Effect<ReadonlyArray<LedgerEntry>, PlatformError | CorruptLedger, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = path.join(root, ledgerFile)
    if (!(yield* fs.exists(file))) return []
    const text = yield* fs.readFileString(file)
    const entries: Array<LedgerEntry> = []
    const lines = text.split("\n")
    for (let index = 0; index < lines.length; index++) {
      const line = lines[index]!
      if (line.length === 0) continue
      const decoded = decodeEntry(line)
      if (Either.isLeft(decoded)) {
        const issue = ParseResult.TreeFormatter.formatErrorSync(decoded.left).replace(/\s*\n\s*/g, " ")
        return yield* new CorruptLedger({ file, line: index + 1, message: `the idempotency ledger ${file} is corrupt at line ${index + 1}: ${issue}` })
      }
      entries.push(decoded.right)
    }
    return entries
  })

// -----------------------------------------------------------------------------
// Tool errors: ordinary (the model sees them and corrects itself)
// -----------------------------------------------------------------------------

/** The file does not exist. */
export class FileNotFound extends Data.TaggedError("FileNotFound")<{ readonly message: string }> {}

/** The path leaves the workspace. */
export class PathOutsideWorkspace extends Data.TaggedError("PathOutsideWorkspace")<{ readonly message: string }> {}

/** `replace_in_file`: the text to replace is not in the file, or is there several times. */
export class TextNotFound extends Data.TaggedError("TextNotFound")<{ readonly message: string }> {}

// -----------------------------------------------------------------------------
// Tools
// -----------------------------------------------------------------------------

/** Options of the toolset. */
export interface Options {
  /**
   * Runs inside every tool call after the tool did its work and before it returns its
   * observation — i.e. after any side effect and before the loop has recorded the step. The
   * demo and the crash walk-through use it to kill the process at exactly that moment.
   */
  readonly afterTool?: (tool: string) => Effect.Effect<void, never, ToolContext>
}

/** The workspace-relative path, or `PathOutsideWorkspace`. */
const resolveIn = (root: string, relative: string): Effect.Effect<string, PathOutsideWorkspace> => {
  const full = path.resolve(root, relative)
  return full.startsWith(path.resolve(root) + path.sep) && path.basename(full) !== ledgerFile
    ? Effect.succeed(full)
    : Effect.fail(new PathOutsideWorkspace({ message: `${relative} is not a file of the workspace` }))
}

/** A missing file is the model's mistake; any other file system failure means the workspace is broken. */
const fileFailure = (relative: string) => (error: PlatformError): FileNotFound | ToolEnvironmentError =>
  error._tag === "SystemError" && error.reason === "NotFound"
    ? new FileNotFound({ message: `${relative} does not exist` })
    : new ToolEnvironmentError({ message: `the workspace cannot be used: ${error.message}`, cause: error })

/** A ledger that cannot be read or is corrupt means the workspace is broken: a write must not guess whether it was applied. */
const ledgerFailure = (error: PlatformError | CorruptLedger): FileNotFound | ToolEnvironmentError =>
  error._tag === "CorruptLedger"
    ? new ToolEnvironmentError({ message: `the workspace cannot be used: ${error.message}`, cause: error })
    : fileFailure(ledgerFile)(error)

const Path = Schema.String.annotations({ description: "a file path relative to the workspace, e.g. policy.md" })

/** The GovDoc-like toolset over the workspace directory `root`. */
export const makeTools = (root: string, options: Options = {}) => {
  /** Runs the `afterTool` hook once the tool's work is over, whether it returned or failed. */
  const hooked = (tool: string) => <A, E, R>(work: Effect.Effect<A, E, R>): Effect.Effect<A, E, R | ToolContext> => {
    const hook = options.afterTool
    return hook === undefined ? work : work.pipe(Effect.tap(() => hook(tool)), Effect.tapError(() => hook(tool)))
  }

  /** Applies a write once per idempotency key: a key found in the ledger is not applied again. */
  const once = <E, R>(tool: string, relative: string, write: Effect.Effect<string, E, R>) =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { idempotencyKey } = yield* ToolContext
      const applied = yield* ledger(root).pipe(Effect.mapError(ledgerFailure))
      if (applied.some((entry) => entry.key === idempotencyKey)) {
        return `already applied (idempotency key ${idempotencyKey}); nothing changed`
      }
      const observation = yield* write
      const entry: LedgerEntry = { key: idempotencyKey, tool, path: relative }
      yield* fs.writeFileString(path.join(root, ledgerFile), `${JSON.stringify(entry)}\n`, { flag: "a" }).pipe(
        Effect.mapError(fileFailure(ledgerFile))
      )
      return observation
    })

  const listFiles = Tool.make({
    name: "list_files",
    description: "Lists the files of the workspace with their sizes.",
    parameters: Schema.Struct({}),
    replayPolicy: "Always",
    handler: () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const names = (yield* fs.readDirectory(root).pipe(Effect.mapError(fileFailure(".")))).filter((name) => !name.startsWith(".")).sort()
        const lines: Array<string> = []
        for (const name of names) {
          const info = yield* fs.stat(path.join(root, name)).pipe(Effect.mapError(fileFailure(name)))
          lines.push(`${name} (${info.size} bytes)`)
        }
        return lines.length === 0 ? "(the workspace is empty)" : lines.join("\n")
      }).pipe(hooked("list_files"))
  })

  const readFile = Tool.make({
    name: "read_file",
    description: "Returns the content of a file.",
    parameters: Schema.Struct({ path: Path }),
    replayPolicy: "Always",
    handler: ({ path: relative }) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const full = yield* resolveIn(root, relative)
        return yield* fs.readFileString(full).pipe(Effect.mapError(fileFailure(relative)))
      }).pipe(hooked("read_file"))
  })

  const replaceInFile = Tool.make({
    name: "replace_in_file",
    description: "Replaces the one occurrence of `find` in a file by `replace`.",
    parameters: Schema.Struct({ path: Path, find: Schema.String.pipe(Schema.minLength(1)), replace: Schema.String }),
    handler: ({ find, path: relative, replace }) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const full = yield* resolveIn(root, relative)
        return yield* once(
          "replace_in_file",
          relative,
          Effect.gen(function*() {
            const content = yield* fs.readFileString(full).pipe(Effect.mapError(fileFailure(relative)))
            const count = content.split(find).length - 1
            if (count !== 1) {
              return yield* new TextNotFound({
                message: count === 0 ? `${JSON.stringify(find)} does not occur in ${relative}` : `${JSON.stringify(find)} occurs ${count} times in ${relative}; make it unique`
              })
            }
            yield* fs.writeFileString(full, content.replace(find, () => replace)).pipe(Effect.mapError(fileFailure(relative)))
            return `replaced 1 occurrence in ${relative}`
          })
        )
      }).pipe(hooked("replace_in_file"))
  })

  const appendToFile = Tool.make({
    name: "append_to_file",
    description: "Appends a line of text at the end of a file.",
    parameters: Schema.Struct({ path: Path, text: Schema.String.pipe(Schema.minLength(1)) }),
    handler: ({ path: relative, text }) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const full = yield* resolveIn(root, relative)
        return yield* once(
          "append_to_file",
          relative,
          Effect.gen(function*() {
            const content = yield* fs.readFileString(full).pipe(Effect.mapError(fileFailure(relative)))
            const separator = content.length === 0 || content.endsWith("\n") ? "" : "\n"
            yield* fs.writeFileString(full, `${separator}${text}\n`, { flag: "a" }).pipe(Effect.mapError(fileFailure(relative)))
            return `appended 1 line to ${relative}`
          })
        )
      }).pipe(hooked("append_to_file"))
  })

  const submit = Tool.make({
    name: "submit",
    description: "Submits the finished work with a one-line summary; this ends the task.",
    parameters: Schema.Struct({ summary: Schema.String.pipe(Schema.minLength(1)) }),
    // Submitting only reports (it changes nothing), so running it again after a crash is safe.
    replayPolicy: "Always",
    completesRun: true,
    handler: ({ summary }) => hooked("submit")(Effect.succeed(summary))
  })

  return ToolRegistry.make(listFiles, readFile, replaceInFile, appendToFile, submit)
}

// -----------------------------------------------------------------------------
// The agent
// -----------------------------------------------------------------------------

/** The agent: everything here is part of the run's snapshot. */
export const agent = AgentDefinition.make({
  name: "policy-editor",
  systemPrompt: [
    "You edit the documents of a workspace with tools.",
    "Each reply takes exactly one action: a JSON object {\"tool\": \"<name>\", \"arguments\": {...}}.",
    "Tools: list_files {}, read_file {path}, replace_in_file {path, find, replace}, append_to_file {path, text}, submit {summary}.",
    "Check files before editing them. When the work is done, call submit with a one-line summary."
  ].join("\n"),
  budget: { maxSteps: 12, maxEffectiveSteps: 10, maxTokens: 20_000 }
})

/** The task. */
export const task = "Legal changed how long customer records are kept after an account is closed: 90 days instead of 30 " +
  "(backups do not change). Update policy.md, add a line about it to CHANGELOG.md, then submit a one-line summary."

// -----------------------------------------------------------------------------
// The scripted model
// -----------------------------------------------------------------------------

interface PlanItem {
  readonly say: string
  readonly action: Readonly<Record<string, unknown>>
  /** For writes: the file to re-read after an interruption, and whether it shows the write took effect. */
  readonly verify?: { readonly path: string; readonly done: (content: string) => boolean }
}

const newRecordsLine = "1. Customer records are kept for 90 days after an account is closed."
const changelogLine = "- Customer records are now kept for 90 days after an account is closed (was 30 days)."

const plan: ReadonlyArray<PlanItem> = [
  { say: "Let me see what the workspace holds.", action: { tool: "list_files", arguments: {} } },
  // The flattened form: arguments on the action level (JsonActionParser accepts both).
  { say: "I will read the policy first.", action: { tool: "read_file", path: "policy.md" } },
  {
    say: "I will change the retention period of customer records.",
    action: { tool: "replace_in_file", arguments: { path: "policy.md", find: "Customer records are retained for 30 days", replace: "Customer records are retained for 90 days" } },
    verify: { path: "policy.md", done: (content) => content.includes(newRecordsLine) }
  },
  {
    say: "The policy says \"kept\", not \"retained\". Using its exact wording.",
    action: { tool: "replace_in_file", arguments: { path: "policy.md", find: "Customer records are kept for 30 days", replace: "Customer records are kept for 90 days" } },
    verify: { path: "policy.md", done: (content) => content.includes(newRecordsLine) }
  },
  {
    say: "Now the changelog.",
    action: { tool: "append_to_file", arguments: { path: "CHANGELOG.md" } },
    verify: { path: "CHANGELOG.md", done: (content) => content.includes(changelogLine) }
  },
  {
    say: "I forgot the text of the line.",
    action: { tool: "append_to_file", arguments: { path: "CHANGELOG.md", text: changelogLine } },
    verify: { path: "CHANGELOG.md", done: (content) => content.includes(changelogLine) }
  },
  {
    say: "Both files are updated.",
    action: { tool: "submit", arguments: { summary: "Customer records are now kept for 90 days (policy.md item 1); CHANGELOG.md has a line about it." } }
  }
]

const replyText = (say: string, action: Readonly<Record<string, unknown>>): string => `${say}\n\n\`\`\`json\n${JSON.stringify(action)}\n\`\`\``

const messageText = (message: Message.Message): string =>
  message._tag === "Assistant" ? message.text + message.toolCalls.map((call) => call.argumentsText).join("") : message.text

/** Deterministic token counts: about four characters a token. */
const usageOf = (request: ModelClient.ModelRequest, text: string): ModelReply.Usage => ({
  inputTokens: Math.ceil(request.messages.reduce((sum, message) => sum + messageText(message).length, 0) / 4),
  outputTokens: Math.ceil(text.length / 4)
})

/**
 * What the careful model replies, from the history alone (so it replies the same after a
 * resume): walk the (reply, observation) pairs to find where the plan stands; after an
 * observation saying the last action was interrupted, re-read the file it wrote and skip the
 * write if the file shows it took effect.
 */
export const script: ScriptedModel.Script = (request) => {
  let next = 0
  let verifying: number | undefined
  let awaitingVerification = false
  const messages = request.messages
  for (let i = 0; i < messages.length; i++) {
    if (messages[i]!._tag !== "Assistant") continue
    const observation = messages[i + 1]
    const text = observation === undefined || observation._tag === "Assistant" ? "" : observation.text
    if (awaitingVerification && verifying !== undefined) {
      const item = plan[verifying]!
      next = item.verify !== undefined && item.verify.done(text) ? verifying + 1 : verifying
      verifying = undefined
      awaitingVerification = false
    } else if (text.includes("was interrupted")) {
      verifying = next
      awaitingVerification = true
    } else {
      next += 1
    }
  }
  let reply: string
  if (verifying !== undefined) {
    const item = plan[verifying]!
    reply = replyText(
      "My last action was interrupted and may or may not have taken effect. I will check before repeating it.",
      { tool: "read_file", arguments: { path: item.verify?.path ?? "CHANGELOG.md" } }
    )
  } else {
    const item = plan[Math.min(next, plan.length - 1)]!
    reply = replyText(item.say, item.action)
  }
  return ModelReply.make({ text: reply, usage: usageOf(request, reply), finishReason: "stop" })
}
