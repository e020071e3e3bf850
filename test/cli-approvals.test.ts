/**
 * The approval commands end to end (design 0160), as a user runs them (the real launcher, a
 * subprocess), on SQLite (`--db`) and PostgreSQL (`--pg`): a store holding a run suspended on two
 * calls (written in this process through the SQL store), then `polyloop runs` shows it
 * `suspended` (and `--status suspended` selects it), `polyloop pending` lists both calls with
 * their arguments and hash (table and `--json`), `approve` with another action's hash is refused
 * in one line and writes nothing, `approve` records the decision, a second `approve` is told the
 * first stands, `reject --reason` decides the other call, and the run is then listed unfinished
 * (ready to resume) with nothing pending.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Approval from "@polyloop/core/Approval"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import type * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { launcher, type Result, spawnNode } from "./support/cli-process.js"
import { freshDatabaseUrl } from "./support/pg-database.js"

const polyloop = (args: ReadonlyArray<string>): Promise<Result> => {
  const env: NodeJS.ProcessEnv = { ...process.env, USER: "carol" }
  delete env["FORCE_COLOR"]
  return spawnNode([launcher, ...args], { env })
}

const run = (args: ReadonlyArray<string>) => Effect.promise(() => polyloop(args))

const runId = Ids.runId("refund-7")
const call = (id: string, amount: number): RunLog.ApprovalRequested["action"] => ({
  _tag: "ToolCall",
  id,
  name: "refund",
  arguments: { orderId: 7, amount }
})

/** A run suspended at step 0 on calls `c1` (250 EUR) and `c2` (900 EUR), written through the store. */
const writeSuspended = Effect.gen(function*() {
  const store = yield* RunLogStore.RunLogStore
  yield* store.start({ _tag: "RunStarted", seq: 0, runId, task: "refund", snapshot: { agent: { name: "desk" } }, snapshotHash: "h", startedAt: 1_700_000_000_000 })
  yield* store.appendReply(runId, { _tag: "ModelReplied", seq: 1, step: Ids.StepIndex.make(0), reply: ModelReply.make({ text: "" }) })
  const requests = (["c1", "c2"] as const).map((id, i): RunLog.ApprovalRequested => {
    const action = call(id, i === 0 ? 250 : 900)
    return { _tag: "ApprovalRequested", seq: 2 + i, step: Ids.StepIndex.make(0), callId: id, action, actionHash: Approval.actionHash(runId, 0, id, action), at: 1_700_000_000_500 }
  })
  yield* store.appendApprovals(runId, [requests[0]!, requests[1]!])
})

const recordCount = Effect.flatMap(RunLogStore.RunLogStore, (store) => Effect.map(store.readLog(runId), (log) => log.approvals.length))

