/**
 * `polyloop eval` as a user runs it (design 0320): the example experiment through the command's
 * launcher, with plain progress lines when standard output is not a terminal and the redrawn
 * progress bar in a pseudo-terminal (`script`); a second start runs nothing; `eval results`
 * (table, `--json`, `--csv`, `--runs-csv`, `--inspect <dir>`) and `eval compare`; a dataset with a bad line refused
 * with its line number before anything runs; a changed definition refused with the difference.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { launcher, polyloop, spawnCommand } from "./support/cli-process.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const example = path.join(root, "examples", "experiment.ts")
const module = fileURLToPath(new URL("./support/eval-experiment.ts", import.meta.url))

const work = () => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-cli-eval-"))

describe.sequential("polyloop eval", () => {
  it("runs the example experiment with plain progress lines, then prints its results; a second start runs nothing", async () => {
    const dir = work()
    const first = await polyloop(dir, ["eval", example, "--db", "e.db"])
    assert.strictEqual(first.code, 0, first.stderr)
    const lines = first.stdout.split("\n")
    assert.strictEqual(lines[0], "0/120 done · 0 running · 0 failed · 0.0 runs/s · ETA --")
    const progress = lines.filter((l) => / done · \d+ running · \d+ failed · [\d.]+ runs\/s · ETA /.test(l))
    assert.isAtLeast(progress.length, 6)
    assert.match(progress[progress.length - 1]!, /^120\/120 done · 0 running · 0 failed · [\d.]+ runs\/s · ETA 0s$/)
    assert.notInclude(first.stdout, "\r")
    assert.include(first.stdout, "ran 120 runs (0 already finished), 240 scores computed")
    assert.match(first.stdout, /^guess +numeric +0\.750 +0\.099 +\[0\.550, 0\.900\] +60\/60 +0 +1\.0 +48$/m)
    assert.match(first.stdout, /^tool +numeric +1\.000 +0\.000 +\[1\.000, 1\.000\] +60\/60 +0 +2\.0 +96$/m)
    assert.match(first.stdout, /^wall time \(step time of finished runs\) — tool: \S+ \S+ in all, \S+ \S+ a run; guess: /m)
    const second = await polyloop(dir, ["eval", example, "--db", "e.db", "--resume"])
    assert.strictEqual(second.code, 0, second.stderr)
    assert.include(second.stdout, "ran 0 runs (120 already finished), 0 scores computed")

    const json = await polyloop(dir, ["eval", "results", "multiplication", "--db", "e.db", "--json"])
    assert.strictEqual(json.code, 0, json.stderr)
    const results = JSON.parse(json.stdout) as { readonly configurations: ReadonlyArray<{ readonly configuration: string; readonly scores: ReadonlyArray<{ readonly scorer: string; readonly mean: number }> }> }
    assert.deepStrictEqual(results.configurations.map((c) => [c.configuration, c.scores.map((s) => [s.scorer, s.mean])]), [
      ["tool", [["numeric", 1], ["short", 1]]],
      ["guess", [["numeric", 0.75], ["short", 1]]]
    ])
    const again = await polyloop(dir, ["eval", "results", "multiplication", "--db", "e.db", "--json"])
    assert.strictEqual(again.stdout, json.stdout, "byte-identical")
    const csv = await polyloop(dir, ["eval", "results", "multiplication", "--db", "e.db", "--csv"])
    assert.strictEqual(csv.stdout.split("\n")[3], "multiplication,guess,numeric,60,20,0.75,0.09933992677987828,0.55,0.9,60,0,1,48")
    const runs = await polyloop(dir, ["eval", "results", "multiplication", "--db", "e.db", "--runs-csv"])
    assert.strictEqual(runs.stdout.trim().split("\n").length, 121)
    const inspect = await polyloop(dir, ["eval", "results", "multiplication", "--db", "e.db", "--inspect", "logs"])
    assert.strictEqual(inspect.code, 0, inspect.stderr)
    const files = fs.readdirSync(path.join(dir, "logs")).sort()
    assert.strictEqual(files.length, 2)
    assert.match(files[0]!, /^\d{4}-\d{2}-\d{2}T[\d-]+Z_multiplication_(tool|guess)\.json$/)
    const log = JSON.parse(fs.readFileSync(path.join(dir, "logs", files.find((f) => f.endsWith("_guess.json"))!), "utf8")) as { readonly version: number; readonly samples: ReadonlyArray<unknown> }
    assert.deepStrictEqual([log.version, log.samples.length], [2, 60])
    const compare = await polyloop(dir, ["eval", "compare", "multiplication", "tool", "guess", "--db", "e.db"])
    assert.strictEqual(compare.code, 0, compare.stderr)
    assert.include(compare.stdout, "difference (guess − tool): -0.250 ± 0.099 (stderr), paired t -2.52, 95% CI [-0.450, -0.100]")
    // A typo in a configuration or a scorer: an error naming the known ones, a non-zero exit (issue 44).
    const typo = await polyloop(dir, ["eval", "compare", "multiplication", "tool", "gues", "--db", "e.db"])
    assert.strictEqual(typo.code, 1, typo.stdout)
    assert.include(typo.stderr, "has no configuration \"gues\"; its configurations: tool, guess")
    const noScorer = await polyloop(dir, ["eval", "compare", "multiplication", "tool", "guess", "--scorer", "nosuch", "--db", "e.db"])
    assert.strictEqual(noScorer.code, 1, noScorer.stdout)
    assert.include(noScorer.stderr, "has no scorer \"nosuch\"; its scorers: numeric, short")
    // Every run is an ordinary run of the store.
    const show = await polyloop(dir, ["show", "multiplication/tool/q07/3", "--db", "e.db"])
    assert.strictEqual(show.code, 0, show.stderr)
    assert.include(show.stdout, "multiply")
    const missing = await polyloop(dir, ["eval", "results", "nope", "--db", "e.db"])
    assert.strictEqual(missing.code, 1)
    assert.include(missing.stderr, "no experiment nope in this store")
  })

  it("on plain Node (no TypeScript loader of the user's): eval runs the TypeScript example with the loader the command depends on (issue 44)", async () => {
    const dir = work()
    const env: NodeJS.ProcessEnv = { ...process.env }
    // What a user's shell has: no tsx loader, no source condition (the built command runs).
    delete env["NODE_OPTIONS"]
    delete env["FORCE_COLOR"]
    const result = await spawnCommand(process.execPath, [launcher, "eval", example, "--db", "plain.db"], { cwd: dir, env })
    assert.strictEqual(result.code, 0, result.stderr)
    assert.include(result.stdout, "ran 120 runs (0 already finished), 240 scores computed")
    assert.include(result.stdout, "20 samples × 3 epochs")
  })

  it("in a pseudo-terminal: one progress line redrawn in place, with a bar", async () => {
    const dir = work()
    const env: NodeJS.ProcessEnv = { ...process.env }
    delete env["FORCE_COLOR"]
    const quoted = [process.execPath, launcher, "eval", example, "--db", "t.db"].map((a) => `'${a}'`).join(" ")
    const result = await spawnCommand("script", ["-qefc", quoted, "/dev/null"], { cwd: dir, env })
    assert.strictEqual(result.code, 0, result.stdout + result.stderr)
    const frames = result.stdout.split("\r\x1b[2K").slice(1)
    assert.isAtLeast(frames.length, 2, result.stdout)
    assert.match(frames[0]!, /^\[-{24}\] 0\/120 done · 0 running · 0 failed/)
    assert.match(frames[frames.length - 1]!, /^\[#{24}\] 120\/120 done · 0 running · 0 failed · [\d.]+ runs\/s · ETA 0s\r?\n/)
    assert.include(result.stdout, "ran 120 runs (0 already finished), 240 scores computed")
  })

  it("a dataset line that is not JSON is reported with its line number before anything runs; a changed definition is refused", async () => {
    const dir = work()
    fs.writeFileSync(path.join(dir, "bad.jsonl"), "{\"id\":\"a\",\"input\":\"What is 2 times 3?\",\"target\":\"6\"}\n{\"id\":\"b\",\"input\":oops}\n")
    const bad = await polyloop(dir, ["eval", module, "--db", "b.db"], { EVAL_DATASET: "bad.jsonl" })
    assert.strictEqual(bad.code, 1)
    assert.match(bad.stderr, /^polyloop: DatasetError: dataset bad\.jsonl:2: not valid JSON/m)
    const none = await polyloop(dir, ["runs", "--db", "b.db"])
    assert.include(none.stdout, "no runs")
    fs.writeFileSync(path.join(dir, "good.jsonl"), "{\"id\":\"a\",\"input\":\"What is 2 times 3?\",\"target\":\"6\"}\n")
    const good = await polyloop(dir, ["eval", module, "--db", "b.db"], { EVAL_DATASET: "good.jsonl" })
    assert.strictEqual(good.code, 0, good.stderr)
    const changed = await polyloop(dir, ["eval", module, "--db", "b.db"], { EVAL_DATASET: "good.jsonl", EVAL_EPOCHS: "2" })
    assert.strictEqual(changed.code, 1)
    assert.include(changed.stderr, "experiment cli-eval was recorded with another definition (epochs: 1 → 2)")
  })
})
