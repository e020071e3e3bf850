/**
 * Child process of the experiment kill test (`Kill.test.ts`): runs (or resumes) the arithmetic
 * experiment of `fixture.ts` on a SQLite file until it is done, then prints its results.
 *
 *   node --import tsx kill-child.ts <db> <samples> <epochs>
 *
 * Prints `ready` once the store is open, `progress <done>` as runs finish, and at the end
 * `results <the results JSON on one line>`.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import * as Experiment from "@polyloop/eval/Experiment"
import * as Results from "@polyloop/eval/Results"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Fixture from "../fixture.js"

const [db, samplesText, epochsText] = process.argv.slice(2)
if (db === undefined || samplesText === undefined || epochsText === undefined) {
  process.stderr.write("usage: kill-child.ts <db> <samples> <epochs>\n")
  process.exit(2)
}

const write = (line: string) => Effect.sync(() => process.stdout.write(`${line}\n`))

const store = SqlRunLogStore.layerSqlite({ filename: db, synchronous: "NORMAL" })
const services = Layer.merge(store, ExperimentStore.layer.pipe(Layer.provide(store)))

const program = Effect.gen(function*() {
  yield* write("ready")
  const careful = yield* ScriptedModel.make(Fixture.script(0))
  const sloppy = yield* ScriptedModel.make(Fixture.script(0.25))
  const experiment = Fixture.experiment({ name: "killed", n: Number(samplesText), epochs: Number(epochsText), careful: careful.layer, sloppy: sloppy.layer, concurrency: 8 })
  let last = -1
  yield* Experiment.run(experiment, {
    onProgress: (p) => p.done === last ? Effect.void : Effect.zipRight(Effect.sync(() => (last = p.done)), write(`progress ${p.done}`))
  })
  const results = yield* Results.compute("killed")
  yield* write(`results ${JSON.stringify(JSON.parse(Results.toJson(results)))}`)
}).pipe(Effect.provide(Layer.merge(services, NodeContext.layer)))

Effect.runPromise(program).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`error ${String(error)}\n`)
    process.exit(1)
  }
)
