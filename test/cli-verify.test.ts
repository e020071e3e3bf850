/**
 * `polyloop verify` and the check `polyloop runs` makes, on stores broken in the ways a log can
 * break outside the store's rules: a record that is not JSON, a record whose fields do not
 * decode, a result whose step lost its reference to it (a torn step), a summary that disagrees
 * with the log, a gap in the sequence. The command runs as a subprocess from a compiled bundle
 * of its entry point (`support/bundle.ts`); the store is made by `polyloop demo` and damaged
 * with plain SQL on copies of the file.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { bundle } from "./support/bundle.js"

const here = Path.dirname(fileURLToPath(import.meta.url))

interface Database {
  prepare(source: string): { run(...params: ReadonlyArray<unknown>): unknown; get(...params: ReadonlyArray<unknown>): unknown }
  close(): void
}
const Sqlite = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => Database

interface Result {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

let cli = ""
const polyloop = (cwd: string, args: ReadonlyArray<string>): Promise<Result> =>
  new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = { ...process.env }
    for (const name of ["POLYLOOP_API_KEY", "POLYLOOP_BASE_URL", "POLYLOOP_MODEL", "FORCE_COLOR"]) delete env[name]
    const child = spawn(process.execPath, [cli, ...args], { cwd, env, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    child.on("error", reject)
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })

describe.sequential("polyloop verify, and polyloop runs on a damaged store", () => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "polyloop-verify-"))
  const healthy = Path.join(dir, "healthy.db")
  let runId = ""
  let copies = 0

  /** A copy of the healthy store damaged by `damage`. */
  const damaged = (damage: (db: Database) => void): string => {
    const file = Path.join(dir, `damaged-${copies++}.db`)
    Fs.copyFileSync(healthy, file)
    const db = new Sqlite(file)
    try {
      damage(db)
    } finally {
      db.close()
    }
    return file
  }

  beforeAll(async () => {
    cli = await bundle(Path.join(here, "..", "packages", "cli", "src", "bin.ts"))
    const demo = await polyloop(dir, ["demo", "--db", healthy])
    assert.strictEqual(demo.code, 0, demo.stderr)
    runId = /started run (\S+) /.exec(demo.stdout)![1]!
    // Fold the WAL into the file so that copies of the file alone hold every record.
    const db = new Sqlite(healthy)
    db.prepare("PRAGMA wal_checkpoint(TRUNCATE)").run()
    db.close()
  }, 240_000)

  afterAll(() => Fs.rmSync(dir, { recursive: true, force: true }))

  it("a healthy store: verify --all and verify RUN exit 0; runs exits 0 with no warning", async () => {
    const all = await polyloop(dir, ["verify", "--all", "--db", healthy])
    assert.strictEqual(all.code, 0, all.stderr)
    assert.strictEqual(all.stdout.trim(), "1 run verified: no problems")
    const one = await polyloop(dir, ["verify", runId, "--db", healthy])
    assert.strictEqual(one.code, 0, one.stderr)
    const runs = await polyloop(dir, ["runs", "--db", healthy])
    assert.strictEqual(runs.code, 0, runs.stderr)
    assert.strictEqual(runs.stderr, "")
  })

  it("verify needs a run or --all, not both", async () => {
    const neither = await polyloop(dir, ["verify", "--db", healthy])
    assert.notStrictEqual(neither.code, 0)
    assert.match(neither.stderr, /name one run to verify, or pass --all/)
  })

  it("a record that is not JSON: verify names the run and the record; runs warns and exits non-zero", async () => {
    const file = damaged((db) => db.prepare("UPDATE polyloop_records SET payload = '{\"_tag\": \"ModelRep' WHERE run_id = ? AND seq = 3").run(runId))
    const verify = await polyloop(dir, ["verify", "--all", "--db", file])
    assert.strictEqual(verify.code, 1)
    const lines = verify.stdout.trim().split("\n")
    assert.strictEqual(lines.length, 1, verify.stdout)
    assert.match(lines[0]!, new RegExp(`^${runId}: .*record 3`))
    assert.match(verify.stderr, /^polyloop: 1 problem in 1 of 1 run\n$/)
    const runs = await polyloop(dir, ["runs", "--db", file])
    assert.strictEqual(runs.code, 1)
    assert.match(runs.stdout, new RegExp(runId), "the table is still printed")
    assert.match(runs.stderr, new RegExp(`^warning: ${runId}: .*record 3`, "m"))
    assert.match(runs.stderr, /polyloop: 1 run has problems .*polyloop verify --all/)
  })

  it("a record whose fields do not decode (still JSON, still in sequence): verify, decoding in full, finds it", async () => {
    const file = damaged((db) =>
      db.prepare("UPDATE polyloop_records SET payload = json_set(payload, '$.step', -1) WHERE run_id = ? AND kind = 'ModelReplied' AND seq = (SELECT min(seq) FROM polyloop_records WHERE run_id = ? AND kind = 'ModelReplied')").run(runId, runId)
    )
    const verify = await polyloop(dir, ["verify", runId, "--db", file])
    assert.strictEqual(verify.code, 1)
    assert.match(verify.stdout, new RegExp(`^${runId}: .*does not decode|^${runId}: .*step`, "m"))
  })

  it("a torn step (a result whose StepCompleted does not name it) and a summary that disagrees: one line each", async () => {
    const file = damaged((db) => {
      db.prepare(
        "UPDATE polyloop_records SET payload = json_set(payload, '$.resultIds', json('[]'), '$.effective', json('false')) WHERE run_id = ? AND seq = (SELECT min(seq) FROM polyloop_records WHERE run_id = ? AND kind = 'StepCompleted' AND json_array_length(json_extract(payload, '$.resultIds')) > 0)"
      ).run(runId, runId)
      db.prepare("UPDATE polyloop_runs SET tokens = tokens + 5 WHERE run_id = ?").run(runId)
    })
    const verify = await polyloop(dir, ["verify", "--all", "--db", file, "--json"])
    assert.strictEqual(verify.code, 1)
    const findings = JSON.parse(verify.stdout) as ReadonlyArray<{ runId: string; problem: string }>
    const problems = findings.map((f) => f.problem)
    assert.isTrue(problems.some((p) => /ActionResulted .* has no StepCompleted \(a torn step\)/.test(p)), problems.join("\n"))
    assert.isTrue(problems.some((p) => /the summary's tokens is \d+; the log says \d+/.test(p)), problems.join("\n"))
    const runs = await polyloop(dir, ["runs", "--db", file, "--json"])
    assert.strictEqual(runs.code, 1)
    assert.match(runs.stderr, /warning: .*the summary's tokens/)
  })

  it("a gap in the sequence (a record deleted): verify says which record is missing", async () => {
    const file = damaged((db) => db.prepare("DELETE FROM polyloop_records WHERE run_id = ? AND seq = 4").run(runId))
    const verify = await polyloop(dir, ["verify", "--all", "--db", file])
    assert.strictEqual(verify.code, 1)
    assert.match(verify.stdout, new RegExp(`^${runId}: .*4`, "m"))
  })
})
