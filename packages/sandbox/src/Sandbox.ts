/**
 * An `ActionExecutor` for code actions (design 0330): Python (the system `python3`) and
 * JavaScript (`node`), one persistent interpreter per run and language holding its variables
 * from one step to the next, isolated with bubblewrap (no network, a read-only system, one
 * writable workspace per run, a private `/tmp`), limited in wall time and CPU time per action,
 * memory, processes and output; after every action that ran, its variables and workspace are
 * saved as content-addressed blobs in the run store, and a new interpreter (after a resume, a
 * crash, a fork or a kill) is restored from the newest snapshot the run's log records as executed.
 *
 * Statuses (SPEC §5.1): whatever the code does is `Executed`, the observation saying what
 * happened; only a sandbox that cannot serve is `EnvError`; a tool call or a language this
 * executor does not run is `NotExecuted`. `final_answer(value)` reports completion
 * (`envReportedCompletion`). Interruption kills the interpreter's process tree and is not caught.
 *
 * What is saved: Python's global names (dill, else pickle; modules by name; open files never),
 * JavaScript's global object properties (`var`, `globalThis.x = …`) and top-level `let`/`const`
 * bindings (found with acorn, restored as `let`/`const`); functions and classes are listed as not
 * saved. Both languages have a per-action CPU limit, set from the host with `prlimit --pid`.
 * Linux only.
 *
 * @since 0.1.0
 */
import * as Command from "@effect/platform/Command"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as NodeContext from "@effect/platform-node/NodeContext"
import type { Action, CodeAction } from "@polyloop/core/Action"
import { ActionExecutor } from "@polyloop/core/ActionExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import { ToolContext } from "@polyloop/core/ToolContext"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Driver from "./internal/driver.js"
import * as Memory from "./internal/memory.js"
import * as Sessions from "./internal/sessions.js"

/** The languages the sandbox runs. */
export type Language = Driver.Language

/** What is missing when the sandbox cannot be set up. */
export const Missing = Schema.Literal("bubblewrap", "prlimit", "setpriv", "user namespaces", "interpreter", "blob store", "sandbox")
/** @since 0.1.0 */
export type Missing = typeof Missing.Type

/** The sandbox cannot be set up on this machine: building the layer fails with what is missing. */
export class SandboxUnavailable extends Schema.TaggedError<SandboxUnavailable>()("SandboxUnavailable", {
  missing: Missing,
  detail: Schema.String
}) {
  override get message(): string {
    return `the code sandbox cannot be set up: ${this.missing} — ${this.detail}`
  }
}

/** Options of the sandbox executor. */
export interface Options {
  /** The languages to run (default `["python"]`). Fence tags `py`, `python3`; `js`, `node` are aliases. */
  readonly languages?: ReadonlyArray<Language>
  /**
   * `"bubblewrap"` (default): Linux namespaces through `bwrap`. `"none"`: the interpreter as a
   * plain child process with the same limits and no isolation — only when named here.
   */
  readonly isolation?: "bubblewrap" | "none"
  /** Where sessions' workspaces live on the host (default: a new directory under the OS temporary directory). */
  readonly root?: string
  /** Wall time per action (default 30 seconds), measured with `Clock`. */
  readonly wallTime?: Duration.DurationInput
  /** CPU time per action (default: the wall time), in whole seconds (rounded up): `RLIMIT_CPU` set from the host with `prlimit --pid`. */
  readonly cpuTime?: Duration.DurationInput
  /**
   * Memory of the whole sandbox, its processes and its private `/tmp` together (default 1 GiB):
   * a memory cgroup where the host allows one, else measured (see `memoryLimit`); each process's
   * address space is limited to it as well (`RLIMIT_AS`).
   */
  readonly memoryBytes?: number
  /**
   * How `memoryBytes` is enforced (design 0331, decision 6): `"auto"` (default) a memory cgroup
   * per interpreter (cgroup v2, else v1) where the host allows one, else the measured fallback;
   * `"measured"` the fallback only (the host reads the sandbox's resident memory and `/tmp` every
   * 20 ms and kills it past the bound). `memoryAccounting()` says what `"auto"` gets on this host.
   */
  readonly memoryLimit?: "auto" | "measured"
  /** Processes of the sandbox (`RLIMIT_NPROC`, default 64). */
  readonly maxProcesses?: number
  /** Characters of output kept in an observation; the rest is counted (default 20 000). */
  readonly outputLimit?: number
  /** Largest file the code may write (`RLIMIT_FSIZE`) and a snapshot keeps (default 256 MiB). */
  readonly maxFileBytes?: number
  /** Files a run's workspace starts with (relative paths), when it has no snapshot to restore. */
  readonly files?: Readonly<Record<string, string | Uint8Array>>
  /** How long an interpreter may take to start (default 20 seconds). */
  readonly startTimeout?: Duration.DurationInput
  /**
   * Called after an action ran and before its snapshot is taken (`BeforeSnapshot`), and after
   * the snapshot is stored, before the outcome is returned (`AfterSnapshot`): crash tests kill
   * the process there. Not for production use.
   */
  readonly crashPoint?: (point: { readonly runId: string; readonly step: number; readonly stage: "BeforeSnapshot" | "AfterSnapshot" }) => Effect.Effect<void>
  readonly python?: string
  readonly node?: string
  readonly bwrap?: string
  readonly prlimit?: string
  readonly setpriv?: string
}

