/**
 * Claims, releases and (on PostgreSQL) appends grouped while a store holds other claims (design
 * 0350). Many claims that
 * reach a store together are one upsert and one read (SQLite: one commit, counted in WAL
 * frames), each claimant gets its own answer — its lease, or `RunBusy` for a run already held or
 * named twice in the group — and their releases free every lease. On SQLite and PostgreSQL. And
 * the batcher under it: a failed group is made again one entry at a time.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import { ActionExecutor } from "@polyloop/core/ActionExecutor"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { RunBusy } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as path from "node:path"
import * as GroupCommit from "../src/internal/groupCommit.js"
import * as F from "./fixtures.js"
import { freshSchemaUrl } from "./PgSupport.js"
import { openStore } from "./support/store.js"

interface Outcome {
  readonly runId: RunId
  readonly busy: RunBusy | undefined
}

/**
 * Holds `held` with `store`, then claims `runIds` all at once (each claim kept until `release`
 * is done): the outcomes in order, then closes every scope. `between` runs once every claim has
 * its answer, while the leases are held.
 */
const claimTogether = (
  store: RunLogStore.RunLogStore.Service,
  held: RunId,
  runIds: ReadonlyArray<RunId>,
  between: Effect.Effect<void, unknown>
) =>
  Effect.scoped(Effect.gen(function*() {
    yield* store.claim(held)
    const release = yield* Deferred.make<void>()
    const answered = yield* Deferred.make<void>()
    let answers = 0
    const answer = Effect.suspend(() => (++answers === runIds.length ? Deferred.succeed(answered, undefined) : Effect.void))
    const fibers = yield* Effect.forEach(runIds, (runId) =>
      Effect.fork(Effect.scoped(Effect.gen(function*() {
        const claimed = yield* Effect.either(store.claim(runId))
        yield* answer
        if (Either.isRight(claimed)) yield* Deferred.await(release)
        return { runId, busy: Either.isLeft(claimed) && claimed.left instanceof RunBusy ? claimed.left : undefined } satisfies Outcome
      }))))
    yield* Deferred.await(answered)
    yield* between
    yield* Deferred.succeed(release, undefined)
    return yield* Effect.forEach(fibers, Fiber.join)
  }))

/** Every run of `runIds` can be claimed by `other` at once (its lease was released). */
const allFree = (other: RunLogStore.RunLogStore.Service, runIds: ReadonlyArray<RunId>) =>
  Effect.forEach(runIds, (runId) => Effect.scoped(other.claim(runId)), { discard: true })

const names = (count: number, prefix: string): ReadonlyArray<RunId> => Array.from({ length: count }, (_, i) => F.rid(`${prefix}-${i}`))

/** The runs claimed together: 40 distinct, one named twice, and the run the store already holds. */
const claimsOf = (prefix: string) => {
  const distinct = names(40, prefix)
  const twice = F.rid(`${prefix}-twice`)
  const held = F.rid(`${prefix}-held`)
  return { distinct, twice, held, all: [...distinct, twice, twice, held] }
}

const checkOutcomes = (outcomes: ReadonlyArray<Outcome>, claims: ReturnType<typeof claimsOf>) => {
  for (const o of outcomes.slice(0, 40)) assert.strictEqual(o.busy, undefined, `${o.runId} should be claimed`)
  const [first, second, held] = outcomes.slice(40)
  // The run named twice: one claimant has it, the other is told who does.
  assert.strictEqual([first!.busy, second!.busy].filter((b) => b === undefined).length, 1)
  const refused = (first!.busy ?? second!.busy)!
  assert.strictEqual(refused.runId, claims.twice)
  assert.isString(refused.owner)
  assert.instanceOf(held!.busy, RunBusy)
  assert.strictEqual(held!.busy!.runId, claims.held)
}

const sqliteFrames = (file: string): number => {
  const wal = `${file}-wal`
  // A WAL frame: a 24-byte header and one 4,096-byte page (the store's page size).
  return fs.existsSync(wal) ? Math.floor(fs.statSync(wal).size / (4096 + 24)) : 0
}

