/**
 * The header of `polyloop eval`'s results (issue 44): "1 sample × 1 epoch", never "1 epochs".
 */
import { assert, describe, it } from "@effect/vitest"
import * as Eval from "@polyloop/cli/Eval"
import * as Style from "@polyloop/cli/Style"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Dataset from "@polyloop/eval/Dataset"
import * as Experiment from "@polyloop/eval/Experiment"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import * as Results from "@polyloop/eval/Results"
import * as Scorer from "@polyloop/eval/Scorer"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

const tools = ToolRegistry.make()
const agent = AgentDefinition.make({ name: "echo", systemPrompt: "Answer.", budget: { maxSteps: 2 } })

describe("eval results header", () => {
  it.effect("counts in the singular when there is one", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(() => "4")
      const experiment = Experiment.make({
        name: "single",
        dataset: Dataset.fromIterable([{ id: "q1", input: "2 + 2?", target: "4" }]),
        configurations: [{ name: "only", agent, tools, services: Layer.mergeAll(model.layer, NativeToolCallParser.layer(), ToolRegistry.layerExecutor(tools)) }],
        epochs: 1,
        scorers: [Scorer.exactMatch()]
      })
      yield* Experiment.run(experiment)
      const header = Eval.render(Style.plain, yield* Results.compute("single")).split("\n")[0]!
      assert.include(header, "· 1 sample × 1 epoch ·")
    }).pipe(Effect.provide((() => {
      const store = RunLogStore.inMemory()
      return Layer.merge(store, ExperimentStore.layer.pipe(Layer.provide(store)))
    })())))
})