const aliases: Record<string, Language> = {
  python: "python",
  py: "python",
  python3: "python",
  javascript: "javascript",
  js: "javascript",
  node: "javascript"
}

/** The language of a fence tag, if the sandbox knows it. */
export const languageOf = (tag: string): Language | undefined => aliases[tag.toLowerCase()]

/** How the sandbox's total memory is bounded on a host: a cgroup's limit, or measured by the host. */
export type MemoryAccounting = Memory.Accounting

/** What `memoryLimit: "auto"` gets on this host (`"cgroup v2"`, `"cgroup v1"` or `"measured"`). */
export const memoryAccounting = (): MemoryAccounting => {
  const control = Memory.detect("auto")
  Memory.release(control)
  return control.accounting
}

export { Manifest, refName, refPrefix } from "./internal/manifest.js"

/** The drivers, beside `src/` and `dist/` in the package. */
const driversDir = fileURLToPath(new URL("../drivers/", import.meta.url))

const which = (name: string, given: string | undefined): string | undefined => {
  const candidates = given !== undefined ? [given] : ["/usr/bin/" + name, "/bin/" + name, ...(process.env.PATH ?? "").split(":").map((dir) => path.join(dir, name))]
  for (const candidate of candidates) {
    try {
      fs.accessSync(candidate, fs.constants.X_OK)
      return candidate
    } catch {
      // next
    }
  }
  return undefined
}

/**
 * The executor over the `RunLogStore` in context (its `blobs` hold the snapshots). Fails with
 * `SandboxUnavailable` when bubblewrap, `prlimit`, user namespaces, an interpreter or the store's
 * blobs are missing: a probe sandbox of each language is started once here.
 */
