/**
 * A code-acting run resumed on another machine through the cluster (issue 33, design 0330
 * decision 4): runner A — a process with a sandbox sessions root of its own — hosts a run whose
 * Python actions run in `@polyloop/sandbox`; it is killed with SIGKILL right after a step's
 * snapshot is stored (before that step's result is), and its sessions root is then deleted, as a
 * lost machine's disk. Runner B — another process, another root — takes the run over through
 * the cluster and restores the interpreter's variables and the workspace from the blobs in
 * PostgreSQL, from the last step the log records as executed. The run ends with the answer, the
 * saved variables and the workspace files of an uncrashed run (run first on A).
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cluster from "@polyloop/cluster/Cluster"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import { runId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { timings } from "./support/cluster-fixture.js"
import { freshDatabaseUrl } from "./support/pg-database.js"
import { freePort } from "./support/pg-server.js"
import { type RunnerProcess, spawnSourceRunner } from "./support/runner-spawn.js"
import { crashStep, expectedAnswer, programs } from "./support/sandbox-cluster-script.js"

const poll = <A, E, R>(what: string, effect: Effect.Effect<A, E, R>, done: (a: A) => boolean, timeout: Duration.DurationInput) =>
  effect.pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(100)) }),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) }),
    Effect.orDie
  )

/** What a run left in the store: its log's results, and its newest snapshot. */
const readBack = (id: string) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const log = yield* store.readLog(runId(id), { verify: true })
    const refs = yield* store.blobs!.listRefs(id, Sandbox.refPrefix)
    const bytes = yield* store.blobs!.get(refs[refs.length - 1]!.hash)
    const manifest = JSON.parse(Buffer.from(Option.getOrThrow(bytes)).toString("utf8")) as Sandbox.Manifest
    return {
      finished: Option.isSome(log.finished),
      resumes: log.resumes.length,
      results: log.results.map((r) => ({ step: r.step, status: r.outcome.status, observation: r.outcome.observation })),
      snapshotSteps: refs.map((r) => Number(r.name.slice(Sandbox.refPrefix.length))),
      answer: log.results[log.results.length - 1]?.outcome.observation,
      variables: [...(manifest.states["python"]?.saved ?? [])].sort(),
      files: manifest.entries.map((e) => `${e.kind} ${e.path} ${e.kind === "file" ? e.hash : ""}`)
    }
  })

const exitOf = (runner: RunnerProcess) => Effect.promise(() => runner.exited)

