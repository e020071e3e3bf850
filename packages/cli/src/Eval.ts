/**
 * `polyloop eval` (design 0320): `eval <module>` runs the experiment a module exports
 * (`export const experiment = Experiment.make(…)`) on the run store, finishing only what is
 * unfinished, with a live progress line on a terminal (done / running / failed, rate, ETA) and a
 * plain line per tenth otherwise, then prints the results; `eval results <name>` prints an
 * experiment's results (`--json`, `--csv`, `--runs-csv`, `--inspect <dir>` for Inspect eval logs);
 * `eval compare <name> <a> <b>` compares
 * two of its configurations on the same samples.
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as FileSystem from "@effect/platform/FileSystem"
import type * as Path from "@effect/platform/Path"
import * as Experiment from "@polyloop/eval/Experiment"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import * as Inspect from "@polyloop/eval/Inspect"
import * as Results from "@polyloop/eval/Results"
import * as Clock from "effect/Clock"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import type * as Approvals from "./Approvals.js"
import { CliError } from "./CliError.js"
import * as Format from "./Format.js"
import * as Store from "./Store.js"
import * as Style from "./Style.js"

/** What a module given to `polyloop eval` exports. */
export type ModuleExperiment = Experiment.Experiment<unknown, FileSystem.FileSystem | Path.Path>

const isExperiment = (value: unknown): value is ModuleExperiment =>
  Predicate.hasProperty(value, "name") && typeof value.name === "string" &&
  Predicate.hasProperty(value, "configurations") && Array.isArray(value.configurations) &&
  Predicate.hasProperty(value, "dataset") && Predicate.hasProperty(value, "scorers")

/** A TypeScript module: imported with tsx's loader, whatever Node runs (design 0363). */
const isTypeScript = (file: string): boolean => /\.(?:[cm]?ts|tsx)$/i.test(file)

/**
 * Imports a module: TypeScript with tsx's programmatic API (its loader registered for this
 * import alone), anything else with Node's `import()` (design 0363).
 */
const importModule = async (file: string): Promise<Record<string, unknown>> => {
  const url = pathToFileURL(path.resolve(file)).href
  if (!isTypeScript(file)) return (await import(url)) as Record<string, unknown>
  const { tsImport } = await import("tsx/esm/api")
  return (await tsImport(url, import.meta.url)) as Record<string, unknown>
}

/** Imports the module and finds its `experiment` (or default) export. */
export const load = (file: string): Effect.Effect<ModuleExperiment, CliError> =>
  Effect.tryPromise({
    try: () => importModule(file),
    catch: (cause) => new CliError({ message: `cannot import ${file}: ${cause instanceof Error ? cause.message : String(cause)}` })
  }).pipe(
    Effect.flatMap((module) => {
      const value = module["experiment"] ?? module["default"]
      return isExperiment(value)
        ? Effect.succeed(value)
        : Effect.fail(new CliError({ message: `${file} exports no experiment (export const experiment = Experiment.make({ … }))` }))
    })
  )