describe("grouped claims (design 0350)", () => {
  it.scoped("SQLite: 43 claims at once are one commit, each claimant gets its own answer, and their releases free every lease", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "runs.db")
      const store = yield* openStore(file, { synchronous: "FULL" })
      const other = yield* openStore(file, { synchronous: "FULL" })
      const claims = claimsOf("sqlite")
      // A first claim and release, so the tables' pages are in the WAL before counting.
      yield* Effect.scoped(store.claim(F.rid("warm")))
      const beforeClaims = sqliteFrames(file)
      let afterClaims = 0
      const outcomes = yield* claimTogether(store, claims.held, claims.all, Effect.sync(() => {
        afterClaims = sqliteFrames(file)
      }))
      const afterReleases = sqliteFrames(file)
      checkOutcomes(outcomes, claims)
      // One at a time, each of the 43 claims would be a commit of its own (at least one frame each).
      const claimFrames = afterClaims - beforeClaims
      assert.isAtLeast(claimFrames, 1)
      assert.isBelow(claimFrames, 15, `claims wrote ${claimFrames} WAL frames`)
      assert.isBelow(afterReleases - afterClaims, 15, `releases wrote ${afterReleases - afterClaims} WAL frames`)
      yield* allFree(other, [...claims.distinct, claims.twice, claims.held])
    }))

  it.scoped("PostgreSQL: the same claims at once get the same answers (a run named twice falls back to one at a time), and their releases free every lease", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const open = (): Effect.Effect<RunLogStore.RunLogStore.Service, unknown, Scope.Scope> =>
        Effect.map(Layer.build(SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4 })), (ctx) => Context.get(ctx, RunLogStore.RunLogStore))
      const store = yield* open()
      const other = yield* open()
      const claims = claimsOf("pg")
      const outcomes = yield* claimTogether(store, claims.held, claims.all, Effect.void)
      checkOutcomes(outcomes, claims)
      yield* allFree(other, [...claims.distinct, claims.twice, claims.held])
      // Without the twice-named run, the group is one upsert: every claim answered, every lease freed.
      const more = names(30, "pg-more")
      const again = yield* claimTogether(store, F.rid("pg-held-2"), more, Effect.void)
      for (const o of again) assert.strictEqual(o.busy, undefined)
      yield* allFree(other, more)
    }))
})

describe("grouped appends on PostgreSQL (design 0350)", () => {
  it.scoped("appends of runs that reach the store together are one statement (one transaction id); a gap fails only its own run, a duplicate makes each append alone", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const layer = SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4 })
      const context = yield* Layer.build(Layer.merge(layer, SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 1 })))
      const store = Context.get(context, RunLogStore.RunLogStore)
      const sql = Context.get(context, SqlClient.SqlClient)
      const runs = names(8, "append")
      yield* Effect.forEach(runs, (r) => Effect.zipRight(store.claim(r), store.start(F.started(r))), { discard: true })
      const appendAll = (seqOf: (i: number) => number) =>
        Effect.forEach(runs, (r, i) => Effect.either(store.appendReply(r, F.replied(seqOf(i), 0))), { concurrency: "unbounded" })
      const first = yield* appendAll(() => 1)
      assert.isTrue(first.every(Either.isRight))
      // Written by one statement: one transaction id for all eight records.
      const xids = yield* sql<{ n: number | string }>`SELECT count(DISTINCT xmin::text) AS n FROM polyloop_records WHERE seq = 1`
      assert.strictEqual(Number(xids[0]!.n), 1)
      // Run 3 skips a sequence number (a gap): refused alone; the others are written together.
      const second = yield* appendAll((i) => (i === 3 ? 3 : 2))
      second.forEach((e, i) => assert.strictEqual(Either.isLeft(e), i === 3, `run ${i}`))
      const gap = second[3]!
      assert.isTrue(Either.isLeft(gap) && gap.left._tag === "ConcurrentWriter")
      // Run 5 repeats its last sequence number (a duplicate): the group's statement fails, each is
      // written alone, only run 5 is refused.
      const third = yield* appendAll((i) => (i === 3 ? 2 : i === 5 ? 2 : 3))
      third.forEach((e, i) => assert.strictEqual(Either.isLeft(e), i === 5, `run ${i}`))
      // Runs 3 (its gap) and 5 (its duplicate) have two replies, the others three; the summaries agree.
      const expected = (i: number) => (i === 3 || i === 5 ? 2 : 3)
      for (const [i, r] of runs.entries()) {
        const log = yield* store.readLog(r, { verify: true })
        assert.strictEqual(log.replies.length, expected(i), `run ${i}`)
      }
      const summaries = new Map((yield* store.listRuns()).map((row) => [row.runId, row.tokens]))
      for (const [i, r] of runs.entries()) assert.strictEqual(summaries.get(r), 15 * expected(i), `run ${i}'s tokens (10 in, 5 out a reply)`)
    }))
})

