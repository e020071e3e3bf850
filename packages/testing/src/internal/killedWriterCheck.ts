/**
 * The killed-writer property of the store contract (SPEC §14: atomicity and prefix durability,
 * which one process cannot check on itself). A child process (`killedWriter.ts`) opens the
 * user's store over fresh storage with the user's module and writes a generated run, printing an
 * acknowledgement after each write returns; the parent kills it with SIGKILL a moment after a
 * random number of acknowledgements, opens the store over the same storage itself and reads the
 * run back. The log must be whole writes — no write torn by the kill — and hold every
 * acknowledged write; the next child goes on from what is there. After the last kill a child
 * writes the run to its end, and the log must be the whole run.
 *
 * @internal
 */
import * as Command from "@effect/platform/Command"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import * as RunLog from "@polyloop/core/RunLog"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Stream from "effect/Stream"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as Arb from "./arbitraries.js"
import { diff } from "./equal.js"
import { ContractViolation, violation } from "./property.js"
import { build, describeError } from "./subject.js"
import { describeWrite, killedWriterRun } from "./writes.js"

/** Where the store under test comes from in another process. */
export interface KilledWriter {
  /**
   * The module (a file URL, or an absolute path) whose export opens the store:
   * `(storage: string) => Layer<RunLogStore>`, `storage` being a fresh directory the store
   * keeps its data in (or derives its database's name from). The same module opens the store
   * in the child that is killed and in the test process that reads the run back.
   */
  readonly module: string | URL
  /** The export's name (default `"open"`). */
  readonly export?: string
  /** How many times each case kills the writer (default 8). */
  readonly kills?: number
}

/** One kill: after this many acknowledged writes, and this many milliseconds more. */
export interface Kill {
  readonly acks: number
  readonly delay: number
}

