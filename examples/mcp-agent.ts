/**
 * A tool-calling agent whose tools come from a Model Context Protocol server: the reference
 * filesystem server (`@modelcontextprotocol/server-filesystem`, installed with the repository and
 * started here as a child process over stdio) on a temporary folder, merged with one tool written
 * in code (`submit`, which completes the run). The model is scripted, so no API key is needed.
 *
 *   npx tsx examples/mcp-agent.ts
 *
 * It prints the tools with the replay policies taken from their MCP annotations, then each step
 * as it happens: a call refused by the server's own JSON Schema before it reaches the server
 * (`NotExecuted`, the model told which argument was wrong), a call the server answers with
 * `isError` (`Executed`: the model sees the server's text), real reads and writes, and the
 * submission. The run log is a SQLite file; the server ends when the program does.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { createRequire } from "node:module"
import * as path from "node:path"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as StopReason from "@polyloop/core/StopReason"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as McpClient from "@polyloop/mcp/McpClient"
import * as McpToolkit from "@polyloop/mcp/McpToolkit"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import { print } from "./steps.js"

/** The filesystem server's entry point, from node_modules (nothing is downloaded). */
const filesystemServer = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-filesystem/dist/index.js")

/** A tool written in code, next to the server's: the run completes when it returns. */
const submit = Tool.make({
  name: "submit",
  description: "Submits the summary; ends the task.",
  parameters: Schema.Struct({ summary: Schema.String }),
  handler: ({ summary }) => Effect.succeed(`submitted: ${summary}`),
  completesRun: true
})

const agent = AgentDefinition.make({
  name: "mcp-agent",
  systemPrompt: "You keep the team's notes folder tidy. Use the filesystem tools; submit a summary when done.",
  budget: { maxSteps: 10 },
  modelSettings: { model: "scripted" }
})

const task = "Read todo.md, write the open items to open.md, and submit a summary."

/** What the scripted model does, in a folder `dir`. */
const script = (dir: string): ReadonlyArray<ScriptedModel.Scripted> => [
  ScriptedModel.toolCall("list_directory", { path: dir }),
  ScriptedModel.toolCall("read_text_file", { path: path.join(dir, "todo.md") }),
  // `content` is missing: the server's schema refuses it before the server sees it.
  ScriptedModel.toolCall("write_file", { path: path.join(dir, "open.md"), text: "- fix the login page\n" }),
  ScriptedModel.toolCall("write_file", { path: path.join(dir, "open.md"), content: "- fix the login page\n- renew the certificate\n" }),
  // Outside the allowed folder: the server answers with isError, an ordinary failure.
  ScriptedModel.toolCall("read_text_file", { path: "/etc/hostname" }),
  ScriptedModel.toolCall("submit", { summary: "2 open items written to open.md" })
]

const main = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped({ prefix: "polyloop-mcp-agent-" })
  const notes = path.join(dir, "notes")
  yield* fs.makeDirectory(notes)
  yield* fs.writeFileString(path.join(notes, "todo.md"), "# To do\n- [x] ship 1.2\n- [ ] fix the login page\n- [ ] renew the certificate\n")

  // The server runs as long as this scope: it ends when the program does.
  const client = yield* McpClient.connect({ transport: McpClient.stdio({ command: process.execPath, args: [filesystemServer, notes] }) })
  const server = yield* McpToolkit.fromClient(client)
  // Merged with the code tool, narrowed to what this agent needs, like any registry.
  const tools = Either.getOrThrow(
    ToolRegistry.make(...server.tools, submit).restrictTo(["list_directory", "read_text_file", "write_file", "submit"])
  )
  yield* Console.log(`MCP server: ${client.serverInfo?.name ?? client.server} (${server.names.length} tools), folder ${notes}`)
  for (const tool of tools.tools) yield* Console.log(`  ${tool.name}: replay ${tool.replayPolicy}${tool.completesRun ? ", completes the run" : ""}`)
  yield* Console.log("")

  const services = Agent.layer({
    store: SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") }),
    model: ScriptedModel.layer(script(notes)),
    parser: NativeToolCallParser.layer(),
    tools,
    events: EventSink.layer(print)
  }).pipe(Layer.provide(NodeContext.layer))
  const result = yield* Agent.run({ runId: runId("mcp-agent-1"), agent, task, tools }).pipe(Effect.provide(services))

  yield* Console.log(`\nsteps: ${result.steps} (${result.effectiveSteps} effective)`)
  yield* Console.log(`--- open.md\n${yield* fs.readFileString(path.join(notes, "open.md"))}`)
  if (result.stopReason._tag !== "Completed") {
    return yield* Effect.fail(`the run did not complete: ${StopReason.format(result.stopReason)}`)
  }
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

NodeRuntime.runMain(main)
