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
import * as Blobs from "@polyloop/core/Blobs"
import { RunId } from "@polyloop/core/Ids"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import { ToolContext } from "@polyloop/core/ToolContext"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Driver from "./internal/driver.js"
import { SessionFailure } from "./internal/failure.js"
import * as Lexical from "./internal/lexical.js"
import * as Memory from "./internal/memory.js"
import * as Workspace from "./internal/workspace.js"

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

/** The ref prefix of a run's snapshots. */
export const refPrefix = "sandbox/"

/** The ref name of the snapshot after step `step`. */
export const refName = (step: number): string => `${refPrefix}${String(step).padStart(8, "0")}`

const LanguageState = Schema.Struct({
  hash: Schema.String,
  saved: Schema.Array(Schema.String),
  unsaved: Schema.Array(Schema.Struct({ name: Schema.String, reason: Schema.String })),
  pickler: Schema.String
})

/** A snapshot: the workspace's entries, each language's saved variables, what was not saved. */
export const Manifest = Schema.Struct({
  version: Schema.Literal(1),
  runId: Schema.String,
  step: Schema.Number,
  entries: Schema.Array(Workspace.Entry),
  skipped: Schema.Array(Workspace.Skipped),
  states: Schema.Record({ key: Schema.String, value: LanguageState })
})
/** @since 0.1.0 */
export interface Manifest extends Schema.Schema.Type<typeof Manifest> {}

const decodeManifest = Schema.decodeUnknownEither(Schema.parseJson(Manifest))

/** The drivers, beside `src/` and `dist/` in the package. */
const driversDir = fileURLToPath(new URL("../drivers/", import.meta.url))

interface Session {
  readonly runId: string
  readonly dir: string
  readonly dirs: Driver.SessionDirs
  readonly live: Map<Language, Driver.Live>
  readonly cache: Workspace.HashCache
  last: Manifest | undefined
  /** Said to the model at the start of the next observation (what a restart lost). */
  note: string | undefined
}

const seconds = (millis: number) => {
  const s = millis / 1000
  return Number.isInteger(s) ? `${s} s` : `${s.toFixed(1)} s`
}

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