describe("grouped appends on PostgreSQL, arriving one by one (design 0350, decision 4)", () => {
  it.scoped("runs stepping out of lockstep still share statements: while two are in flight the next appends wait and go together", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const layer = SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 8 })
      const context = yield* Layer.build(Layer.merge(layer, SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 1 })))
      const store = Context.get(context, RunLogStore.RunLogStore)
      const sql = Context.get(context, SqlClient.SqlClient)
      const runs = names(12, "staggered")
      yield* Effect.forEach(runs, (r) => Effect.zipRight(store.claim(r), store.start(F.started(r))), { discard: true })
      // Each run appends 6 replies one after another, each next one when its previous returned;
      // the runs start in different scheduler turns, so no two appends are ever submitted in one.
      const appends = 6
      const fibers = []
      for (const r of runs) {
        fibers.push(yield* Effect.fork(Effect.forEach(Array.from({ length: appends }, (_, k) => k + 1), (seq) => store.appendReply(r, F.replied(seq, 0)), { discard: true })))
        yield* Effect.yieldNow()
      }
      yield* Effect.forEach(fibers, Fiber.join, { discard: true })
      for (const r of runs) assert.strictEqual((yield* store.readLog(r, { verify: true })).replies.length, appends)
      // 72 appends; one statement each would be 72 transaction ids. With batches waiting for a
      // slot they share statements: far fewer.
      const xids = yield* sql<{ n: number | string }>`SELECT count(DISTINCT xmin::text) AS n FROM polyloop_records WHERE seq >= 1`
      const transactions = Number(xids[0]!.n)
      assert.isBelow(transactions, (runs.length * appends) / 2, `${transactions} transactions for ${runs.length * appends} appends`)
    }))
})

describe("PostgreSQL listing reads payloads as json, not jsonb", () => {
  // jsonb refuses the escape \u0000 that a task (or any text) may hold: a listing of such a run
  // failed with "unsupported Unicode escape sequence" (found by the contract's property).
  it.scoped("runs whose texts hold \\u0000 are listed (a conversation among them) and searched", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const store = Context.get(yield* Layer.build(SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 2 })), RunLogStore.RunLogStore)
      const plain = F.rid("nul-plain")
      const chat = F.rid("nul-chat")
      yield* store.start({ ...F.started(plain, { task: "\u0000 \ud800" }) })
      yield* store.start({ ...F.started(chat, { task: "a\u0000b" }), conversation: { messageId: "m\u0000" } })
      const listed = yield* store.listRuns()
      assert.deepStrictEqual(listed.map((r) => r.runId).sort(), [chat, plain].sort())
      assert.isTrue(listed.every((r) => r.status === "Unfinished"))
      // And a search answers (such records are not searched on PostgreSQL).
      const search = store.searchRuns
      assert.isDefined(search)
      assert.deepStrictEqual(yield* search!({ text: "a", limit: 10, offset: 0 }), [])
    }))
})

