/**
 * The `polyloop` command (`@effect/cli`): `demo` runs an example agent durably (and can kill
 * itself mid-step and resume); `runs` lists the runs of a store; `show` prints a run's
 * transcript; `export` writes a run's records as JSON or JSON lines; `serve` shows them in the
 * browser. Every subcommand takes `--db <file>` (default `./polyloop.db`) or `--pg <url>`, and
 * the ones that print take `--json` for machine output. `eval` runs experiments (`@polyloop/eval`,
 * design 0320).
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as FileSystem from "@effect/platform/FileSystem"
import { RunId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { userInfo } from "node:os"
import { CliError } from "./CliError.js"
import * as Approvals from "./Approvals.js"
import * as Demo from "./Demo.js"
import * as Eval from "./Eval.js"
import * as Format from "./Format.js"
import * as Research from "./Research.js"
import * as ServeDefaults from "./internal/viewer/defaults.js"
import type * as ServeModule from "./Serve.js"
import * as Store from "./Store.js"
import * as Style from "./Style.js"
import * as Transcript from "./Transcript.js"
import * as Verify from "./Verify.js"

import packageJson from "../package.json" with { type: "json" }

/** The command's version. */
export const version = packageJson.version

const db = Options.file("db").pipe(
  Options.withDefault("./polyloop.db"),
  Options.withDescription("the SQLite file of the run store")
)
const pg = Options.redacted("pg").pipe(
  Options.optional,
  Options.withDescription("a PostgreSQL connection URL (instead of --db)")
)
const json = Options.boolean("json").pipe(Options.withDescription("machine output: JSON instead of text"))
const runIdArg = Args.text({ name: "runId" }).pipe(Args.withDescription("the run id (see polyloop runs)"))

const location = (options: { readonly db: string; readonly pg: Option.Option<Redacted.Redacted> }): Store.Location => ({
  db: options.db,
  pg: options.pg
})

const decodeRunId = (value: string) =>
  Schema.decodeUnknown(RunId)(value).pipe(
    Effect.mapError(() => new CliError({ message: `${JSON.stringify(value)} is not a valid run id (1 to 200 characters)` }))
  )

// -----------------------------------------------------------------------------
// demo
// -----------------------------------------------------------------------------

/** `polyloop demo`. */
export const demo = Command.make(
  "demo",
  {
    db,
    pg,
    json,
    run: Options.text("run").pipe(Options.optional, Options.withDescription("run (or resume) this run id instead of a fresh one")),
    resume: Options.boolean("resume").pipe(Options.withDescription("resume the newest unfinished demo run")),
    crashAt: Options.integer("crash-at").pipe(
      Options.optional,
      Options.withDescription("kill this process with SIGKILL during step N (resume it with --run <id>)")
    ),
    model: Options.text("model").pipe(
      Options.optional,
      Options.withDescription("use a real model through an OpenAI-compatible API (needs POLYLOOP_API_KEY or POLYLOOP_BASE_URL)")
    )
  },
  (options) =>
    Effect.gen(function*() {
      const style = yield* Style.detect
      yield* Demo.run({
        location: location(options),
        run: options.run,
        resume: options.resume,
        crashAt: options.crashAt,
        model: options.model,
        json: options.json,
        style: options.json ? Style.plain : style
      }).pipe(Effect.provide(Store.layerCreate(location(options))))
    })
).pipe(
  Command.withDescription(
    "Run the example GovDoc-like agent (@polyloop/cli/GovDoc) on the run store with a scripted model, printing each step; " +
      "--crash-at N kills it mid-step, --run <id> resumes it."
  )
)

// -----------------------------------------------------------------------------
// runs
// -----------------------------------------------------------------------------

const encodeSummaries = Schema.encodeSync(Schema.Array(RunLogStore.RunSummary))

const statusOf = { finished: "Finished", unfinished: "Unfinished", suspended: "Suspended", awaiting: "AwaitingMessage" } as const

