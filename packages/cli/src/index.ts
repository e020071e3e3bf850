/**
 * @polyloop/cli
 *
 * @since 0.1.0
 */

/**
 * The approval commands (design 0160): `polyloop pending` lists the calls suspended runs wait for, with their arguments and action hash; `polyloop approve RUN CALL` and `polyloop reject RUN CALL --reason …` record a decision with `Agent.decide` (the next `Agent.run` of the run, or a worker, resumes it). `--hash` binds the decision to the action the person saw: a prefix of at least 8 characters of the hash `pending` shows; another action's hash is refused.
 */
export * as Approvals from "./Approvals.js"

/**
 * The `polyloop` command (`@effect/cli`): `demo` runs an example agent durably (and can kill itself mid-step and resume); `runs` lists the runs of a store; `show` prints a run's transcript; `export` writes a run's records as JSON or JSON lines; `serve` shows them in the browser. Every subcommand takes `--db <file>` (default `./polyloop.db`) or `--pg <url>`, and the ones that print take `--json` for machine output.
 */
export * as Cli from "./Cli.js"

/**
 * The command's own failure, and the one-line description of every failure it can meet: a user of the command sees `polyloop: <what went wrong>` and a non-zero exit code, never a stack trace.
 */
export * as CliError from "./CliError.js"

/**
 * `polyloop demo`: runs the GovDoc-like tool-calling agent of `GovDoc.ts` on the run store (the SQLite file `./polyloop.db` by default) with a scripted model, printing each step as it happens from the loop's events, then a summary.
 */
export * as Demo from "./Demo.js"

/**
 * Text helpers of the `polyloop` command: one-line previews, times, durations, token counts, actions, statuses and aligned tables (widths computed on the visible text, so coloured cells line up).
 */
export * as Format from "./Format.js"

/**
 * `polyloop eval` (design 0320): `eval <module>` runs the experiment a module exports on the run store, finishing only what is unfinished, with a live progress line on a terminal and plain lines otherwise, then prints the results; `eval results <name>` (`--json`, `--csv`, `--runs-csv`); `eval compare <name> <a> <b>`.
 */
export * as Eval from "./Eval.js"

/**
 * A GovDoc-like agent: it edits documents in a workspace directory by calling tools written as JSON in its replies (read through `JsonActionParser`). `tool-agent.ts` runs it, the `polyloop demo` command runs it, and `crash-and-resume.ts` kills it mid-step.
 */
export * as GovDoc from "./GovDoc.js"

/**
 * `polyloop serve`: a run viewer in the browser. An HTTP server (`@effect/platform`'s `HttpRouter` on `NodeHttpServer`) over a run store, serving a page (the runs list with filters and pages; one run's transcript, updated live while the run is written by any process) and the JSON API the page uses:
 */
export * as Serve from "./Serve.js"

/**
 * Opening the run log store the command works on: a SQLite file (`--db`, default `./polyloop.db`) or a PostgreSQL database (`--pg <url>`), through `@polyloop/sql`.
 */
export * as Store from "./Store.js"

/**
 * Terminal styling for the `polyloop` command: colour when standard output is a terminal (and `NO_COLOR` is not set, or `FORCE_COLOR` is), plain text otherwise — so piped output and tests see no escape codes. Colours come from `@effect/printer-ansi`.
 */
export * as Style from "./Style.js"

/**
 * The transcript of a run, read back from its log (what `polyloop show` prints): each step's reply, decision, action, status, the observation that entered history (marked when synthetic) and, for audit, the executor's own text; the resumes where they happened; the budget and what was used of it. Also the export of a run's records as JSON or JSON lines.
 */
export * as Transcript from "./Transcript.js"

/**
 * `polyloop verify [RUN | --all]`: reads runs' logs in full — every record decoded with its schema — and checks them: sequence numbers without gap or duplicate, the first record a `RunStarted`, every result with its step and every step with its result (atomicity), steps in order, nothing after `RunFinished`, and the store's summary of the run against its log (`RunLogAudit`). Prints one line per problem (`<run>: <problem>`) and exits non-zero when there is any; prints how many runs were verified when there is none.
 */
export * as Verify from "./Verify.js"
