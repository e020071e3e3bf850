/**
 * The continuation stack of one run parked in its model call (issue 35): each frame, innermost
 * last, with the functions it continues with. The model parks as `heap.ts`'s does (its
 * `Deferred.await` adds 3 frames, its `zipRight` 1). `--forEach`: the run is started as
 * `heap.ts` starts its runs (`Effect.forEach` with unbounded concurrency, services provided
 * around it), else forked with the services provided inside its fiber (4 frames of a provide).
 *   tsx bench/profile/frames.ts [--sqlite] [--forEach]
 * (Run it on the compiled packages, without `--conditions=@polyloop/source`, after `tsc -b`.)
 */
import * as Agent from "@polyloop/core/Agent"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as F from "../lib/fixtures.js"
import { withSqlite } from "../lib/store.js"

interface Frame {
  readonly _op: string
  readonly effect_instruction_i0?: unknown
  readonly effect_instruction_i1?: unknown
  readonly effect_instruction_i2?: unknown
}

const describe = (value: unknown): string => {
  if (typeof value !== "function") return ""
  const text = value.toString().replace(/\s+/g, " ")
  return `${value.name || "(anon)"}: ${text.slice(0, 110)}`
}

const program = (store: RunLogStore.RunLogStore.Service) =>
  Effect.gen(function*() {
    const parked = yield* Deferred.make<Fiber.RuntimeFiber<unknown, unknown>>()
    const release = yield* Deferred.make<void>()
    const model = F.model(F.replies(4), {
      onCall: (step) =>
        step !== 2 ? Effect.void : Effect.zipRight(
          Effect.withFiberRuntime<boolean>((runFiber) => Deferred.succeed(parked, runFiber)),
          Deferred.await(release)
        )
    })
    const request = F.request("frames", 4)
    const fiber = yield* Effect.fork(
      process.argv.includes("--forEach")
        ? F.runAllOn(store, model, [request])
        : Effect.asVoid(Agent.run(request).pipe(Effect.provide(F.contextOf(store, model))))
    )
    const runFiber = yield* Deferred.await(parked)
    yield* Effect.yieldNow()
    const stack = (runFiber as unknown as { readonly _stack: ReadonlyArray<Frame> })._stack
    process.stdout.write(`${stack.length} frames (outermost first):\n`)
    for (const frame of stack) {
      process.stdout.write(`  ${frame._op.padEnd(20)} ${describe(frame.effect_instruction_i0)} | ${describe(frame.effect_instruction_i1)} | ${describe(frame.effect_instruction_i2)}\n`)
    }
    yield* Deferred.succeed(release, undefined)
    yield* Fiber.join(fiber)
  })

if (process.argv.includes("--sqlite")) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-frames-"))
  await withSqlite(path.join(dir, "runs.db"), program)
  fs.rmSync(dir, { recursive: true, force: true })
} else {
  await Effect.runPromise(Effect.flatMap(RunLogStore.makeMemory, program))
}
