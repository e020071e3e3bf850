import { describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { EventDeliveryError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as EventSinkContract from "../src/EventSinkContract.js"
import { holdsAll, registerBroken } from "./helpers.js"

/** An in-memory sink whose `store` decides how events are kept. */
const recording = (store: (events: Array<LoopEvent>, event: LoopEvent) => void) =>
  Effect.sync((): EventSinkContract.SinkInstance => {
    const events: Array<LoopEvent> = []
    return {
      sink: EventSink.make((event) => Effect.sync(() => store(events, event))),
      readBack: (count) => Effect.sync(() => events.slice(0, count))
    }
  })
const inOrder = recording((events, event) => void events.push(event))

const failWith = (emit: EventSink.EventSink.Service["emit"]) => EventSink.layer(emit)
const failing = failWith((event) => Effect.fail(new EventDeliveryError({ message: `cannot deliver ${event._tag}` })))

const all = EventSinkContract.properties(inOrder, { failing })

describe("EventSinkContract", () => {
  it.live("a correct sink satisfies every property", () => holdsAll(all), 60_000)

  it("a layer (no read back) has no order property", ({ expect }) => {
    expect(Object.keys(EventSinkContract.properties(EventSink.layerNoop))).toEqual(["delivers"])
  })

  registerBroken(all, [
    {
      name: "a sink that fails on some events although healthy",
      props: () =>
        EventSinkContract.properties(
          failWith((event) => (event._tag === "ActionExecuted" ? Effect.fail(new EventDeliveryError({ message: "too big" })) : Effect.void))
        ),
      breaks: { delivers: /emit\(ActionExecuted .*\) on a healthy sink failed: failure EventDeliveryError: too big/ }
    },
    {
      name: "a sink that puts each event first",
      props: () => EventSinkContract.properties(recording((events, event) => void events.unshift(event))),
      breaks: { order: /the events read back differ from the \d+ emitted/ }
    },
    {
      name: "a sink that drops repeated kinds of event",
      props: () =>
        EventSinkContract.properties(
          recording((events, event) => {
            if (!events.some((e) => e._tag === event._tag)) events.push(event)
          })
        ),
      breaks: { order: /the events read back differ from the \d+ emitted/ }
    },
    {
      name: "a sink whose failure is a thrown exception",
      props: () =>
        EventSinkContract.properties(inOrder, {
          failing: failWith(() => Effect.sync(() => { throw new Error("disk full") }))
        }),
      breaks: {
        failureIsTyped: /exited with defect Error: disk full; it must fail with EventDeliveryError only/,
        runSurvivesFailingSink: /did not finish: defect Error: disk full/
      }
    },
    {
      name: "a sink that interrupts on failure",
      props: () => EventSinkContract.properties(inOrder, { failing: failWith(() => Effect.interrupt) }),
      breaks: { failureIsTyped: /exited with interruption/, runSurvivesFailingSink: /did not finish: interruption/ }
    },
    {
      name: "a sink that swallows its failures",
      props: () => EventSinkContract.properties(inOrder, { failing: failWith(() => Effect.void) }),
      breaks: { failureIsTyped: /succeeded: failures must surface as EventDeliveryError/, runSurvivesFailingSink: /counted no delivery failure/ }
    }
  ])
})
