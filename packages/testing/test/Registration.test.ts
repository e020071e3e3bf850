/**
 * The vitest path: `suite` registers each property with `it.live.prop`, and a broken
 * implementation makes the registered test fail. Registered here through `it.fails`, so each
 * test passes only if the property test it wraps fails.
 */
import { describe, it, makeMethods } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as V from "vitest"
import { DecisionParser } from "@polyloop/core/DecisionParser"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as DecisionParserContract from "../src/DecisionParserContract.js"
import { register } from "../src/internal/suite.js"
import * as RunLogStoreContract from "../src/RunLogStoreContract.js"

// `it.fails` has the shape of `it` (its chainable extras aside): the methods built on it register tests that must fail.
const expectFailure = makeMethods(Object.assign(V.it.fails, { scopedFixtures: V.it.scoped }) as unknown as Parameters<typeof makeMethods>[0])

const dropsLast = Layer.sync(RunLogStore.RunLogStore, () => {
  const inner = RunLogStore.make(RunLogStore.makeMemoryBackend())
  return { ...inner, readLog: (runId) => Effect.map(inner.readLog(runId), (log) => RunLog.fromRecords(RunLog.records(log).slice(0, -1))) }
})
const store = RunLogStoreContract.properties(dropsLast)
register("registered store properties fail on a store that drops the last record", { prefix: store.prefix!, roundTrip: store.roundTrip! }, {}, expectFailure)

const throwsOnEmpty = Layer.succeed(DecisionParser, {
  id: "ThrowsOnEmpty",
  parse: (reply) => Effect.sync(() => {
    if (reply.text === "") throw new Error("empty")
    return ParsedReply.noAction
  })
})
register("registered parser properties fail on a parser that throws on empty input", { neverFails: DecisionParserContract.properties(throwsOnEmpty).neverFails }, {}, expectFailure)

describe("registration", () => {
  it("suite registers one test per property (checked by the suites above and by the core contract tests)", ({ expect }) => {
    expect(Object.keys(RunLogStoreContract.properties(RunLogStore.layerMemory)).length).toBeGreaterThan(5)
  })
})