describe("many runs at once on one SQLite file (design 0350)", () => {
  it.scoped("30 Agent.runs started together share their commits: their claims, appends and releases are grouped, far fewer commits than one a write", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir("polyloop-many-runs-")
      const file = path.join(dir, "runs.db")
      const store = yield* openStore(file)
      const noop = Tool.make({ name: "noop", description: "does nothing", parameters: Schema.Struct({ n: Schema.Int }), handler: () => Effect.succeed("ok") })
      const tools = ToolRegistry.make(noop)
      const executor = yield* tools.executor()
      const agent = AgentDefinition.make({ name: "many", systemPrompt: "call noop", budget: { maxSteps: 4 } })
      const model = yield* ScriptedModel.make((_: unknown, call: ScriptedModel.Call) => ScriptedModel.toolCall("noop", { n: call.step }))
      const services = Layer.mergeAll(
        Layer.succeed(RunLogStore.RunLogStore, store),
        model.layer,
        NativeToolCallParser.layer(),
        EventSink.layerNoop,
        Layer.succeed(ActionExecutor, executor)
      )
      const runs = names(30, "together")
      const before = sqliteFrames(file)
      const results = yield* Effect.forEach(runs, (runId) => Agent.run({ runId, agent, task: "go", tools }), { concurrency: "unbounded" }).pipe(
        Effect.provide(services)
      )
      assert.deepStrictEqual(results.map((r) => r.steps), runs.map(() => 4))
      // Written one at a time, the 30 runs are 30 × 12 commits (a claim, RunStarted, two appends a
      // step, the finish, the release), each at least one WAL frame (counted: 983 frames when a
      // run went from its claim to its end before the next one claimed). Grouped, the runs that
      // started together write together (counted: 154 frames).
      const frames = sqliteFrames(file) - before
      assert.isBelow(frames, 300, `${frames} WAL frames for 30 runs`)
      const logs = yield* Effect.forEach(runs, (runId) => store.readLog(runId))
      assert.deepStrictEqual(logs.map((log) => Option.isSome(log.finished)), runs.map(() => true))
    }))
})

