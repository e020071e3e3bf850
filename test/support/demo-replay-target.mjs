// A user's `replayTarget` module for `polyloop replay <run> --agent <module>`, written in plain
// JavaScript (it is loaded by plain `node`, outside the source condition): the demo's agent and
// tools (`@polyloop/cli/GovDoc`) on a fresh workspace, its JSON-action parser. It imports
// `effect` as a user's module does — the copy of the project it is installed in
// (test/bundle.test.ts in the monorepo, test/pack.test.ts in an installed project).
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as GovDoc from "@polyloop/cli/GovDoc"
import * as EventSink from "@polyloop/core/EventSink"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const root = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-replay-target-"))
await Effect.runPromise(GovDoc.seed(root).pipe(Effect.provide(NodeContext.layer)))
const tools = GovDoc.makeTools(root)

export const replayTarget = {
  request: (recorded) => ({ agent: GovDoc.agent, task: recorded.task, tools }),
  layer: Layer.mergeAll(JsonActionParser.layer(), ToolRegistry.layerExecutor(tools), EventSink.layerNoop).pipe(Layer.provide(NodeContext.layer))
}
