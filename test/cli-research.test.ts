/**
 * The research commands end to end (issue 17): `replay` (identical, or the divergence on one
 * line with a non-zero exit), `fork` + `show` naming the parent + `runs --forks-of`, `export`
 * in every format and with `--all` and filters, `import` (export → import → export byte for
 * byte, SQLite → PostgreSQL → SQLite, an existing run refused), `stats` and `stats --json`.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { polyloop } from "./support/cli-process.js"
import { freshDatabaseUrl } from "./support/pg-database.js"
import * as Research from "./support/research-agent.js"

const targetModule = fileURLToPath(new URL("./support/replay-target.ts", import.meta.url))

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-cli-research-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

const ok = (cwd: string, args: ReadonlyArray<string>, env?: NodeJS.ProcessEnv) =>
  Effect.promise(() => polyloop(cwd, args, env)).pipe(Effect.tap((r) =>
    Effect.sync(() => assert.strictEqual(r.code, 0, `polyloop ${args.join(" ")}\n${r.stderr}${r.stdout}`))
  ))

const fails = (cwd: string, args: ReadonlyArray<string>, mentions: RegExp, env?: NodeJS.ProcessEnv) =>
  Effect.promise(() => polyloop(cwd, args, env)).pipe(Effect.tap((r) =>
    Effect.sync(() => {
      assert.notStrictEqual(r.code, 0, `expected polyloop ${args.join(" ")} to fail\n${r.stdout}`)
      const lines = r.stderr.trimEnd().split("\n")
      assert.strictEqual(lines.length, 1, r.stderr)
      assert.match(lines[0]!, /^polyloop: /)
      assert.match(lines[0]!, mentions)
    })
  ))

// Each command is a fresh Node process (~1 s alone, far more on a loaded machine): the cases
// keep the number of invocations low, and the guard below is only against a hang.
describe.sequential("polyloop research commands", () => {
  it.scoped("demo → replay identical; fork, show names the parent, runs --forks-of; exports; stats", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      yield* ok(dir, ["demo", "--run", "d1"])
      const replayed = yield* ok(dir, ["replay", "d1"])
      assert.match(replayed.stdout, /^identical: the replay of d1 reproduced its \d+ records/)

      const forked = yield* ok(dir, ["fork", "d1", "--at", "3", "--run", "f1"])
      assert.match(forked.stdout, /forked d1 at step 3 into f1/)
      const shown = yield* ok(dir, ["show", "f1"])
      assert.match(shown.stdout, /forked from\s+d1 at step 3 \(same configuration\)/)
      const forks = yield* ok(dir, ["runs", "--forks-of", "d1"])
      assert.match(forks.stdout, /\bf1\b/)
      assert.notMatch(forks.stdout, /\bd1\b/)
      yield* fails(dir, ["fork", "d1", "--at", "99", "--run", "f2"], /step 99 is not between 0 and \d+/)

      const chat = yield* ok(dir, ["export", "d1", "--format", "openai-chat"])
      assert.strictEqual(chat.stdout.trimEnd().split("\n").length, 1)
      const parsed = JSON.parse(chat.stdout) as { messages: Array<{ role: string }>; tools: Array<unknown> }
      assert.strictEqual(parsed.messages[0]!.role, "system")
      assert.strictEqual(parsed.tools.length, 5)
      // --all with a filter: the finished demo run only (the fork is unfinished), one ATIF trajectory per line.
      const atif = yield* ok(dir, ["export", "--all", "--stop-reason", "Completed", "--format", "atif"])
      const lines = atif.stdout.trimEnd().split("\n").map((line) => JSON.parse(line) as { schema_version: string; session_id: string })
      assert.deepStrictEqual(lines.map((t) => [t.schema_version, t.session_id]), [["ATIF-v1.4", "d1"]])
      const stats = JSON.parse((yield* ok(dir, ["stats", "--json"])).stdout) as Array<{ agent: string; runs: number; stopReasons: Record<string, number> }>
      assert.deepStrictEqual(stats.map((g) => [g.agent, g.runs, g.stopReasons]), [["policy-editor", 1, { "Completed(Tool)": 1 }]])
    }), { timeout: 900_000 })

  it.scoped("export → import → export is byte-identical, SQLite → PostgreSQL → SQLite; an existing run is refused", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      yield* ok(dir, ["demo", "--run", "d1"])
      yield* ok(dir, ["fork", "d1", "--at", "2", "--run", "f1"])
      yield* ok(dir, ["export", "--all", "--format", "jsonl", "--out", "all.jsonl"])
      const original = fs.readFileSync(path.join(dir, "all.jsonl"), "utf8")
      assert.strictEqual(original.split("\n").filter((l) => l.includes("\"RunStarted\"")).length, 2)

      const pg = yield* freshDatabaseUrl("cli_research")
      const imported = yield* ok(dir, ["import", "all.jsonl", "--pg", pg])
      assert.match(imported.stdout, /imported 2 run\(s\).*d1, f1/)
      const fromPg = yield* ok(dir, ["export", "--all", "--format", "jsonl", "--pg", pg])
      assert.strictEqual(fromPg.stdout, original)
      fs.writeFileSync(path.join(dir, "pg.jsonl"), fromPg.stdout)
      yield* ok(dir, ["import", "pg.jsonl", "--db", "back.db"])
      const back = yield* ok(dir, ["export", "--all", "--format", "jsonl", "--db", "back.db"])
      assert.strictEqual(back.stdout, original)
      yield* fails(dir, ["import", "all.jsonl", "--db", "back.db"], /run d1 already exists/)
      fs.writeFileSync(path.join(dir, "bad.jsonl"), original.split("\n").slice(0, 3).join("\n") + "\n{\"_tag\":\"Nope\"}\n")
      yield* fails(dir, ["import", "bad.jsonl", "--db", "fresh.db"], /bad\.jsonl: line 4 is not a run record/)
    }), { timeout: 900_000 })

  it.scoped("replay --agent <module>: identical, then a changed system prompt gives the divergence on one line", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const db = path.join(dir, "research.db")
      yield* Agent.run(Research.request("r1")).pipe(
        Effect.provide(Layer.mergeAll(Research.services, Research.model(12), SqlRunLogStore.layerSqlite({ filename: db }))),
        Effect.orDie
      )
      const same = yield* ok(dir, ["replay", "r1", "--db", db, "--agent", targetModule])
      assert.match(same.stdout, /^identical/)
      const json = JSON.parse((yield* ok(dir, ["replay", "r1", "--db", db, "--agent", targetModule, "--json"])).stdout) as { _tag: string }
      assert.strictEqual(json._tag, "Identical")
      yield* fails(dir, ["replay", "r1", "--db", db, "--agent", targetModule], /diverged at step 0: messages\[0\]\.text differs/, {
        REPLAY_SYSTEM_PROMPT: "Something else."
      })
      yield* fails(dir, ["replay", "r1", "--db", db], /not a demo run .*--agent/)
    }), { timeout: 900_000 })
})