describe("GroupCommit.batcher", () => {
  it.effect("entries that arrive together are one group call; a failed group is made one entry at a time, each with its own outcome", () =>
    Effect.gen(function*() {
      const groups: Array<ReadonlyArray<number>> = []
      const alone: Array<number> = []
      const batcher = GroupCommit.batcher<number, number, string>({
        group: (inputs) => {
          groups.push(inputs)
          return inputs.includes(13) ? Effect.fail("the group failed") : Effect.succeed(inputs.map((n) => n * 10))
        },
        alone: (n) => {
          alone.push(n)
          return n === 13 ? Effect.fail(`no ${n}`) : Effect.succeed(n * 10)
        },
        maxBatch: 4
      })
      const together = (inputs: ReadonlyArray<number>) => Effect.forEach(inputs, (n) => Effect.either(batcher.submit(n)), { concurrency: "unbounded" })
      const first = yield* together([1, 2, 3, 4, 5, 6])
      assert.deepStrictEqual(first.map((e) => Either.getOrThrow(e)), [10, 20, 30, 40, 50, 60])
      // At most 4 a call.
      assert.deepStrictEqual(groups, [[1, 2, 3, 4], [5, 6]])
      assert.deepStrictEqual(alone, [])
      const second = yield* together([12, 13, 14])
      assert.deepStrictEqual(second.map((e) => Either.isRight(e) ? e.right : e.left), [120, "no 13", 140])
      assert.deepStrictEqual(alone, [12, 13, 14])
      // One entry alone is made alone, without a group call.
      groups.length = 0
      assert.strictEqual(yield* batcher.submit(7), 70)
      assert.deepStrictEqual(groups, [])
    }))

  it.effect("with inFlight, entries arriving one by one while batches are in flight join the next batch; nothing waits on an idle batcher (decision 4)", () =>
    Effect.gen(function*() {
      const made: Array<ReadonlyArray<number>> = []
      // Each call (group or alone) stays in flight until the test opens its gate.
      const gates: Array<Deferred.Deferred<void>> = []
      const inFlightCall = (inputs: ReadonlyArray<number>) =>
        Effect.gen(function*() {
          made.push(inputs)
          const gate = yield* Deferred.make<void>()
          gates.push(gate)
          yield* Deferred.await(gate)
          return inputs.map((n) => n * 10)
        })
      const batcher = GroupCommit.batcher<number, number, string>({
        group: inFlightCall,
        alone: (n) => Effect.map(inFlightCall([n]), (answers) => answers[0]!),
        maxBatch: 100,
        inFlight: 2
      })
      const settle = Effect.repeatN(Effect.yieldNow(), 20)
      // Daemons: a failed assertion must not wait for fibers held in an uninterruptible batch.
      // Two entries, each alone in its scheduler turn: both are made at once (two slots).
      const a = yield* Effect.forkDaemon(batcher.submit(1))
      yield* settle
      const b = yield* Effect.forkDaemon(batcher.submit(2))
      yield* settle
      assert.deepStrictEqual(made, [[1], [2]])
      // Both slots taken: five entries arriving in five different turns wait, and are one batch.
      const later: Array<Fiber.RuntimeFiber<number, string>> = []
      for (const n of [3, 4, 5, 6, 7]) {
        later.push(yield* Effect.forkDaemon(batcher.submit(n)))
        yield* settle
      }
      assert.deepStrictEqual(made, [[1], [2]])
      yield* Deferred.succeed(gates[0]!, undefined)
      yield* settle
      assert.deepStrictEqual(made, [[1], [2], [3, 4, 5, 6, 7]])
      assert.strictEqual(yield* Fiber.join(a), 10)
      yield* Deferred.succeed(gates[1]!, undefined)
      yield* Deferred.succeed(gates[2]!, undefined)
      assert.strictEqual(yield* Fiber.join(b), 20)
      assert.deepStrictEqual(yield* Effect.forEach(later, Fiber.join), [30, 40, 50, 60, 70])
      // Idle again: a lone entry is made at once.
      const c = yield* Effect.forkDaemon(batcher.submit(8))
      yield* settle
      assert.deepStrictEqual(made.at(-1), [8])
      yield* Deferred.succeed(gates[3]!, undefined)
      assert.strictEqual(yield* Fiber.join(c), 80)
    }))

  it.effect("an entry interrupted while its batch is in flight ends interrupted, not with a value; the batch's other entries get their answers (design 0350, outcome cells)", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      let calls = 0
      const batcher = GroupCommit.batcher<number, number, string>({
        group: (inputs) => Effect.as(Effect.zipRight(Effect.sync(() => calls++), Deferred.await(gate)), inputs.map((n) => n + 100)),
        alone: (n) => Effect.succeed(n),
        maxBatch: 100
      })
      const fibers = yield* Effect.forEach([1, 2, 3], (n) => Effect.forkDaemon(batcher.submit(n)))
      yield* Effect.repeatN(Effect.yieldNow(), 20)
      assert.strictEqual(calls, 1)
      // The second entry waits for the batch: interrupting it ends it interrupted at once.
      const exit = yield* Fiber.interrupt(fibers[1]!)
      assert.isTrue(Exit.isInterrupted(exit))
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(fibers[0]!), 101)
      assert.strictEqual(yield* Fiber.join(fibers[2]!), 103)
      assert.strictEqual(calls, 1)
    }))

  it.effect("the append committer: an append interrupted while it waits for its group ends interrupted; the group is still written once for all", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const writes: Array<number> = []
      const committer = GroupCommit.make((_params, rows) => Effect.zipRight(Effect.sync(() => writes.push(rows)), Deferred.await(gate)))
      const fibers = yield* Effect.forEach([1, 2, 3], (n) => Effect.forkDaemon(committer.submit([n], 1)))
      yield* Effect.repeatN(Effect.yieldNow(), 20)
      assert.deepStrictEqual(writes, [3])
      const exit = yield* Fiber.interrupt(fibers[2]!)
      assert.isTrue(Exit.isInterrupted(exit))
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(fibers[0]!)
      yield* Fiber.join(fibers[1]!)
      assert.deepStrictEqual(writes, [3])
    }))

  it.effect("without inFlight, batches never wait for each other (SQLite's claims)", () =>
    Effect.gen(function*() {
      const made: Array<ReadonlyArray<number>> = []
      const gate = yield* Deferred.make<void>()
      const call = (inputs: ReadonlyArray<number>) => Effect.as(Effect.zipRight(Effect.sync(() => made.push(inputs)), Deferred.await(gate)), inputs)
      const batcher = GroupCommit.batcher<number, number, string>({
        group: call,
        alone: (n) => Effect.as(call([n]), n),
        maxBatch: 100
      })
      const fibers: Array<Fiber.RuntimeFiber<number, string>> = []
      for (const n of [1, 2, 3]) {
        fibers.push(yield* Effect.forkDaemon(batcher.submit(n)))
        yield* Effect.repeatN(Effect.yieldNow(), 20)
      }
      assert.deepStrictEqual(made, [[1], [2], [3]])
      yield* Deferred.succeed(gate, undefined)
      assert.deepStrictEqual(yield* Effect.forEach(fibers, Fiber.join), [1, 2, 3])
    }))
})
