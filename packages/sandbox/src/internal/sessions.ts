/**
 * A run's sessions (design 0330, decisions 1–4; design 0331): a session is one run's workspace on
 * the host and its live interpreters; this module makes them (restoring the newest snapshot the
 * run's log records as executed), runs one action in one, and snapshots it after. `Sandbox.ts`
 * builds the environment and the executor around it.
 *
 * @internal
 */
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import * as Blobs from "@polyloop/core/Blobs"
import { RunId } from "@polyloop/core/Ids"
import type { RunLogStore } from "@polyloop/core/RunLogStore"
import type * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import type { Output } from "./channels.js"
import * as Driver from "./driver.js"
import { SessionFailure } from "./failure.js"
import * as Lexical from "./lexical.js"
import { decodeManifest, type LanguageState, type Manifest, refName, refPrefix } from "./manifest.js"
import * as Memory from "./memory.js"
import * as Workspace from "./workspace.js"

/** What the sessions need of the layer that makes them. */
export interface SessionsContext {
  readonly env: Driver.Environment
  readonly store: RunLogStore.Service
  readonly blobs: Blobs.Service
  readonly executor: Context.Context<CommandExecutor.CommandExecutor>
  readonly owner: { readonly uid: number; readonly gid: number } | undefined
  readonly newDirs: () => { readonly dir: string; readonly dirs: Driver.SessionDirs }
  readonly outputLimit: number
  readonly startMillis: number
  readonly cpuSeconds: number
  readonly wallMillis: number
  readonly maxFileBytes: number
  readonly files: Readonly<Record<string, string | Uint8Array>> | undefined
  readonly crashPoint:
    | ((point: { readonly runId: string; readonly step: number; readonly stage: "BeforeSnapshot" | "AfterSnapshot" }) => Effect.Effect<void>)
    | undefined
}

export interface Session {
  readonly runId: string
  readonly dir: string
  readonly dirs: Driver.SessionDirs
  readonly live: Map<Driver.Language, Driver.Live>
  readonly cache: Workspace.HashCache
  last: Manifest | undefined
  /** Said to the model at the start of the next observation (what a restart lost). */
  note: string | undefined
}

const seconds = (millis: number) => {
  const s = millis / 1000
  return Number.isInteger(s) ? `${s} s` : `${s.toFixed(1)} s`
}

export const hostPathsOut = (text: string, session: Session): string =>
  text.split(session.dirs.workspace).join(Driver.sandboxWorkspace).split(session.dir).join("/.polyloop")

/** The sessions of one executor; their finalizer disposes of every one left. */
export const make = (ctx: SessionsContext): Effect.Effect<{
  readonly dispose: (session: Session) => Effect.Effect<void>
  readonly lockOf: (runId: string) => Effect.Semaphore
  readonly sessionFor: (runId: string, step: number) => Effect.Effect<Session, SessionFailure>
  readonly runAction: (session: Session, language: Driver.Language, code: string, step: number) => Effect.Effect<ActionOutcome.ActionOutcome, SessionFailure>
}, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { blobs, cpuSeconds, env, executor, maxFileBytes, newDirs, outputLimit, owner, startMillis, store, wallMillis } = ctx
    const options = { files: ctx.files, crashPoint: ctx.crashPoint }
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
    const liveOf = (session: Session, language: Driver.Language): Effect.Effect<Driver.Live, SessionFailure> =>
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
    const snapshot = (session: Session, step: number, ran: Driver.Language, notes: Array<string>): Effect.Effect<void, SessionFailure> =>
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

    /**
     * After the driver's reply, the action's output up to its boundary: waited for while bytes
     * still arrive (100 MB through a pipe on a loaded machine takes longer than any fixed grace),
     * given up after 5 s with none — the code closed its standard output, say. The wall-time
     * limit around the action bounds it all.
     */
    const drained = (output: Output, finished: Deferred.Deferred<void>): Effect.Effect<void> =>
      Effect.gen(function*() {
        let idle = 0
        while (idle < 5) {
          const before = output.bytesRead
          if (Option.isSome(yield* Effect.timeoutOption(Deferred.await(finished), "1 second"))) return
          idle = output.bytesRead === before ? idle + 1 : 0
        }
      })

    /** One action in a session, then its snapshot. */
    const runAction = (session: Session, language: Driver.Language, code: string, step: number): Effect.Effect<ActionOutcome.ActionOutcome, SessionFailure> =>
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
            reply === undefined ? Effect.succeed(reply) : Effect.as(drained(live.output, finished), reply)),
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

    return { dispose, lockOf, sessionFor, runAction }
  })