export const make = (
  options: Options = {}
): Effect.Effect<ActionExecutor.Service, SandboxUnavailable, RunLogStore | Scope.Scope | CommandExecutor.CommandExecutor> =>
  Effect.gen(function*() {
    const store = yield* RunLogStore
    const blobs = store.blobs
    if (blobs === undefined) {
      return yield* new SandboxUnavailable({ missing: "blob store", detail: "the run store has no blobs capability (RunLogStore.Service.blobs); use the memory or SQL store" })
    }
    const isolation = options.isolation ?? "bubblewrap"
    const languages = new Set<Language>(options.languages ?? ["python"])
    const need = (name: string, given: string | undefined, missing: Missing) => {
      const found = which(name, given)
      return found === undefined
        ? Effect.fail(new SandboxUnavailable({ missing, detail: `${given ?? name} was not found${missing === "bubblewrap" ? " (Debian: apt-get install bubblewrap)" : ""}` }))
        : Effect.succeed(found)
    }
    const bwrap = isolation === "bubblewrap" ? yield* need("bwrap", options.bwrap, "bubblewrap") : ""
    const setpriv = isolation === "bubblewrap" && Driver.hostIsRoot() ? yield* need("setpriv", options.setpriv, "setpriv") : undefined
    const prlimit = yield* need("prlimit", options.prlimit, "prlimit")
    const python = languages.has("python") ? yield* need("python3", options.python ?? "/usr/bin/python3", "interpreter") : "/usr/bin/python3"
    const node = languages.has("javascript") ? yield* need("node", options.node ?? (fs.existsSync("/usr/bin/node") ? "/usr/bin/node" : process.execPath), "interpreter") : "/usr/bin/node"
    const wallMillis = Duration.toMillis(Duration.decode(options.wallTime ?? Duration.seconds(30)))
    const cpuSeconds = Math.max(1, Math.ceil(Duration.toMillis(Duration.decode(options.cpuTime ?? wallMillis)) / 1000))
    const startMillis = Duration.toMillis(Duration.decode(options.startTimeout ?? Duration.seconds(20)))
    const outputLimit = options.outputLimit ?? 20_000
    const maxFileBytes = options.maxFileBytes ?? 256 * 1024 * 1024
    const executor = yield* Effect.context<CommandExecutor.CommandExecutor>()
    // The unit of /proc/<pid>/stat's CPU times (amendment 1); USER_HZ is 100 wherever getconf is missing.
    const clockTicks = yield* Command.string(Command.make(which("getconf", undefined) ?? "getconf", "CLK_TCK")).pipe(
      Effect.map((text) => Number(text.trim())),
      Effect.map((ticks) => (Number.isInteger(ticks) && ticks > 0 ? ticks : 100)),
      Effect.orElseSucceed(() => 100)
    )

    // The sessions' root: made here, removed with the layer.
    const root = yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          const base = options.root ?? os.tmpdir()
          fs.mkdirSync(base, { recursive: true })
          const dir = fs.mkdtempSync(path.join(base, "polyloop-sandbox-"))
          fs.chmodSync(dir, 0o711)
          // The drivers are copied here: the sandbox's user may not be able to reach the package.
          fs.mkdirSync(path.join(dir, "drivers"), { mode: 0o755 })
          for (const name of ["python.py", "javascript.cjs"]) {
            fs.copyFileSync(path.join(driversDir, name), path.join(dir, "drivers", name))
            fs.chmodSync(path.join(dir, "drivers", name), 0o644)
          }
          return dir
        },
        catch: (error) => new SandboxUnavailable({ missing: "sandbox", detail: `the sessions' directory could not be made under ${options.root ?? os.tmpdir()}: ${String(error)}` })
      }),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    )
    const memory = yield* Effect.acquireRelease(
      Effect.sync(() => Memory.detect(options.memoryLimit ?? "auto")),
      (control) => Effect.sync(() => Memory.release(control))
    )
    const env: Driver.Environment = {
      isolation,
      bwrap,
      prlimit,
      setpriv,
      python,
      node,
      drivers: path.join(root, "drivers"),
      memoryBytes: options.memoryBytes ?? 1024 * 1024 * 1024,
      maxProcesses: options.maxProcesses ?? 64,
      maxFileBytes,
      maxOpenFiles: 256,
      clockTicks,
      memory
    }
    const owner = isolation === "bubblewrap" && Driver.hostIsRoot() ? Driver.nobody : undefined
    if (owner !== undefined) {
      // The sandbox runs as nobody: every directory above the sessions must be searchable by others.
      for (let dir = path.dirname(root); ; dir = path.dirname(dir)) {
        const mode = fs.statSync(dir).mode
        if ((mode & 0o001) === 0) {
          return yield* new SandboxUnavailable({ missing: "sandbox", detail: `the sandbox runs as uid ${owner.uid}, which cannot reach ${root}: ${dir} is not searchable by others (chmod o+x, or choose another root)` })
        }
        if (dir === path.dirname(dir)) break
      }
    }

    const newDirs = (): { readonly dir: string; readonly dirs: Driver.SessionDirs } => {
      const dir = fs.mkdtempSync(path.join(root, "s-"))
      fs.chmodSync(dir, 0o711)
      const dirs = { workspace: path.join(dir, "workspace"), state: path.join(dir, "state") }
      fs.mkdirSync(dirs.workspace, { mode: 0o755 })
      fs.mkdirSync(dirs.state, { mode: 0o700 })
      if (owner !== undefined) {
        fs.chownSync(dirs.workspace, owner.uid, owner.gid)
        fs.chownSync(dirs.state, owner.uid, owner.gid)
      }
      return { dir, dirs }
    }

    // The probe: each language's sandbox must start once.
    for (const language of languages) {
      const probe = yield* Effect.try({
        try: newDirs,
        catch: (error) => new SandboxUnavailable({ missing: "sandbox", detail: `a session's directories could not be made: ${String(error)}` })
      })
      const started = yield* Effect.either(Driver.start(env, probe.dirs, language, 100, startMillis).pipe(Effect.provide(executor)))
      // The per-action CPU limit must be settable on it (amendment 1).
      const limited = started._tag === "Right" ? yield* Effect.either(Driver.limitCpu(env, started.right, cpuSeconds, "action").pipe(Effect.provide(executor))) : undefined
      if (started._tag === "Right") yield* Driver.kill(started.right)
      fs.rmSync(probe.dir, { recursive: true, force: true })
      if (limited !== undefined && limited._tag === "Left") {
        return yield* new SandboxUnavailable({ missing: "prlimit", detail: `the ${language} interpreter's CPU limit cannot be set: ${limited.left.message}` })
      }
      if (started._tag === "Left") {
        const detail = started.left.message
        const missing: Missing = /namespace|uid map|unshare|Operation not permitted|setting up/i.test(detail) ? "user namespaces" : "sandbox"
        return yield* new SandboxUnavailable({ missing, detail })
      }
    }

    const { dispose, lockOf, runAction, sessionFor } = yield* Sessions.make({
      env, store, blobs, executor, owner, newDirs, outputLimit, startMillis, cpuSeconds, wallMillis, maxFileBytes,
      files: options.files, crashPoint: options.crashPoint
    })

    let standaloneStep = 0
    const execute = (action: Action): Effect.Effect<ActionOutcome.ActionOutcome> => {
      if (action._tag !== "CodeAction") {
        return Effect.succeed(ActionOutcome.notExecuted(`This agent acts by code; the tool call ${action.name} was not run.`))
      }
      const language = languageOf(action.language)
      if (language === undefined || !languages.has(language)) {
        return Effect.succeed(ActionOutcome.notExecuted(`This sandbox runs ${[...languages].join(" and ")} code, not ${action.language}.`))
      }
      return Effect.flatMap(Effect.serviceOption(ToolContext), (context) => {
        const runId = Option.isSome(context) ? context.value.runId : "standalone"
        const step = Option.isSome(context) ? context.value.step : standaloneStep++
        return lockOf(runId).withPermits(1)(
          Effect.gen(function*() {
            const session = yield* sessionFor(runId, step)
            return yield* runAction(session, language, (action as CodeAction).code, step).pipe(
              // Interruption: the interpreters are killed and the session forgotten; the next
              // action restores from the log's last executed snapshot. Nothing is caught.
              Effect.onInterrupt(() => dispose(session)),
              // final_answer ends the run: its interpreters and workspace are released (an action
              // that still comes restores from the snapshot just stored).
              Effect.tap((outcome) => (outcome.envReportedCompletion ? dispose(session) : Effect.void)),
              Effect.catchTag("SessionFailure", (failure) =>
                Effect.as(dispose(session), ActionOutcome.envError(`sandbox: ${Sessions.hostPathsOut(failure.message, session)}`)))
            )
          }).pipe(
            Effect.catchTag("SessionFailure", (failure) => Effect.succeed(ActionOutcome.envError(`sandbox: ${failure.message}`)))
          )
        )
      }).pipe(Effect.withSpan("Sandbox.execute", { attributes: { "polyloop.language": action.language } }))
    }

    return ActionExecutor.of({
      execute,
      // A code action interrupted mid-run is settled as any "Never" action; what the sandbox refuses replays (design 0005).
      replayPolicy: (action) =>
        action._tag === "CodeAction" && languageOf(action.language) !== undefined && languages.has(languageOf(action.language)!) ? "Never" : "Always"
    })
  })

/** The sandbox executor as a layer over the `RunLogStore` in context (`CommandExecutor` from Node). */
export const layer = (options: Options = {}): Layer.Layer<ActionExecutor, SandboxUnavailable, RunLogStore> =>
  Layer.scoped(ActionExecutor, make(options)).pipe(Layer.provide(NodeContext.layer))
