/**
 * The `polyloop` command end to end (SPEC §12): the real command, run as a subprocess through
 * its launcher (`node packages/cli/bin/polyloop.js`) in a temporary directory, so `./polyloop.db`
 * is that directory's file. Covers `demo`, a demo killed by SIGKILL mid-step (`--crash-at 3`)
 * and resumed (`--run <id>`), `runs`, `show`, `export` (JSON and JSON lines), `--json`, and the
 * error cases (unknown run id, missing file, corrupt file, not a store, model without a server):
 * one line on stderr, no stack trace, a non-zero exit code.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as Demo from "@polyloop/cli/Demo"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { freshDatabaseUrl } from "./support/pg-database.js"

const launcher = fileURLToPath(new URL("../packages/cli/bin/polyloop.js", import.meta.url))

interface Result {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/** The environment of a new user: no model server configured, no colour forced. */
const cleanEnv = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const name of ["POLYLOOP_API_KEY", "POLYLOOP_BASE_URL", "POLYLOOP_MODEL", "FORCE_COLOR", "NO_COLOR"]) delete env[name]
  return env
}

/** Runs `polyloop <args>` in `cwd`; resolves when the process exits, however it exits. */
const polyloop = (cwd: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = cleanEnv()): Promise<Result> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [launcher, ...args], { cwd, env, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    child.on("error", reject)
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }))
  })

/** A failure as a user must see it: a non-zero exit, exactly one line on stderr, no stack trace. */
const assertOneLineError = (result: Result, mentions: RegExp) => {
  assert.notStrictEqual(result.code, 0, `expected a failure, got ${result.code}\n${result.stdout}`)
  assert.strictEqual(result.signal, null)
  const lines = result.stderr.trimEnd().split("\n")
  assert.strictEqual(lines.length, 1, `expected one line on stderr, got:\n${result.stderr}`)
  assert.match(lines[0]!, /^polyloop: /)
  assert.match(lines[0]!, mentions)
  assert.notMatch(result.stderr, /\n\s+at |\.ts:\d+/, "no stack trace")
}

/** The demo workspaces the tests made (under the system's temporary directory), removed at the end. */
const workspaces = new Set<string>()

const workspaceOf = (stdout: string): string => {
  const match = /^workspace\s+(\S+)$/m.exec(stdout)
  assert.isNotNull(match, `no workspace line in:\n${stdout}`)
  workspaces.add(match![1]!)
  return match![1]!
}

interface LedgerEntry {
  readonly key: string
  readonly tool: string
  readonly path: string
}

