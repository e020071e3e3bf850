/**
 * The log as read back (`internal/logView.ts`) at the size long runs reach: `RunLog.records` of
 * a log with hundreds of thousands of records returns them all in sequence order (a spread of
 * every record into one `push` call overflowed the stack past ~120,000 arguments).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as Option from "effect/Option"

describe("RunLog.records at size", () => {
  it("300,000 replies: every record, in sequence order, and fromRecords gives the same log back", () => {
    const reply = ModelReply.make({ text: "x" })
    const count = 300_000
    const replies: Array<RunLog.ModelReplied> = []
    // Written out of order (odd seqs first) so that the sort is exercised too.
    for (let i = 1; i <= count; i += 2) replies.push({ _tag: "ModelReplied", seq: i, step: Ids.StepIndex.make(i), reply })
    for (let i = 2; i <= count; i += 2) replies.push({ _tag: "ModelReplied", seq: i, step: Ids.StepIndex.make(i), reply })
    const log = { ...RunLog.fromRecords([]), replies }
    const all = RunLog.records(log)
    assert.strictEqual(all.length, count)
    let ordered = true
    for (let i = 0; i < all.length; i++) if (all[i]!.seq !== i + 1) ordered = false
    assert.isTrue(ordered)
    assert.isTrue(Option.isNone(RunLog.fromRecords(all).started))
    assert.strictEqual(RunLog.fromRecords(all).replies.length, count)
  })
})