const hostPathsOut = (text: string, session: Session): string =>
  text.split(session.dirs.workspace).join(Driver.sandboxWorkspace).split(session.dir).join("/.polyloop")

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

    const sessions = new Map<string, Session>()
    const locks = new Map<string, Effect.Semaphore>()
    const lockOf = (runId: string) => {
      let lock = locks.get(runId)
      if (lock === undefined) locks.set(runId, lock = Effect.unsafeMakeSemaphore(1))
      return lock
    }

    const dispose = (session: Session): Effect.Effect<void> =>
      Effect.gen(function*() {
        if (sessions.get(session.runId) === session) sessions.delete(session.runId)
        for (const live of session.live.values()) yield* Driver.kill(live)
        session.live.clear()
        yield* Effect.sync(() => fs.rmSync(session.dir, { recursive: true, force: true }))
      })
    yield* Effect.addFinalizer(() => Effect.forEach([...sessions.values()], dispose, { discard: true }))

    const storeFailure = (what: string) => (error: { readonly message: string }) =>
      new SessionFailure({ reason: "Store", message: `${what}: ${error.message}` })

    const readManifest = (hash: string) =>
      Effect.gen(function*() {
        const bytes = yield* blobs.get(hash as Blobs.BlobHash).pipe(Effect.mapError(storeFailure("reading a snapshot")))
        if (Option.isNone(bytes)) return yield* new SessionFailure({ reason: "Restore", message: `snapshot ${hash} is missing from the store` })
        const decoded = decodeManifest(Buffer.from(bytes.value).toString("utf8"))
        if (decoded._tag === "Left") return yield* new SessionFailure({ reason: "Restore", message: `snapshot ${hash} cannot be read` })
        return decoded.right
      })

    /**
     * The newest snapshot of `runId` before `beforeStep` whose step the log records as an
     * executed code action; else, for a fork, its parent's before the fork's step (decision 4).
     */
    const restorePoint = (runId: string, beforeStep: number, depth: number): Effect.Effect<Manifest | undefined, SessionFailure> =>
      Effect.gen(function*() {
        if (depth > 64) return undefined
        const log = yield* store.readLog(RunId.make(runId)).pipe(Effect.mapError(storeFailure("reading the run's log")))
        const executed = new Set<number>()
        for (const result of log.results) {
          if (result.outcome.status === "Executed" && result.action._tag === "CodeAction") executed.add(result.step)
        }
        const refs = yield* blobs.listRefs(runId, refPrefix).pipe(Effect.mapError(storeFailure("listing snapshots")))
        // Without a log (the executor used outside `Agent.run`) every snapshot counts.
        const logged = Option.isSome(log.started)
        for (let i = refs.length - 1; i >= 0; i--) {
          const step = Number(refs[i]!.name.slice(refPrefix.length))
          if (Number.isInteger(step) && step < beforeStep && (!logged || executed.has(step))) return yield* readManifest(refs[i]!.hash)
        }
        const parent = Option.flatMap(log.started, (started) => Option.fromNullable(started.forkedFrom))
        if (Option.isNone(parent)) return undefined
        return yield* restorePoint(parent.value.runId, Math.min(beforeStep, parent.value.step), depth + 1)
      })

    const newSession = (runId: string, step: number): Effect.Effect<Session, SessionFailure> =>
      Effect.gen(function*() {
        const made = yield* Effect.try({
          try: newDirs,
          catch: (error) => new SessionFailure({ reason: "Start", message: `the workspace could not be made: ${String(error)}` })
        })
        const session: Session = { runId, dir: made.dir, dirs: made.dirs, live: new Map(), cache: new Map(), last: undefined, note: undefined }
        const point = yield* restorePoint(runId, step, 0).pipe(Effect.tapError(() => dispose(session)))
        if (point !== undefined) {
          yield* Workspace.restore(made.dirs.workspace, point.entries, blobs, session.cache, owner).pipe(Effect.tapError(() => dispose(session)))
          session.last = point
        } else if (options.files !== undefined) {
          yield* Effect.try({
            try: () => {
              for (const [name, content] of Object.entries(options.files ?? {})) {
                const full = path.join(made.dirs.workspace, name)
                if (!full.startsWith(made.dirs.workspace + path.sep)) throw new Error(`${name} is not inside the workspace`)
                fs.mkdirSync(path.dirname(full), { recursive: true })
                fs.writeFileSync(full, content)
                if (owner !== undefined) fs.chownSync(full, owner.uid, owner.gid)
              }
            },
            catch: (error) => new SessionFailure({ reason: "Start", message: `the workspace's files could not be written: ${String(error)}` })
          }).pipe(Effect.tapError(() => dispose(session)))
        }
        sessions.set(runId, session)
        return session
      })

    /** The run's session: the live one unless another process has snapshotted the run since (then it is stale). */
    const sessionFor = (runId: string, step: number): Effect.Effect<Session, SessionFailure> =>
      Effect.gen(function*() {
        const existing = sessions.get(runId)
        if (existing !== undefined) {
          const refs = yield* blobs.listRefs(runId, refPrefix).pipe(Effect.mapError(storeFailure("listing snapshots")))
          const newest = refs.length === 0 ? -1 : Number(refs[refs.length - 1]!.name.slice(refPrefix.length))
          const mine = existing.last?.runId === runId ? existing.last.step : -1
          if (newest <= mine && mine < step) return existing
          yield* dispose(existing)
        }
        return yield* newSession(runId, step)
      })

    /** The session's interpreter of `language`, started (and restored from the last snapshot) if needed. */
    const liveOf = (session: Session, language: Language): Effect.Effect<Driver.Live, SessionFailure> =>
      Effect.gen(function*() {
        const running = session.live.get(language)
        if (running !== undefined && !running.memory.exceeded) return running
        let killed: string | undefined
        if (running !== undefined) {
          // The measured fallback killed it between actions (what the last one left in /tmp or in
          // a thread): it starts again from the last snapshot, and the model is told.
          yield* Driver.kill(running)
          session.live.delete(language)
          killed = `[the ${language} sandbox went over its ${Math.round(env.memoryBytes / (1024 * 1024))} MiB of memory after the last action and was killed; its interpreter was restarted${session.last === undefined ? "" : ` with the variables saved after step ${session.last.step}`}]`
        }
        const live = yield* Driver.start(env, session.dirs, language, outputLimit, startMillis).pipe(Effect.provide(executor))
        session.live.set(language, live)
        const state = session.last?.states[language]
        if (state !== undefined) {
          const bytes = yield* blobs.get(state.hash as Blobs.BlobHash).pipe(Effect.mapError(storeFailure("reading saved variables")))
          if (Option.isNone(bytes)) return yield* new SessionFailure({ reason: "Restore", message: `the saved variables ${state.hash} are missing from the store` })
          const file = path.join(session.dirs.state, Driver.stateFile(language))
          yield* Effect.try({
            try: () => {
              // The state directory is the sandbox's to write: whatever it left there (a link to a
              // host file, say) is removed, and the file is created anew, never through a link.
              fs.rmSync(file, { force: true, recursive: true })
              fs.writeFileSync(file, bytes.value, { flag: "wx", mode: 0o600 })
              if (owner !== undefined) fs.chownSync(file, owner.uid, owner.gid)
            },
            catch: (error) => new SessionFailure({ reason: "Restore", message: String(error) })
          })
          const view = Driver.viewOf(env, session.dirs)
          const id = yield* Driver.send(live, { op: "load", path: `${view.state}/${Driver.stateFile(language)}` })
          const loaded = yield* Driver.awaitReply(live, id)
          if (loaded === undefined || typeof loaded.failed === "string") {
            return yield* new SessionFailure({ reason: "Restore", message: `the ${language} interpreter could not load its saved variables${loaded === undefined ? "" : `: ${String(loaded.failed)}`}` })
          }
          const lost = [
            ...state.unsaved.map((u) => `${u.name} (${u.reason})`),
            ...(Array.isArray(loaded.lost) ? (loaded.lost as ReadonlyArray<{ readonly name: string; readonly reason: string }>).map((l) => `${l.name} (${l.reason})`) : [])
          ]
          if (lost.length > 0) {
            session.note = `[the ${language} interpreter was restarted with the variables saved after step ${session.last!.step}; not restored: ${lost.join(", ")}]`
          }
        }
        if (killed !== undefined) session.note = session.note === undefined ? killed : `${killed}\n${session.note}`
        return live
      })

    /**
     * Saves the session after an action of `step` that ran: variables, workspace, manifest, ref.
     * `notes` gets what the observation must say when the interpreter ended while it saved.
     */
    const snapshot = (session: Session, step: number, ran: Language, notes: Array<string>): Effect.Effect<void, SessionFailure> =>
      Effect.gen(function*() {
        const states: Record<string, typeof LanguageState.Type> = { ...(session.last?.states ?? {}) }
        const fresh: Array<Uint8Array> = []
        const live = session.live.get(ran)
        if (live !== undefined) {
          const view = Driver.viewOf(env, session.dirs)
          const id = yield* Driver.send(live, { op: "save", path: `${view.state}/${Driver.stateFile(ran)}`, limit: maxFileBytes })
          const saved = yield* Driver.awaitReply(live, id)
          if (saved === undefined) {
            // The code's doing while it saved — a thread it left wrote to the driver's channel
            // (design 0331, decision 5), the sandbox ran out of memory, a thread exited the
            // interpreter: the interpreter is killed, its variables stay as the last snapshot has them.
            const exit = live.foreign.flooded ? {} : yield* Driver.exitOf(live)
            const oomKilled = live.group !== undefined && Memory.oomKills(env.memory, live.group) > 0
            yield* Driver.kill(live)
            session.live.delete(ran)
            notes.push(
              live.foreign.flooded
                ? `the code wrote ${live.foreign.bytes} bytes to the sandbox driver's reply channel; the interpreter was killed`
                : live.memory.exceeded || (oomKilled && exit.signal === "SIGKILL")
                ? `out of memory while its variables were saved: the sandbox's ${Math.round(env.memoryBytes / (1024 * 1024))} MiB are used up; the interpreter was killed`
                : `the interpreter ended while its variables were saved (${exit.code !== undefined ? `status ${exit.code}` : `signal ${exit.signal ?? "?"}`})`
            )
          } else if (typeof saved.failed === "string") {
            return yield* new SessionFailure({ reason: "Snapshot", message: `the ${ran} interpreter could not save its variables: ${String(saved.failed)}` })
          } else {
            const bytes = yield* Effect.try({
              try: () => {
                const file = path.join(session.dirs.state, Driver.stateFile(ran))
                return Workspace.readRegular(file, maxFileBytes)
              },
              catch: (error) => new SessionFailure({ reason: "Snapshot", message: `the saved variables could not be read: ${String(error)}` })
            })
            fresh.push(bytes)
            states[ran] = {
              hash: Blobs.hashOf(bytes),
              saved: Array.isArray(saved.saved) ? (saved.saved as ReadonlyArray<string>) : [],
              unsaved: Array.isArray(saved.unsaved) ? (saved.unsaved as ReadonlyArray<{ readonly name: string; readonly reason: string }>) : [],
              pickler: typeof saved.pickler === "string" ? saved.pickler : "?"
            }
          }
        }
        const walked = yield* Workspace.walk(session.dirs.workspace, session.cache, maxFileBytes)
        const wanted = [...walked.fresh.keys()] as Array<Blobs.BlobHash>
        const present = yield* blobs.has(wanted).pipe(Effect.mapError(storeFailure("looking up blobs")))
        for (const [hash, data] of walked.fresh) if (!present.has(hash)) fresh.push(data)
        const manifest: Manifest = { version: 1, runId: session.runId, step, entries: walked.entries, skipped: walked.skipped, states }
        const manifestBytes = Buffer.from(JSON.stringify(manifest), "utf8")
        fresh.push(manifestBytes)
        yield* blobs.putAll(fresh).pipe(Effect.mapError(storeFailure("storing the snapshot")))
        yield* blobs.setRef(session.runId, refName(step), Blobs.hashOf(manifestBytes)).pipe(Effect.mapError(storeFailure("storing the snapshot")))
        session.last = manifest
      })

    /** One action in a session, then its snapshot. */
    const runAction = (session: Session, language: Language, code: string, step: number): Effect.Effect<ActionOutcome.ActionOutcome, SessionFailure> =>
      Effect.gen(function*() {
        const live = yield* liveOf(session, language)
        const note = session.note
        session.note = undefined
        const boundary = `\u0000polyloop-end-${randomBytes(12).toString("hex")}\u0000`
        const finished = yield* Deferred.make<void>()
        yield* Driver.limitCpu(env, live, cpuSeconds, "action").pipe(Effect.provide(executor))
        live.output.begin(boundary, finished)
        // JavaScript's top-level let/const/class are lexical bindings: the driver is told their names to save them (amendment 2).
        const lexical = language === "javascript" ? Lexical.topLevel(code) : []
        const oomBefore = live.group === undefined ? 0 : Memory.oomKills(env.memory, live.group)
        // In its own pid namespace the driver kills what the action started (design 0331, decision 2).
        const id = yield* Driver.send(live, { op: "exec", code, name: `step ${step}`, boundary, lexical, reap: env.isolation === "bubblewrap" })
        const awaited = yield* Effect.timeoutOption(
          Effect.flatMap(Driver.awaitReply(live, id), (reply) =>
            reply === undefined ? Effect.succeed(reply) : Effect.as(Effect.timeoutOption(Deferred.await(finished), "5 seconds"), reply)),
          Duration.millis(wallMillis)
        )
        // Without a pid namespace the host kills what the action started.
        if (env.isolation === "none") yield* Effect.sync(() => Driver.killDescendants(live, false))
        const output = live.output.result()
        const parts: Array<string> = []
        if (note !== undefined) parts.push(note)
        if (output.text !== "") parts.push(output.text.endsWith("\n") ? output.text.slice(0, -1) : output.text)
        let completed = false
        const restarted = () => {
          const step = session.last?.step
          return step === undefined
            ? "the interpreter was restarted; its variables are gone"
            : `the interpreter was restarted with the variables saved after step ${step}`
        }
        if (Option.isNone(awaited)) {
          yield* Driver.kill(live)
          session.live.delete(language)
          parts.push(`killed after ${seconds(wallMillis)} (wall-time limit); ${restarted()}`)
        } else if (awaited.value === undefined && live.foreign.flooded) {
          // The code wrote to the driver's reply channel: the driver cannot be trusted (design 0331, decision 5).
          yield* Driver.kill(live)
          session.live.delete(language)
          parts.push(`the code wrote ${live.foreign.bytes} bytes to the sandbox driver's reply channel; the interpreter was killed; ${restarted()}`)
        } else if (awaited.value === undefined) {
          const exit = yield* Driver.exitOf(live)
          const said = live.diagnostics.join("\n")
          // Read before the kill removes the cgroup.
          const oomKilled = live.group !== undefined && Memory.oomKills(env.memory, live.group) > oomBefore
          yield* Driver.kill(live)
          session.live.delete(language)
          const oom = live.memory.exceeded || (oomKilled && exit.signal === "SIGKILL")
          const how = oom
            ? `out of memory: the sandbox's ${Math.round(env.memoryBytes / (1024 * 1024))} MiB are used up; the interpreter was killed`
            : /heap out of memory|MemoryError|Cannot allocate memory|std::bad_alloc/i.test(said)
            ? "out of memory: the interpreter was killed"
            : exit.signal === "SIGXCPU"
            ? `killed: CPU time limit of ${cpuSeconds} s exceeded`
            : exit.signal !== undefined
            ? `the interpreter was killed (${exit.signal})`
            : `the interpreter exited (status ${exit.code ?? "?"})`
          parts.push(`${how}; ${restarted()}`)
        } else {
          const reply = awaited.value
          const error = reply.error as { readonly type?: string; readonly message?: string; readonly traceback?: string } | null | undefined
          if (error !== null && error !== undefined) {
            const text = typeof error.traceback === "string" && error.traceback !== "" ? error.traceback.trimEnd() : `${error.type}: ${error.message}`
            const memory = error.type === "MemoryError" || (error.type === "RangeError" && /allocation failed/i.test(error.message ?? ""))
            parts.push(memory ? `out of memory\n${text}` : text)
          }
          if (typeof reply.exit === "number" && reply.exit !== 0) parts.push(`the code exited with status ${reply.exit}`)
          if (typeof reply.final === "string") {
            parts.push(reply.final)
            completed = true
          }
        }
        // The snapshot's save is not the action's: it gets CPU time of its own.
        const still = session.live.get(language)
        if (still !== undefined) yield* Driver.limitCpu(env, still, cpuSeconds, "save").pipe(Effect.provide(executor))
        if (options.crashPoint !== undefined) yield* options.crashPoint({ runId: session.runId, step, stage: "BeforeSnapshot" })
        const notes: Array<string> = []
        yield* snapshot(session, step, language, notes)
        for (const note of notes) parts.push(`${note}; ${restarted()}`)
        if (options.crashPoint !== undefined) yield* options.crashPoint({ runId: session.runId, step, stage: "AfterSnapshot" })
        const observation = hostPathsOut(parts.length === 0 ? "(no output)" : parts.join("\n"), session)
        return ActionOutcome.executed(observation, { envReportedCompletion: completed, truncatedChars: output.truncated })
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
                Effect.as(dispose(session), ActionOutcome.envError(`sandbox: ${hostPathsOut(failure.message, session)}`)))
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