/** `12.3/s`, `ETA 1m05s`. */
const rate = (perSecond: number): string => (perSecond >= 10 ? perSecond.toFixed(0) : perSecond.toFixed(1))
const eta = (seconds: number): string => {
  if (!Number.isFinite(seconds)) return "--"
  const s = Math.round(seconds)
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`
}

/** The text of a progress report: counts, rate (runs this start finished per second) and ETA. */
export const progressText = (p: Experiment.Progress, elapsedMillis: number): string => {
  const finishedNow = p.done - p.skipped
  const perSecond = elapsedMillis > 0 ? (finishedNow * 1000) / elapsedMillis : 0
  const remaining = p.total - p.done - p.failed
  const left = perSecond > 0 ? remaining / perSecond : Number.POSITIVE_INFINITY
  return `${p.done}/${p.total} done · ${p.running} running · ${p.failed} failed · ${rate(perSecond)} runs/s · ETA ${remaining === 0 ? "0s" : eta(left)}`
}

/** A bar of `width` cells for `done` of `total`. */
export const bar = (done: number, total: number, width: number = 24): string => {
  const full = total === 0 ? width : Math.round((done / total) * width)
  return `[${"#".repeat(full)}${"-".repeat(width - full)}]`
}

/** The progress reporter: a redrawn line on a terminal (at most every 100 ms), a line per tenth otherwise. */
const reporter = (tty: boolean) =>
  Effect.gen(function*() {
    const start = yield* Clock.currentTimeMillis
    let lastDraw = 0
    let lastTenth = -1
    let lastText = ""
    const report = (p: Experiment.Progress, final: boolean) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const elapsed = now - start
        if (tty) {
          if (!final && now - lastDraw < 100) return Effect.void
          lastDraw = now
          return Effect.sync(() => process.stdout.write(`\r\x1b[2K${bar(p.done + p.failed, p.total)} ${progressText(p, elapsed)}${final ? "\n" : ""}`))
        }
        const tenth = p.total === 0 ? 10 : Math.floor(((p.done + p.failed) * 10) / p.total)
        if (tenth === lastTenth && (!final || lastText === `${p.done}/${p.failed}`)) return Effect.void
        lastTenth = tenth
        lastText = `${p.done}/${p.failed}`
        return Console.log(progressText(p, elapsed))
      })
    return report
  })

const db = Options.file("db").pipe(Options.withDefault("./polyloop.db"), Options.withDescription("the SQLite file of the run store"))
const pg = Options.redacted("pg").pipe(Options.optional, Options.withDescription("a PostgreSQL connection URL (instead of --db)"))
const json = Options.boolean("json").pipe(Options.withDescription("machine output: JSON instead of text"))
const seed = Options.text("seed").pipe(Options.optional, Options.withDescription("the bootstrap's seed (default: the experiment's name)"))
const resamples = Options.integer("resamples").pipe(Options.withDefault(2000), Options.withDescription("bootstrap resamples"))
const nameArg = Args.text({ name: "experiment" }).pipe(Args.withDescription("the experiment's name"))

const statsOptions = (options: { readonly seed: Option.Option<string>; readonly resamples: number }): Results.Options => ({
  resamples: options.resamples,
  ...(Option.isSome(options.seed) ? { seed: options.seed.value } : {})
})

const number = (value: number | null, digits: number = 3): string => (value === null ? "-" : value.toFixed(digits))

/** `1 epoch`, `3 epochs`. */
const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? "" : "s"}`

/** The results as a table: one row per (configuration, scorer); the wall time per configuration below it. */
export const render = (style: Style.Style, results: Results.Results, wall: ReadonlyArray<Results.WallTime> = []): string => {
  const rows = results.configurations.flatMap((c) =>
    c.scores.map((s) => [
      c.configuration,
      s.scorer,
      number(s.mean),
      number(s.stderr),
      s.ci === null ? "-" : `[${number(s.ci.lower)}, ${number(s.ci.upper)}]`,
      `${c.finished}/${c.planned}`,
      c.failed === 0 ? "0" : style.red(String(c.failed)),
      number(c.steps.mean, 1),
      number(c.tokens.mean, 0)
    ])
  )
  const reasons = results.configurations.map((c) =>
    `${c.configuration}: ${Object.entries(c.stopReasons).map(([reason, n]) => `${reason} ${n}`).join(", ") || "no finished run"}`
  )
  return [
    `experiment ${style.bold(results.experiment)} · ${plural(results.samples, "sample")} × ${plural(results.epochs, "epoch")} · dataset sha256 ${results.datasetHash.slice(0, 12)}…`,
    Format.table(style, [
      { header: "CONFIGURATION" },
      { header: "SCORER" },
      { header: "MEAN", align: "right" },
      { header: "STDERR", align: "right" },
      { header: "95% CI (bootstrap)" },
      { header: "FINISHED", align: "right" },
      { header: "FAILED", align: "right" },
      { header: "STEPS", align: "right" },
      { header: "TOKENS", align: "right" }
    ], rows),
    `stop reasons — ${reasons.join("; ")}`,
    ...(wall.length === 0 ? [] : [`wall time (step time of finished runs) — ${wall.map((w) => `${w.configuration}: ${Format.duration(w.totalMillis)} in all, ${Format.duration(w.meanMillis)} a run`).join("; ")}`]),
    `standard errors clustered by sample; CI: percentile bootstrap over samples, ${results.resamples} resamples, seed ${JSON.stringify(results.seed)}`
  ].join("\n")
}

const records = (location: Store.Location, create: boolean) => {
  const store = create ? Store.layerCreate(location) : Store.layerExisting(location)
  return Layer.provideMerge(ExperimentStore.layer, store)
}

/** `polyloop eval results <name>`. */
const results = (common: Approvals.Common) =>
  Command.make(
    "results",
    {
      db,
      pg,
      json,
      csv: Options.boolean("csv").pipe(Options.withDescription("CSV: one row per configuration and scorer")),
      runsCsv: Options.boolean("runs-csv").pipe(Options.withDescription("CSV: one row per run, with each scorer's value")),
      inspect: Options.directory("inspect").pipe(
        Options.optional,
        Options.withDescription("write the runs as Inspect eval logs into this directory (one JSON log per configuration), for inspect view")
      ),
      seed,
      resamples,
      name: nameArg
    },
    (options) =>
      Effect.gen(function*() {
        if (options.runsCsv) return yield* Effect.flatMap(Results.runsCsv(options.name), (text) => Effect.sync(() => process.stdout.write(text)))
        if (Option.isSome(options.inspect)) {
          const fs = yield* FileSystem.FileSystem
          const dir = options.inspect.value
          yield* fs.makeDirectory(dir, { recursive: true }).pipe(Effect.mapError((e) => new CliError({ message: `cannot create ${dir}: ${e.message}` })))
          const definition = yield* Results.load(options.name)
          for (const c of definition.definition.configurations) {
            const log = yield* Inspect.evalLog(options.name, c.name, statsOptions(options))
            const created = typeof log === "object" && log !== null && "eval" in log ? String((log.eval as { readonly created?: unknown }).created ?? "") : ""
            const file = path.join(dir, `${created.replace(/[:.]/g, "-")}_${options.name}_${c.name}.json`)
            yield* fs.writeFileString(file, JSON.stringify(log, null, 2) + "\n").pipe(Effect.mapError((e) => new CliError({ message: `cannot write ${file}: ${e.message}` })))
            yield* Console.log(file)
          }
          return
        }
        const computed = yield* Results.compute(options.name, statsOptions(options))
        if (options.json) return yield* Console.log(Results.toJson(computed))
        if (options.csv) return yield* Effect.sync(() => process.stdout.write(Results.toCsv(computed)))
        yield* Console.log(render(yield* Style.detect, computed, yield* Results.wallTimes(options.name)))
      }).pipe(Effect.provide(records(common.location(options), false)))
  ).pipe(Command.withDescription("Print an experiment's results: per configuration and scorer the mean, clustered standard error and bootstrap 95% CI; --json, --csv, --runs-csv."))

/** `polyloop eval compare <name> <a> <b>`. */
const compare = (common: Approvals.Common) =>
  Command.make(
    "compare",
    {
      db,
      pg,
      json,
      seed,
      resamples,
      scorer: Options.text("scorer").pipe(Options.optional, Options.withDescription("the scorer (default: the first by name)")),
      name: nameArg,
      a: Args.text({ name: "a" }).pipe(Args.withDescription("a configuration")),
      b: Args.text({ name: "b" }).pipe(Args.withDescription("another configuration"))
    },
    (options) =>
      Effect.gen(function*() {
        const comparison = yield* Results.compare(options.name, options.a, options.b, {
          ...statsOptions(options),
          ...(Option.isSome(options.scorer) ? { scorer: options.scorer.value } : {})
        })
        if (options.json) return yield* Console.log(Results.comparisonToJson(comparison))
        const c = comparison
        yield* Console.log([
          `experiment ${c.experiment}, scorer ${c.scorer}, on the ${c.samples} samples both have:`,
          `  ${c.a}: ${number(c.meanA)}   ${c.b}: ${number(c.meanB)}`,
          `  difference (${c.b} − ${c.a}): ${number(c.difference)} ± ${number(c.stderr)} (stderr), paired t ${number(c.t, 2)}, ` +
          `95% CI ${c.ci === null ? "-" : `[${number(c.ci.lower)}, ${number(c.ci.upper)}]`} (bootstrap over samples)`
        ].join("\n"))
      }).pipe(Effect.provide(records(common.location(options), false)))
  ).pipe(Command.withDescription("Compare two configurations of an experiment on the same samples: the mean difference of per-sample means, its standard error, paired t, bootstrap 95% CI."))

/** `polyloop eval <module>` and its subcommands. */
export const command = (common: Approvals.Common) =>
  Command.make(
    "eval",
    {
      db,
      pg,
      json,
      resume: Options.boolean("resume").pipe(Options.withDescription("resume (every start resumes: finished runs are never run again; accepted for clarity)")),
      retryFailed: Options.boolean("retry-failed").pipe(Options.withDescription("try once more the runs whose attempts are spent")),
      regrade: Options.boolean("regrade").pipe(Options.withDescription("ask model-graded scorers again where a score exists")),
      seed,
      resamples,
      module: Args.file({ name: "module", exists: "yes" }).pipe(
        Args.withDescription("a module exporting experiment (Experiment.make from @polyloop/eval)"),
        Args.optional
      )
    },
    (options) =>
      Effect.gen(function*() {
        if (Option.isNone(options.module)) {
          return yield* new CliError({ message: "give a module exporting an experiment: polyloop eval <module> (or eval results, eval compare)" })
        }
        const experiment = yield* load(options.module.value)
        const tty = !options.json && process.stdout.isTTY === true
        const report = yield* reporter(tty)
        let last: Experiment.Progress | undefined
        const summary = yield* Experiment.run(experiment, {
          onProgress: (p) => (last = p, options.json ? Effect.void : report(p, false)),
          retryFailed: options.retryFailed,
          regrade: options.regrade
        })
        if (!options.json && last !== undefined) yield* report(last, true)
        const computed = yield* Results.compute(experiment.name, statsOptions(options))
        if (options.json) return yield* Console.log(Results.toJson(computed))
        yield* Console.log(`ran ${summary.ran} runs (${summary.skipped} already finished), ${summary.scored} scores computed`)
        yield* Console.log(render(yield* Style.detect, computed, yield* Results.wallTimes(experiment.name)))
        if (summary.failed > 0) {
          return yield* new CliError({ message: `${summary.failed} runs failed after their attempts (see the warnings; --retry-failed tries them again)` })
        }
      }).pipe(Effect.provide(records(common.location(options), true)))
  ).pipe(
    Command.withDescription(
      "Run an experiment (a dataset through configurations × epochs, scored) durably: every start finishes only what is unfinished. " +
        "Subcommands: results, compare."
    ),
    Command.withSubcommands([results(common), compare(common)])
  )