const scenario = (where: ReadonlyArray<string>, store: Layer.Layer<RunLogStore.RunLogStore, unknown>) =>
  Effect.gen(function*() {
    yield* Effect.provide(writeSuspended, store)
    const runs = yield* run(["runs", ...where])
    assert.strictEqual(runs.code, 0, runs.stderr)
    assert.match(runs.stdout, /refund-7\s+desk\s+suspended/)
    const onlySuspended = yield* run(["runs", "--status", "suspended", "--json", ...where])
    assert.deepStrictEqual((JSON.parse(onlySuspended.stdout) as Array<{ runId: string; status: string }>).map((r) => [r.runId, r.status]), [["refund-7", "Suspended"]])

    const table = yield* run(["pending", ...where])
    assert.strictEqual(table.code, 0, table.stderr)
    assert.match(table.stdout, /^RUN\s+STEP\s+CALL\s+TOOL\s+ARGUMENTS\s+HASH\s+REQUESTED \(UTC\)$/m)
    assert.match(table.stdout, /^refund-7\s+0\s+c1\s+refund\s+\{"orderId":7,"amount":250\}\s+[0-9a-f]{12}\s+2023-11-14 22:13:20Z$/m)
    assert.match(table.stdout, /^refund-7\s+0\s+c2\s+refund\s+\{"orderId":7,"amount":900\}/m)
    const json = yield* run(["pending", "--json", ...where])
    const waiting = JSON.parse(json.stdout) as Array<{ callId: string; actionHash: string; action: { arguments: unknown } }>
    assert.deepStrictEqual(waiting.map((w) => [w.callId, w.action.arguments]), [["c1", { orderId: 7, amount: 250 }], ["c2", { orderId: 7, amount: 900 }]])

    // The hash of the other call: the person reviewed another action.
    const wrong = yield* run(["approve", "refund-7", "c1", "--hash", waiting[1]!.actionHash.slice(0, 10), ...where])
    assert.notStrictEqual(wrong.code, 0)
    assert.match(wrong.stderr, /^polyloop: ActionMismatch: run refund-7: call c1 requests action/)
    assert.strictEqual(wrong.stderr.trimEnd().split("\n").length, 1)
    const short = yield* run(["approve", "refund-7", "c1", "--hash", "abc", ...where])
    assert.match(short.stderr, /--hash needs at least 8 characters/)
    assert.strictEqual(yield* Effect.provide(recordCount, store), 2, "refused decisions write nothing")

    const approved = yield* run(["approve", "refund-7", "c1", "--hash", waiting[0]!.actionHash.slice(0, 12), ...where])
    assert.strictEqual(approved.code, 0, approved.stderr)
    assert.match(approved.stdout, /^approved call c1 of run refund-7 \(step 0, by carol\); the run still waits for c2$/m)
    const again = yield* run(["approve", "refund-7", "c1", "--by", "dave", ...where])
    assert.match(again.stderr, /^polyloop: AlreadyDecided: run refund-7: call c1 was already approved by carol; the first decision stands$/m)
    const unknown = yield* run(["reject", "refund-7", "c9", "--reason", "x", ...where])
    assert.match(unknown.stderr, /^polyloop: UnknownCall: run refund-7 waits for no call "c9"; waiting: c2$/m)
    const noReason = yield* run(["reject", "refund-7", "c2", ...where])
    assert.strictEqual(noReason.code, 2, "--reason is required")

    const rejected = yield* run(["reject", "refund-7", "c2", "--reason", "over the limit for one order", "--by", "dave", ...where])
    assert.strictEqual(rejected.code, 0, rejected.stderr)
    assert.match(rejected.stdout, /^rejected call c2 of run refund-7 \(step 0, by dave\); the run can resume/m)
    const none = yield* run(["pending", ...where])
    assert.match(none.stdout, /^no calls wait for a decision in /)
    const after = yield* run(["runs", ...where])
    assert.match(after.stdout, /refund-7\s+desk\s+unfinished/)
    const notWaiting = yield* run(["approve", "refund-7", "c3", ...where])
    assert.match(notWaiting.stderr, /^polyloop: NotSuspended: run refund-7 is not suspended: the run waits for no decision$/m)
    const decided = yield* Effect.provide(
      Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(runId, { verify: true })),
      store
    )
    assert.deepStrictEqual(
      decided.approvals.flatMap((r) => (r._tag === "ApprovalDecided" ? [[r.callId, r.decision._tag, r.by]] : [])),
      [["c1", "Approve", "carol"], ["c2", "Reject", "dave"]]
    )
  })

describe.sequential("polyloop pending / approve / reject", () => {
  it.scoped("--db: on a SQLite store", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-cli-approvals-"))),
        (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
      )
      const db = path.join(dir, "runs.db")
      yield* scenario(["--db", db], SqlRunLogStore.layerSqlite({ filename: db }))
    }), 900_000)

  it.scoped("--pg: on a PostgreSQL store", () =>
    Effect.gen(function*() {
      const url = yield* freshDatabaseUrl("cli_approvals")
      yield* scenario(["--pg", url], SqlRunLogStore.layerPg({ url: Redacted.make(url) }))
    }), 900_000)
})