/** A run's stop reason; a conversation's last finished turn's, after its number (`turn 2: Completed(Answer)`). */
const stopReasonCell = (style: Style.Style, summary: RunLogStore.RunSummary): string => {
  const styled = (reason: StopReason.StopReason) => reason._tag === "Completed" ? StopReason.format(reason) : style.red(StopReason.format(reason))
  const conversation = summary.conversation
  if (conversation !== undefined && Option.isNone(summary.stopReason)) {
    return conversation.lastStopReason === null ? "-" : `turn ${conversation.turns - 1}: ${styled(conversation.lastStopReason)}`
  }
  return Option.match(summary.stopReason, { onNone: () => "-", onSome: styled })
}

/** `polyloop runs`. */
export const runs = Command.make(
  "runs",
  {
    db,
    pg,
    json,
    limit: Options.integer("limit").pipe(Options.optional, Options.withDescription("at most this many runs (newest first)")),
    status: Options.choice("status", ["finished", "unfinished", "suspended", "awaiting"]).pipe(
      Options.optional,
      Options.withDescription(
        "only finished, unfinished, suspended (unfinished and waiting for a decision: see polyloop pending), or awaiting runs (conversations whose every message has had its turn)"
      )
    ),
    forksOf: Options.text("forks-of").pipe(Options.optional, Options.withDescription("only the runs forked from this run (polyloop fork)"))
  },
  (options) =>
    Effect.gen(function*() {
      if (Option.isSome(options.limit) && options.limit.value < 0) {
        return yield* new CliError({ message: `--limit must be 0 or more, not ${options.limit.value}` })
      }
      const store = yield* RunLogStore.RunLogStore
      const listed = yield* store.listRuns({
        ...(Option.isSome(options.limit) && Option.isNone(options.forksOf) ? { limit: options.limit.value } : {}),
        ...(Option.isSome(options.status) ? { status: statusOf[options.status.value] } : {})
      })
      const forks = Option.isSome(options.forksOf) ? yield* Research.forksOf(options.forksOf.value) : undefined
      const summaries = forks === undefined
        ? listed
        : listed.filter((summary) => forks.has(summary.runId)).slice(0, Option.getOrElse(options.limit, () => listed.length))
      // The summaries come from the store's summary rows; the logs they summarise are checked
      // too (decoded without the record schemas: `polyloop verify` decodes in full), so that a
      // store whose records are damaged does not list as healthy.
      const findings = yield* Verify.cheapFindings(store, summaries)
      const warn = Effect.gen(function*() {
        if (findings.length === 0) return
        for (const finding of findings) yield* Console.error(`warning: ${finding.runId}: ${finding.problem}`)
        const runs = new Set(findings.map((f) => f.runId)).size
        return yield* new CliError({
          message: `${runs} run${runs === 1 ? " has" : "s have"} problems in ${Store.describe(location(options))}; see polyloop verify --all`
        })
      })
      if (options.json) {
        yield* Console.log(JSON.stringify(encodeSummaries(summaries), null, 2))
        return yield* warn
      }
      const style = yield* Style.detect
      if (summaries.length === 0) {
        const which = Option.match(options.status, { onNone: () => "runs", onSome: (status) => `${status} runs` })
        return yield* Console.log(`no ${which} in ${Store.describe(location(options))}`)
      }
      const rows = summaries.map((summary) => [
        summary.runId,
        summary.agent,
        summary.status === "Finished"
          ? style.green("finished")
          : summary.status === "Suspended"
          ? style.cyan("suspended")
          : summary.status === "AwaitingMessage"
          ? style.green("awaiting message")
          : style.yellow("unfinished"),
        stopReasonCell(style, summary),
        String(summary.steps),
        String(summary.effectiveSteps),
        String(summary.tokens),
        Format.time(summary.startedAt),
        Format.duration(summary.elapsed)
      ])
      yield* Console.log(
        Format.table(
          style,
          [
            { header: "RUN" },
            { header: "AGENT" },
            { header: "STATUS" },
            { header: "STOP REASON" },
            { header: "STEPS", align: "right" },
            { header: "EFFECTIVE", align: "right" },
            { header: "TOKENS", align: "right" },
            { header: "STARTED (UTC)" },
            { header: "DURATION", align: "right" }
          ],
          rows
        )
      )
      yield* warn
    }).pipe(Effect.provide(Store.layerExisting(location(options))))
).pipe(
  Command.withDescription(
    "List the runs of the store, newest first (DURATION is step time: time spent crashed does not count). " +
      "Warns and exits non-zero when a listed run's records do not decode or disagree with its summary."
  )
)

