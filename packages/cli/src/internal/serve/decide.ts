/**
 * `POST /api/runs/<id>/decisions`: a person's decision on a call waiting for approval, through
 * `Approval.decide`, JSON only, from the viewer's own page, recorded under the server's
 * `decider` with the page's name as a claim (`../viewer/decisions.ts` checks and describes).
 *
 * @internal
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Approval from "@polyloop/core/Approval"
import * as RunLog from "@polyloop/core/RunLog"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Address from "../viewer/address.js"
import * as Decisions from "../viewer/decisions.js"
import { apiError, jsonBody, respondToFailure, runIdParam } from "./http.js"

const encodeRecord = Schema.encodeSync(RunLog.RunRecord)

/** The handler of `POST /api/runs/<id>/decisions`, decisions recorded under `decider`. */
export const decide = (allowed: Address.Allowlist, decider: string) =>
  respondToFailure(Effect.gen(function*() {
    const runId = yield* runIdParam
    const request = yield* HttpServerRequest.HttpServerRequest
    const refused = Decisions.refusal(request.headers, allowed)
    if (refused !== undefined) return apiError(refused.status, refused.tag, refused.message)
    const json = yield* jsonBody(request, `a decision's body is at most ${Decisions.maxBodyBytes} bytes`)
    const body = yield* Schema.decodeUnknown(Decisions.DecisionBody, { onExcessProperty: "error" })(json).pipe(
      Effect.mapError((error) => apiError(400, "InvalidBody", Decisions.describeIssues(error)))
    )
    const record = yield* Approval.decide({
      runId,
      callId: body.callId,
      decision: body.decision === "Approve" ? Approval.approve : Approval.reject(body.reason ?? ""),
      by: Decisions.recordedBy(body.by, decider),
      actionHash: body.actionHash
    }).pipe(
      Effect.mapError((error) =>
        apiError(
          error._tag === "NotSuspended" && error.reason === "Finished" ? 409 : Decisions.statusOf(error._tag),
          error._tag,
          error.message
        )
      )
    )
    return HttpServerResponse.unsafeJson({ decided: encodeRecord(record) })
  }))