/** The child's script, next to this module: `.ts` in the source, `.js` in the published `dist/`. */
const script = fileURLToPath(new URL(`./killedWriter${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url))
/** The kit's own directory: the child runs there, so `--import tsx` resolves as the kit does. */
const kitDirectory = Path.resolve(Path.dirname(script), "..", "..")
/** How long a child may stay silent before the case fails. */
const silence = Duration.seconds(60)

const hrefOf = (module: string | URL): string =>
  module instanceof URL ? module.href : module.startsWith("file:") ? module : pathToFileURL(module).href

const needsTsx = Effect.try({
  try: () => createRequire(import.meta.url).resolve("tsx"),
  catch: () =>
    new ContractViolation({
      message: "the killed-writer property runs your store in a child Node process through tsx, which cannot be resolved here: install it (npm i -D tsx)"
    })
})

type Opener = (storage: string) => Layer.Layer<RunLogStore, unknown>

const loadOpener = (href: string, name: string): Effect.Effect<Opener, ContractViolation> =>
  Effect.tryPromise({
    try: () => import(href) as Promise<Record<string, unknown>>,
    catch: (error) => new ContractViolation({ message: `could not import the killed-writer module ${href}: ${describeError(error)}` })
  }).pipe(
    Effect.flatMap((module) => {
      const open = module[name]
      return typeof open === "function"
        ? Effect.succeed(open as Opener)
        : violation(`the killed-writer module ${href} has no function export "${name}": (storage: string) => Layer<RunLogStore>`)
    })
  )

/** What one child printed: the highest write it acknowledged, whether it finished, its error. */
interface Life {
  readonly lastAcked: number
  readonly done: boolean
  readonly error: string | undefined
  readonly killed: boolean
}

/**
 * Runs one child from write `from`; with `kill`, kills it with SIGKILL `kill.delay` ms after its
 * `kill.acks`-th acknowledgement, or after its last write if it gets there first (such a child
 * holds there instead of ending: the kill always lands). Reads every line the child printed
 * before it died.
 */
const live = (
  args: { readonly href: string; readonly name: string; readonly storage: string; readonly seed: number; readonly from: number },
  kill: Kill | undefined
) =>
  Effect.scoped(
    Effect.gen(function*() {
      const command = Command.make(
        process.execPath,
        "--import",
        "tsx",
        script,
        args.href,
        args.name,
        args.storage,
        String(args.seed),
        String(args.from),
        // A child to be killed holds after its last write instead of ending: the kill always lands.
        ...(kill === undefined ? [] : ["hold"])
      ).pipe(Command.workingDirectory(kitDirectory))
      const child = yield* Effect.mapError(
        Command.start(command),
        (error) => new ContractViolation({ message: `could not start the killed-writer child: ${describeError(error)}` })
      )
      const lines = yield* Queue.unbounded<string | null>()
      yield* child.stdout.pipe(
        Stream.decodeText(),
        Stream.splitLines,
        Stream.runForEach((line) => Queue.offer(lines, line)),
        Effect.ignore,
        Effect.ensuring(Queue.offer(lines, null)),
        Effect.forkScoped
      )
      const stderr = yield* child.stderr.pipe(Stream.decodeText(), Stream.runFold("", (a, b) => a + b), Effect.orElseSucceed(() => ""), Effect.forkScoped)
      let lastAcked = -1
      let acks = 0
      let ready = false
      let holding = false
      let done = false
      let error: string | undefined
      let ended = false
      /** Reads the next line; false once the child's output ended. */
      const next = Effect.gen(function*() {
        if (ended) return false
        const line = yield* Queue.take(lines).pipe(
          Effect.timeoutFail({
            duration: silence,
            onTimeout: () => new ContractViolation({ message: `the killed-writer child printed nothing for ${Duration.format(silence)}` })
          })
        )
        if (line === null) {
          ended = true
          return false
        }
        if (line.startsWith("wrote ")) {
          lastAcked = Number(line.slice(6))
          acks++
        } else if (line === "ready") ready = true
        else if (line === "done") done = true
        else if (line === "holding") holding = true
        else if (line.startsWith("error ")) error = line.slice(6)
        return true
      })
      let killed = false
      if (kill !== undefined) {
        // The store open, then `kill.acks` writes acknowledged (or the child holds after its
        // last write, or fails).
        while (!done && !holding && error === undefined && (!ready || acks < kill.acks)) {
          if (!(yield* next)) break
        }
        if (!ended && !done && error === undefined) {
          yield* Effect.sleep(Duration.millis(kill.delay))
          killed = yield* child.kill("SIGKILL").pipe(Effect.as(true), Effect.orElseSucceed(() => false))
        }
      }
      while (yield* next) {
        // every line the child printed before it died or ended
      }
      // Gone for good before the store is read here (its output can end a moment before it exits).
      yield* Effect.ignore(child.exitCode)
      if (error === undefined && !done && !killed) {
        const text = yield* Fiber.join(stderr)
        error = `it ended without finishing${text.trim().length > 0 ? `: ${text.trim().split("\n").slice(-5).join(" ")}` : ""}`
      }
      return { lastAcked, done, error, killed } satisfies Life
    })
  )

/** Most runs a case writes to get its kills in (see `check`). */
const maxRounds = 6

/**
 * Checks one case: `kills` kills of the writer, each run then written to its end. A run whose
 * last write was done before all kills were made (a fast store, a busy machine slow to read the
 * acknowledgements: its writer was killed holding after that write) ends its round, and the
 * remaining kills go to a fresh run on fresh storage. Every kill lands, so every case kills.
 */
export const check = (options: KilledWriter, seed: number, kills: ReadonlyArray<Kill>): Effect.Effect<void, ContractViolation> =>
  Effect.scoped(
    Effect.gen(function*() {
      yield* needsTsx
      const fs = yield* FileSystem.FileSystem
      const href = hrefOf(options.module)
      const name = options.export ?? "open"
      const open = yield* loadOpener(href, name)
      let killed = 0
      let remaining = kills
      for (let round = 0; round < maxRounds && remaining.length > 0; round++) {
        const storage = yield* Effect.orDie(fs.makeTempDirectoryScoped({ prefix: "polyloop-killed-writer-" }))
        const outcome = yield* killRun({ href, name, open, storage, seed: seed + round }, remaining)
        killed += outcome.killed
        remaining = outcome.remaining
      }
      if (killed === 0) {
        return yield* violation(`in ${maxRounds} runs the writer finished every time before it could be killed: the check killed nothing`)
      }
    })
  ).pipe(Effect.provide(NodeContext.layer))

/**
 * One run on `storage`: killed by `kills` until it is written; then written to its end. Returns
 * the kills made and the kills left: if the writer finished before a kill, that kill is left
 * for the next run, made as soon as its writer has opened the store.
 */
const killRun = (
  args: { readonly href: string; readonly name: string; readonly open: Opener; readonly storage: string; readonly seed: number },
  kills: ReadonlyArray<Kill>
): Effect.Effect<{ readonly killed: number; readonly remaining: ReadonlyArray<Kill> }, ContractViolation, CommandExecutor.CommandExecutor> =>
  Effect.gen(function*() {
    const { href, name, open, seed, storage } = args
    const run = killedWriterRun(seed)
    const total = run.writes.length

    /** How many whole writes the store holds now, read in this process. */
    const writesHeld = (when: string) =>
      Effect.scoped(
        Effect.gen(function*() {
          const store = yield* build(RunLogStore, open(storage), "the store")
          const log = yield* Effect.mapError(
            store.readLog(run.runId),
            (error) => new ContractViolation({ message: `readLog ${when} failed: ${describeError(error)}` })
          )
          for (let k = 0; k <= total; k++) {
            if (Option.isNone(diff(Arb.logUpTo(run, k), log))) return k
          }
          // The closest prefix of whole writes, to show how the log departs from it.
          const size = RunLog.size(log)
          let nearest = 0
          while (nearest < total && Arb.recordsUpTo(run, nearest + 1).length <= size) nearest++
          const difference = Option.getOrElse(diff(Arb.logUpTo(run, Math.min(nearest + 1, total)), log), () => "")
          return yield* violation(
            `${when} the log (${size} record(s)) is not the run's first writes, whole — a write was torn or altered by the kill: ${difference}`
          )
        })
      )

    let from = 0
    let killed = 0
    let remaining: ReadonlyArray<Kill> = []
    for (const [i, kill] of kills.entries()) {
      if (from >= total) {
        remaining = kills.slice(i)
        break
      }
      const life = yield* live({ href, name, storage, seed, from }, kill)
      if (life.error !== undefined) return yield* violation(`the writer child (from write ${from}) failed: ${life.error}`)
      // Finished on its own, before the kill (a child killed just after it printed `done` was
      // still killed: its acknowledged writes must all be there).
      if (!life.killed) {
        from = total
        remaining = [{ acks: 0, delay: kill.delay }, ...kills.slice(i + 1)]
        break
      }
      killed++
      const when = `after kill ${killed} of a run (the child had acknowledged ${life.lastAcked < from ? "no write" : `writes ${from}–${life.lastAcked}`})`
      const held = yield* writesHeld(when)
      if (held <= life.lastAcked) {
        return yield* violation(`${when} the store holds ${held} write(s): ${describeWrite(run.writes[held]!)}, acknowledged before the kill, was lost`)
      }
      from = held
    }
    if (from < total) {
      const last = yield* live({ href, name, storage, seed, from }, undefined)
      if (last.error !== undefined || !last.done) {
        return yield* violation(`after ${killed} kill(s) the writer child (from write ${from}) could not finish the run: ${last.error ?? "it did not finish"}`)
      }
    }
    const held = yield* writesHeld(`after ${killed} kill(s) and the run written to its end,`)
    if (held !== total) return yield* violation(`after ${killed} kill(s) and the run written to its end, the store holds ${held} of ${total} writes`)
    return { killed, remaining }
  })