const readLedger = (workspace: string): ReadonlyArray<LedgerEntry> =>
  fs.readFileSync(path.join(workspace, ".effects.jsonl"), "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line) as LedgerEntry)

const occurrences = (text: string, part: string): number => text.split(part).length - 1

describe.sequential("polyloop command", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-cli-test-"))
  const db = path.join(dir, "polyloop.db")
  let demoRunId = ""
  afterAll(() => {
    for (const workspace of [dir, ...workspaces]) fs.rmSync(workspace, { recursive: true, force: true })
  })

  it("demo runs the example agent on ./polyloop.db, printing each step and a summary", async () => {
    const result = await polyloop(dir, ["demo"])
    assert.strictEqual(result.code, 0, result.stderr)
    assert.strictEqual(result.stderr, "")
    const out = result.stdout
    assert.notMatch(out, /\u001b\[/, "no colour when stdout is not a terminal")
    assert.isTrue(fs.existsSync(db), "the demo creates ./polyloop.db")
    const started = /started run (\S+) \(agent policy-editor/.exec(out)
    assert.isNotNull(started, out)
    demoRunId = started![1]!
    for (let step = 0; step <= 6; step++) assert.match(out, new RegExp(`^step ${step}  `, "m"))
    assert.notMatch(out, /^step 7 /m)
    // Decision, tool, status, observation preview and budgets of a step.
    assert.match(out, /^step 1  read_file \{"path":"policy\.md"\}$/m)
    assert.match(out, /✓ Executed {2}# Customer data retention policy/)
    assert.match(out, /○ NotExecuted \[synthetic\] {2}The action was not executed: invalid arguments for "append_to_file"/)
    assert.match(out, /TextNotFound: "Customer records are retained for 30 days" does not occur in policy\.md/)
    assert.match(out, /steps 5\/12 · effective 4\/10 · tokens \d+\/20000/)
    // Summary.
    assert.match(out, new RegExp(`run ${demoRunId}: Completed\\(Tool\\)`))
    assert.match(out, /used {7}steps 7\/12 · effective 6\/10 · tokens \d+\/20000 · time /)
    assert.match(out, /writes {5}2 applied, each idempotency key once/)
    const workspace = workspaceOf(out)
    assert.include(fs.readFileSync(path.join(workspace, "policy.md"), "utf8"), "Customer records are kept for 90 days")
  })

  it("demo --crash-at 3 dies by SIGKILL mid-step, leaving an unfinished log; demo --run resumes it without running the write twice", async () => {
    const crashed = await polyloop(dir, ["demo", "--crash-at", "3", "--run", "crash-run"])
    assert.strictEqual(crashed.signal, "SIGKILL", `expected death by SIGKILL, got code ${crashed.code}\n${crashed.stdout}\n${crashed.stderr}`)
    assert.strictEqual(crashed.code, null)
    assert.match(crashed.stdout, /✗ SIGKILL at step 3 — replace_in_file has run, the step is not recorded yet/)
    assert.include(crashed.stdout, "resume it with: npx polyloop demo --run crash-run")
    assert.notMatch(crashed.stdout, /^step 4 /m)
    const workspace = workspaceOf(crashed.stdout)
    // The write of step 3 happened; the log does not know it.
    assert.deepStrictEqual(readLedger(workspace).map((entry) => entry.key), ["crash-run/3/call_3"])

    const listed = await polyloop(dir, ["runs", "--json"])
    assert.strictEqual(listed.code, 0, listed.stderr)
    const runs = JSON.parse(listed.stdout) as ReadonlyArray<{ runId: string; status: string; steps: number; stopReason: unknown }>
    const unfinished = runs.find((run) => run.runId === "crash-run")
    assert.deepStrictEqual([unfinished?.status, unfinished?.steps, unfinished?.stopReason], ["Unfinished", 3, null])

    const exported = await polyloop(dir, ["export", "crash-run", "--format", "jsonl"])
    assert.strictEqual(exported.code, 0, exported.stderr)
    const records = exported.stdout.trimEnd().split("\n").map((line) => JSON.parse(line) as { _tag: string; step?: number })
    assert.deepStrictEqual(records.at(-1), { ...records.at(-1), _tag: "ModelReplied", step: 3 }, "the log ends with step 3's reply")
    assert.isFalse(records.some((record) => record._tag === "RunFinished"))

    const resumed = await polyloop(dir, ["demo", "--run", "crash-run"])
    assert.strictEqual(resumed.code, 0, resumed.stderr)
    const out = resumed.stdout
    assert.match(out, /↻ resuming run crash-run: 3 step\(s\) recorded/)
    assert.match(out, /step 3's reply was logged before the process died/)
    assert.match(out, /↻ resumed run crash-run at step 3/)
    assert.match(out, /○ NotExecuted \[synthetic\] {2}The previous action \(replace_in_file\) was interrupted/)
    assert.match(out, /replace_in_file \(replay policy "Never"\) was in flight when the process died; it was NOT run again/)
    assert.match(out, /^step 4  read_file \{"path":"policy\.md"\}$/m, "the model checks the file before writing again")
    assert.match(out, /run crash-run: Completed\(Tool\)/)
    assert.match(out, /resumed 1×/)
    const ledger = readLedger(workspace)
    assert.deepStrictEqual(ledger.map((entry) => `${entry.tool} ${entry.path}`), ["replace_in_file policy.md", "append_to_file CHANGELOG.md"])
    assert.strictEqual(new Set(ledger.map((entry) => entry.key)).size, ledger.length)
    const policy = fs.readFileSync(path.join(workspace, "policy.md"), "utf8")
    assert.strictEqual(occurrences(policy, "Customer records are kept for 90 days"), 1)
    assert.strictEqual(occurrences(policy, "30 days"), 1, "the backups line is untouched")
    const changelog = fs.readFileSync(path.join(workspace, "CHANGELOG.md"), "utf8")
    assert.strictEqual(occurrences(changelog, "now kept for 90 days"), 1)

    // A finished run: Agent.run returns the recorded result and calls nothing.
    const again = await polyloop(dir, ["demo", "--run", "crash-run"])
    assert.strictEqual(again.code, 0, again.stderr)
    assert.match(again.stdout, /run crash-run has already finished \(Completed\(Tool\)\)/)
    assert.notMatch(again.stdout, /^step /m)
    assert.strictEqual(readLedger(workspace).length, 2)
  })

  it("demo: a ledger that cannot be read is reported as a failure, not counted as no writes", async () => {
    const store = path.join(dir, "ledger.db")
    const first = await polyloop(dir, ["demo", "--run", "ledger-run", "--db", store])
    assert.strictEqual(first.code, 0, first.stderr)
    const workspace = workspaceOf(first.stdout)
    assert.strictEqual(readLedger(workspace).length, 2)
    fs.appendFileSync(path.join(workspace, ".effects.jsonl"), "{\"key\": \"half a line\n")
    // The run is finished: the demo prints its recorded result, then checks the ledger.
    const again = await polyloop(dir, ["demo", "--run", "ledger-run", "--db", store])
    assertOneLineError(again, /writes cannot be checked: CorruptLedger: the idempotency ledger \S+\.effects\.jsonl is corrupt at line 3/)
    assert.match(again.stdout, /run ledger-run: Completed\(Tool\)/)
    assert.notMatch(again.stdout, /applied/)
  })

  it("runs: a table of runs, newest first, with --limit and --status", async () => {
    const all = await polyloop(dir, ["runs"])
    assert.strictEqual(all.code, 0, all.stderr)
    const lines = all.stdout.trimEnd().split("\n")
    assert.match(lines[0]!, /^RUN\s+AGENT\s+STATUS\s+STOP REASON\s+STEPS\s+EFFECTIVE\s+TOKENS\s+STARTED \(UTC\)\s+DURATION$/)
    assert.strictEqual(lines.length, 3)
    assert.match(lines[1]!, /^crash-run\s+policy-editor\s+finished\s+Completed\(Tool\)\s+8\s+6\s+\d+\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+\d+ ms$/)
    assert.match(lines[2]!, new RegExp(`^${demoRunId}\\s+policy-editor\\s+finished\\s+Completed\\(Tool\\)\\s+7\\s+6\\s`))

    const limited = await polyloop(dir, ["runs", "--limit", "1"])
    assert.strictEqual(limited.stdout.trimEnd().split("\n").length, 2)
    assert.match(limited.stdout, /^crash-run /m)

    const coloured = await polyloop(dir, ["runs"], { ...cleanEnv(), FORCE_COLOR: "1" })
    assert.match(coloured.stdout, /\u001b\[0;32mfinished\u001b\[0m/, "FORCE_COLOR colours a piped output (as a terminal would get)")
    assert.strictEqual(coloured.stdout.replace(/\u001b\[[0-9;]*m/g, ""), all.stdout, "colour never shifts the columns")

    const unfinished = await polyloop(dir, ["runs", "--status", "unfinished"])
    assert.strictEqual(unfinished.code, 0, unfinished.stderr)
    assert.strictEqual(unfinished.stdout.trim(), "no unfinished runs in ./polyloop.db")
  })

  it("show: the transcript with replies, actions, statuses, synthetic observations, the executor's text and budgets", async () => {
    const shown = await polyloop(dir, ["show", "crash-run"])
    assert.strictEqual(shown.code, 0, shown.stderr)
    const out = shown.stdout
    assert.match(out, /^run crash-run {2}agent policy-editor {2}Finished: Completed\(Tool\)$/m)
    assert.match(out, /budget used {2}steps 8\/12 · effective 6\/10 · tokens \d+\/20000 · time /)
    assert.match(out, /↻ resumed at step 3/)
    assert.match(out, /status {7}NotExecuted {2}\(settled on resume: not run again \(replay policy Never\)\)/)
    assert.match(out, /observation {2}\[synthetic\] The previous action \(replace_in_file\) was interrupted/)
    assert.match(out, /executor {5}\(no text: the action did not run\)/)
    // A NotExecuted call: the synthetic text entered history; the executor's own sentence is kept for audit.
    assert.match(out, /observation {2}\[synthetic\] The action was not executed: invalid arguments for "append_to_file"/)
    assert.match(out, /executor {5}\(audit, not in history\) invalid arguments for "append_to_file"/)
    assert.match(out, /reply {8}I forgot the text of the line\./)
    assert.match(out, /finished .*: Completed\(Tool\) after 8 steps \(6 effective\)/)

    const json = await polyloop(dir, ["show", "crash-run", "--json"])
    assert.strictEqual(json.code, 0, json.stderr)
    const transcript = JSON.parse(json.stdout) as {
      runId: string
      resumes: ReadonlyArray<{ fromStep: number }>
      steps: ReadonlyArray<{ step: number; settledOnResume: boolean; result: { outcome: { status: string; observationIsSynthetic: boolean } } | null }>
    }
    assert.strictEqual(transcript.runId, "crash-run")
    assert.deepStrictEqual(transcript.resumes.map((resume) => resume.fromStep), [3])
    assert.strictEqual(transcript.steps.length, 8)
    const step3 = transcript.steps[3]!
    assert.deepStrictEqual([step3.settledOnResume, step3.result?.outcome.status, step3.result?.outcome.observationIsSynthetic], [true, "NotExecuted", true])
  })

  it("export: JSON lines and one JSON document hold the same records, to stdout or --out", async () => {
    const jsonl = await polyloop(dir, ["export", "crash-run", "--format", "jsonl"])
    assert.strictEqual(jsonl.code, 0, jsonl.stderr)
    const lines = jsonl.stdout.trimEnd().split("\n").map((line) => JSON.parse(line) as { _tag: string; seq: number })
    assert.deepStrictEqual(lines.map((record) => record.seq), lines.map((_, i) => i))
    assert.strictEqual(lines[0]?._tag, "RunStarted")
    assert.strictEqual(lines.at(-1)?._tag, "RunFinished")
    assert.isTrue(lines.some((record) => record._tag === "RunResumed"))

    const out = path.join(dir, "export.json")
    const json = await polyloop(dir, ["export", "crash-run", "--format", "json", "--out", out])
    assert.strictEqual(json.code, 0, json.stderr)
    assert.strictEqual(json.stdout, "")
    const document = JSON.parse(fs.readFileSync(out, "utf8")) as { runId: string; records: ReadonlyArray<unknown> }
    assert.strictEqual(document.runId, "crash-run")
    assert.deepStrictEqual(document.records, lines)
  })

  it("demo --json: every line is a JSON event, the last one the result", async () => {
    const result = await polyloop(dir, ["demo", "--json", "--run", "json-run"])
    assert.strictEqual(result.code, 0, result.stderr)
    const events = result.stdout.trimEnd().split("\n").map((line) => JSON.parse(line) as { _tag: string; stopReason?: { _tag: string } })
    assert.strictEqual(events[0]?._tag, "RunStarted")
    assert.strictEqual(events.filter((event) => event._tag === "StepCompleted").length, 7)
    workspaces.add(Demo.workspaceDir({ db, pg: Option.none() }, "json-run"))
    assert.isTrue(fs.existsSync(Demo.workspaceDir({ db, pg: Option.none() }, "json-run")), "the run's workspace is named after the store and the run id")
    const last = events.at(-1)
    assert.strictEqual(last?._tag, "RunResult")
    assert.strictEqual(last?.stopReason?._tag, "Completed")
  })

  it.scoped("--pg: the demo, runs and show work on PostgreSQL", () =>
    Effect.gen(function*() {
      const url = yield* freshDatabaseUrl("polyloop_cli")
      const demo = yield* Effect.promise(() => polyloop(dir, ["demo", "--pg", url, "--run", "pg-run"]))
      assert.strictEqual(demo.code, 0, demo.stderr)
      assert.match(demo.stdout, /store {6}the PostgreSQL store \(--pg\)/)
      assert.match(demo.stdout, /run pg-run: Completed\(Tool\)/)
      workspaceOf(demo.stdout)
      const [runs, shown] = yield* Effect.promise(() =>
        Promise.all([polyloop(dir, ["runs", "--pg", url, "--json"]), polyloop(dir, ["show", "pg-run", "--pg", url])])
      )
      assert.strictEqual(runs.code, 0, runs.stderr)
      assert.deepStrictEqual((JSON.parse(runs.stdout) as ReadonlyArray<{ runId: string }>).map((run) => run.runId), ["pg-run"])
      assert.strictEqual(shown.code, 0, shown.stderr)
      assert.match(shown.stdout, /^run pg-run {2}agent policy-editor {2}Finished: Completed\(Tool\)$/m)
    }))

  it("errors: unknown run id, missing file (not created), corrupt file, not a store, bad options — one line, no stack trace", async () => {
    const missing = path.join(dir, "missing.db")
    const corrupt = path.join(dir, "corrupt.db")
    fs.writeFileSync(corrupt, "this is not a SQLite database\n".repeat(200))
    const empty = path.join(dir, "empty.db")
    fs.writeFileSync(empty, "")
    const [unknownShow, unknownExport, missingRuns, missingExport, corruptShow, emptyShow, noServer, badCrash] = await Promise.all([
      polyloop(dir, ["show", "no-such-run"]),
      polyloop(dir, ["export", "no-such-run", "--format", "json"]),
      polyloop(dir, ["runs", "--db", missing]),
      polyloop(dir, ["export", "crash-run", "--db", missing]),
      polyloop(dir, ["show", "crash-run", "--db", corrupt]),
      polyloop(dir, ["show", "crash-run", "--db", empty]),
      polyloop(dir, ["demo", "--model", "gpt-4o-mini", "--db", path.join(dir, "model.db")]),
      polyloop(dir, ["demo", "--crash-at", "-1", "--db", path.join(dir, "crash.db")])
    ])
    assertOneLineError(unknownShow, /no run with id "no-such-run"/)
    assertOneLineError(unknownExport, /no run with id "no-such-run"/)
    assert.strictEqual(unknownExport.stdout, "")
    for (const result of [missingRuns, missingExport]) assertOneLineError(result, /no run store at .*missing\.db \(the file does not exist\)/)
    assert.isFalse(fs.existsSync(missing), "reading commands never create the file")
    assertOneLineError(corruptShow, /corrupt\.db.*not a valid database/)
    assertOneLineError(emptyShow, /empty\.db is not a polyloop run store/)
    assertOneLineError(noServer, /needs a model server.*POLYLOOP_API_KEY.*POLYLOOP_BASE_URL/)
    assertOneLineError(badCrash, /--crash-at must be a step number/)

    const usage = await polyloop(dir, ["runs", "--limit", "many"])
    assert.strictEqual(usage.code, 2, "a usage error exits with 2")
    assert.notMatch(usage.stderr, /\n\s+at /)
  })
})