describe.sequential("a code-acting run resumed on another runner through the cluster", () => {
  it.scopedLive(
    "runner A is killed after a snapshot and its disk is lost; runner B restores the interpreter and workspace from PostgreSQL and ends as an uncrashed run",
    () =>
      Effect.flatMap(freshDatabaseUrl("sandbox_cluster"), (url) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* SqlRunLogStore.migrate()
          const base = yield* Effect.acquireRelease(
            Effect.sync(() => {
              const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-sandbox-cluster-"))
              fs.chmodSync(dir, 0o711)
              return dir
            }),
            (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
          )
          const rootA = path.join(base, "machine-a")
          const rootB = path.join(base, "machine-b")
          const reference = "sandbox-ref"
          const crashed = "sandbox-crashed"

          // Runner A alone: every shard is its.
          const a = yield* spawnSourceRunner("sandbox-cluster-runner.ts", url, "runner-a", yield* Effect.promise(() => freePort()), [rootA, crashed])
          yield* Effect.promise(() => a.ready)
          yield* poll(
            "the shards to settle on runner A",
            sql<{ locks: number | string }>`SELECT count(*) AS locks FROM pg_locks WHERE locktype = 'advisory' AND granted
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
            ([row]) => Number(row?.locks) === timings.shardsPerGroup,
            Duration.seconds(120)
          )

          // The uncrashed run, on A.
          yield* Cluster.submit(reference, { n: 0 })
          yield* poll("the reference run to finish", RunIndex.entry(reference), (e) => Option.isSome(e) && e.value.status === "Finished", Duration.seconds(120))

          // The run A dies in: right after its snapshot of step `crashStep`, before the step's result.
          yield* Cluster.submit(crashed, { n: 1 })
          const exitA = yield* exitOf(a)
          assert.strictEqual(exitA.signal, "SIGKILL", `runner A was to kill itself: ${a.stderr()}`)
          const cut = yield* readBack(crashed)
          assert.isFalse(cut.finished)
          assert.deepStrictEqual(cut.snapshotSteps, Array.from({ length: crashStep + 1 }, (_, i) => i), "A stored a snapshot of every step up to the crash")
          assert.deepStrictEqual(cut.results.map((r) => r.step), Array.from({ length: crashStep }, (_, i) => i), "the crash step's result was not recorded")
          // A's disk is gone: B can only restore from the store.
          fs.rmSync(rootA, { recursive: true, force: true })

          // Runner B, another process with another root, takes the run over.
          const b = yield* spawnSourceRunner("sandbox-cluster-runner.ts", url, "runner-b", yield* Effect.promise(() => freePort()), [rootB, "none"])
          yield* Effect.promise(() => b.ready)
          const entry = yield* poll("the crashed run to finish on B", RunIndex.entry(crashed), (e) => Option.isSome(e) && e.value.status === "Finished", Duration.seconds(180))
          assert.isTrue(Option.contains(Option.getOrThrow(entry).runner, b.address), "the run finished on runner B")
          assert.isTrue(fs.readdirSync(rootB).some((name) => name.startsWith("polyloop-sandbox-")), "B's sandbox used its own root")

          const expected = yield* readBack(reference)
          const got = yield* readBack(crashed)
          assert.strictEqual(expected.answer, expectedAnswer)
          assert.strictEqual(expected.resumes, 0)
          assert.isTrue(got.finished)
          assert.isAbove(got.resumes, 0)
          assert.strictEqual(got.answer, expectedAnswer)
          assert.deepStrictEqual(got.variables, expected.variables, "the saved variables")
          assert.includeMembers(got.variables, ["csv", "json", "seed", "rows", "total", "count", "scaled", "summary"])
          assert.deepStrictEqual(got.files, expected.files, "the workspace files, by hash")
          // The crash step was settled as interrupted and written again on B: one program per step
          // ran, each Executed except the interrupted one. The first action on B tells the model
          // exactly what the restore lost — the open file `f` of step 0's `with`, never saved — and
          // no other observation mentions a restart or an error.
          const interrupted = got.results.filter((r) => r.status !== "Executed")
          assert.deepStrictEqual(interrupted.map((r) => r.step), [crashStep])
          assert.strictEqual(got.results.filter((r) => r.status === "Executed").length, programs.length)
          const onB = got.results.find((r) => r.step === crashStep + 1)!
          assert.strictEqual(
            onB.observation.split("\n")[0],
            `[the python interpreter was restarted with the variables saved after step ${crashStep - 1}; not restored: f (TextIOWrapper: files are not saved)]`
          )
          for (const r of got.results) {
            if (r !== onB) assert.notMatch(r.observation, /not restored|Error|restarted/, `step ${r.step}: ${r.observation}`)
          }

          b.child.kill("SIGTERM")
          const exitB = yield* exitOf(b)
          assert.deepStrictEqual(exitB, { code: 0, signal: null }, `runner B did not exit cleanly: ${b.stderr()}`)
        }).pipe(
          Effect.provide(
            Cluster.layerClient({ timings: timings.cluster, shardsPerGroup: timings.shardsPerGroup }).pipe(
              Layer.provideMerge(SqlRunLogStore.layer({ path: "sandbox cluster test" })),
              Layer.provideMerge(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 4 }))
            )
          )
        )
      ),
    300_000
  )
})