// -----------------------------------------------------------------------------
// show
// -----------------------------------------------------------------------------

/** `polyloop show <runId>`. */
export const show = Command.make(
  "show",
  { db, pg, json, runId: runIdArg },
  (options) =>
    Effect.gen(function*() {
      const runId = yield* decodeRunId(options.runId)
      const transcript = yield* Transcript.read(runId)
      if (options.json) return yield* Console.log(JSON.stringify(Transcript.toJson(transcript), null, 2))
      const style = yield* Style.detect
      yield* Console.log(Transcript.render(style, transcript))
    }).pipe(Effect.provide(Store.layerExisting(location(options))))
).pipe(
  Command.withDescription(
    "Print a run's transcript: each step's reply, action, status, the observation that entered history (marked when synthetic) and the executor's own text."
  )
)

// -----------------------------------------------------------------------------
// serve
// -----------------------------------------------------------------------------

/** The name of the user running the command ("someone" when the system cannot tell). */
const userName = (): string => {
  try {
    return userInfo().username
  } catch {
    return "someone"
  }
}

/** `polyloop serve`. */
export const serve = Command.make(
  "serve",
  {
    db,
    pg,
    host: Options.text("host").pipe(
      Options.optional,
      Options.withDescription(
        `the address to bind (default ${ServeDefaults.host}); an address that is not loopback is served only when given here explicitly`
      )
    ),
    port: Options.integer("port").pipe(Options.withDefault(ServeDefaults.port), Options.withDescription("the port (0: any free port)")),
    socket: Options.text("socket").pipe(
      Options.optional,
      Options.withDescription(
        "listen on this Unix socket path instead of TCP: created with mode 0600, so only you can connect, and no token is asked for (the path must not exist; it is removed on stop). Reach it with e.g. curl --unix-socket <path> http://localhost/api/runs"
      )
    ),
    allowedHost: Options.text("allowed-host").pipe(
      Options.repeated,
      Options.withDescription(
        "a host name (or address) the page may be reached by, besides loopback and the bound address; repeatable (requests naming any other Host are refused)"
      )
    ),
    as: Options.text("as").pipe(
      Options.optional,
      Options.withDescription(
        "who is serving: approval decisions made on the page are recorded under this name, with any name typed on the page recorded as a claim next to it (default: <user> via polyloop serve)"
      )
    ),
    prices: Options.file("prices", { exists: "yes" }).pipe(
      Options.optional,
      Options.withDescription(
        'a JSON price table: { "currency": "USD", "models": { "<model>": { "input": <per million tokens>, "output": <per million tokens> }, "*": { … } } }; the page shows each run\'s cost and the totals'
      )
    ),
    maxStreams: Options.integer("max-streams").pipe(
      Options.withDefault(ServeDefaults.maxStreams),
      Options.withDescription("the most live streams (open pages) at once; more are answered 503")
    ),
    maxStreamsPerClient: Options.integer("max-streams-per-client").pipe(
      Options.withDefault(ServeDefaults.maxStreamsPerClient),
      Options.withDescription("the most live streams one client (a browser's login, the token's holder) holds open at once; more are answered 503")
    ),
    interval: Options.integer("interval").pipe(
      Options.withDefault(Duration.toMillis(ServeDefaults.interval)),
      Options.withDescription("milliseconds between two polls of the store for live pages")
    )
  },
  (options) =>
    Effect.gen(function*() {
      if (options.port < 0 || options.port > 65535) return yield* new CliError({ message: `--port must be 0 to 65535, not ${options.port}` })
      if (options.interval < 10) return yield* new CliError({ message: `--interval must be 10 ms or more, not ${options.interval}` })
      if (options.maxStreams < 1) return yield* new CliError({ message: `--max-streams must be 1 or more, not ${options.maxStreams}` })
      if (options.maxStreamsPerClient < 1) {
        return yield* new CliError({ message: `--max-streams-per-client must be 1 or more, not ${options.maxStreamsPerClient}` })
      }
      // Loaded here, not at start-up: the other subcommands do not pay for the HTTP server.
      const Serve = yield* Effect.promise(() => import("./Serve.js"))
      let prices: ServeModule.PriceTable | undefined
      if (Option.isSome(options.prices)) {
        const fs = yield* FileSystem.FileSystem
        const text = yield* fs.readFileString(options.prices.value).pipe(
          Effect.mapError((error) => new CliError({ message: `cannot read the price table: ${error.message}` }))
        )
        const decoded = Serve.decodePrices(text)
        if (typeof decoded === "string") return yield* new CliError({ message: `the price table ${options.prices.value} is not one: ${decoded}` })
        prices = decoded
      }
      const bound = yield* Serve.serve({
        ...(Option.isSome(options.host) ? { host: options.host.value, exposed: true } : {}),
        ...(Option.isSome(options.socket) ? { socket: options.socket.value } : {}),
        port: options.port,
        interval: Duration.millis(options.interval),
        allowedHosts: options.allowedHost,
        maxStreams: options.maxStreams,
        maxStreamsPerClient: options.maxStreamsPerClient,
        ...(prices === undefined ? {} : { prices }),
        decider: Option.getOrElse(options.as, () => `${userName()} via polyloop serve`)
      })
      if (!bound.loopback) {
        yield* Console.error(
          `polyloop serve: serving on ${bound.host}, which is not a loopback address (you asked for it with --host): ` +
            "anyone who can reach it and has the URL below (its login code) or the token can read the runs (tasks, replies, tool output) and decide on waiting calls; " +
            "plain HTTP, so the token crosses the network in clear"
        )
      }
      if (bound.socket !== undefined) {
        yield* Console.log(`polyloop viewer on the Unix socket ${bound.socket} (store: ${Store.describe(location(options))}); stop it with Ctrl-C`)
        yield* Console.log(
          `only you can connect (mode 0600), so no token is asked for: e.g. curl --unix-socket ${bound.socket} http://localhost/api/runs, or a browser through a proxy to the socket`
        )
        return yield* Effect.never
      }
      yield* Console.log(`polyloop viewer on ${bound.url} (store: ${Store.describe(location(options))}); stop it with Ctrl-C`)
      yield* Console.log("open that URL once (its login code works once; the page keeps a session of its own origin)")
      yield* Console.log(`token for scripts and other browsers: ${bound.token} (send Authorization: Bearer <token> to ${bound.baseUrl}api/, or paste it on the page)`)
      return yield* Effect.never
    }).pipe(Effect.scoped, Effect.provide(Store.layerExisting(location(options))))
).pipe(
  Command.withDescription(
    "Serve a run viewer in the browser: the runs list (filters, pages), each run's transcript updated live as any process writes it, and the JSON API under /api/. " +
      `Binds ${ServeDefaults.host} unless --host says otherwise; the printed URL logs a browser in once, and the printed token (made at each start) is what scripts send; every request for data needs one of them.`
  )
)

// -----------------------------------------------------------------------------
// polyloop
// -----------------------------------------------------------------------------

/** What the approval commands share with the others. */
const common: Approvals.Common = { db, pg, json, location, decodeRunId }

/** `polyloop` and its subcommands. */
export const command = Command.make("polyloop").pipe(
  Command.withDescription(
    "Durable, reproducible LLM agent loops: run the demo, list runs, show and export them, view them in the browser, decide on calls waiting for approval."
  ),
  Command.withSubcommands([
    demo,
    runs,
    show,
    Research.exportRuns(common),
    Research.importLogs(common),
    Research.replay(common),
    Research.fork(common),
    Research.stats(common),
    Eval.command(common),
    serve,
    Verify.verify(common),
    Approvals.pending(common),
    Approvals.approve(common),
    Approvals.reject(common)
  ])
)

/** Runs the command on `process.argv`-style arguments. */
export const run = Command.run(command, { name: "polyloop", version })
