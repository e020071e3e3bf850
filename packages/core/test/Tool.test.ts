import { assert, describe, it } from "@effect/vitest"
import * as Action from "@polyloop/core/Action"
import { ToolEnvironmentError } from "@polyloop/core/Errors"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

type Equals<X, Y> = (<T>() => T extends X ? 1 : 2) extends (<T>() => T extends Y ? 1 : 2) ? true : false

class Oops extends Schema.TaggedError<Oops>()("Oops", { message: Schema.String }) {}

class Files extends Context.Tag("test/Files")<Files, { readonly read: (path: string) => string }>() {}

const Params = Schema.Struct({
  path: Schema.String,
  lines: Schema.optional(Schema.Int),
  encoding: Schema.Literal("utf8", "latin1")
})

describe("Tool.make", () => {
  it("infers the handler's argument type from `parameters`", () => {
    const read = Tool.make({
      name: "read",
      description: "Reads a file",
      parameters: Params,
      // `args` is typed from `parameters`: these property accesses would not compile on `unknown`.
      handler: (args) => Effect.succeed(`${args.path.toUpperCase()}:${(args.lines ?? 0).toFixed(0)}:${args.encoding}`)
    })
    type Args = Parameters<NonNullable<typeof read.handler>>[0]
    const argsAreTheDecodedType: Equals<Args, Schema.Schema.Type<typeof Params>> = true
    const parametersKeepTheType: Equals<typeof read.parameters, Schema.Schema<Schema.Schema.Type<typeof Params>, unknown>> = true
    assert.isTrue(argsAreTheDecodedType && parametersKeepTheType)
    // The encoding literal is kept as a union, not widened to string.
    const encoding: Equals<Args["encoding"], "utf8" | "latin1"> = true
    assert.isTrue(encoding)
  })

  it("infers the handler's error and context types, and carries the context into the registry", () => {
    const read = Tool.make({
      name: "read",
      description: "",
      parameters: Schema.Struct({ path: Schema.String }),
      handler: (args) =>
        Effect.flatMap(Files, (files) =>
          args.path === "" ? Effect.fail(new Oops({ message: "empty path" })) : Effect.succeed(files.read(args.path))
        )
    })
    const errorType: Equals<typeof read, Tool.Handled<{ readonly path: string }, Oops, Files>> = true
    const contextType: Equals<Tool.Context<typeof read>, Files> = true
    const registry = ToolRegistry.make(read)
    // Every tool has its handler: deriving the executor cannot fail (no MissingToolHandler in the type).
    const registryNeeds: Equals<typeof registry, ToolRegistry.ToolRegistry<Files, never>> = true
    assert.isTrue(errorType && contextType && registryNeeds)
  })

  it.effect("lets a handler fail with ToolEnvironmentError alongside its own errors: the first is EnvError, the other Executed", () =>
    Effect.gen(function*() {
      const tool = Tool.make({
        name: "query",
        description: "",
        parameters: Schema.Struct({ sql: Schema.String }),
        handler: (args): Effect.Effect<string, ToolEnvironmentError | Oops> =>
          args.sql.length === 0
            ? Effect.fail(new Oops({ message: "empty query" }))
            : Effect.fail(new ToolEnvironmentError({ message: "connection refused" }))
      })
      // The tool's own error is `Oops`; its handler may fail with `ToolEnvironmentError` as well.
      const ownError: Equals<typeof tool, Tool.Handled<{ readonly sql: string }, Oops, never>> = true
      const handlerErrors: Equals<Effect.Effect.Error<ReturnType<typeof tool.handler>>, ToolEnvironmentError | Oops> = true
      assert.isTrue(ownError && handlerErrors)
      const executor = yield* ToolRegistry.make(tool).executor()
      const query = (sql: string) => Action.ToolCall.make({ id: "call_1", name: "query", arguments: { sql } })
      const down = yield* executor.executeReport(query("select 1"))
      assert.strictEqual(down.outcome.status, "EnvError")
      assert.include(down.outcome.observation, "connection refused")
      assert.isTrue(down.handlerFailed)
      const mistake = yield* executor.executeReport(query(""))
      assert.strictEqual(mistake.outcome.status, "Executed")
      assert.include(mistake.outcome.observation, "empty query")
      assert.isTrue(mistake.handlerFailed)
    }))

  it("defaults: replayPolicy Never, completesRun false, no timeout, no handler", () => {
    const tool = Tool.make({ name: "t", description: "d", parameters: Schema.Struct({}) })
    assert.strictEqual(tool.replayPolicy, "Never")
    assert.strictEqual(tool.completesRun, false)
    assert.isUndefined(tool.timeout)
    assert.isUndefined(tool.handler)
    assert.strictEqual(tool.name, "t")
    assert.strictEqual(tool.description, "d")
  })

  it("keeps the options given; the timeout is decoded to a Duration", () => {
    const tool = Tool.make({
      name: "submit",
      description: "",
      parameters: Schema.Struct({}),
      replayPolicy: "Always",
      completesRun: true,
      timeout: "1500 millis",
      handler: () => Effect.succeed("ok")
    })
    assert.strictEqual(tool.replayPolicy, "Always")
    assert.strictEqual(tool.completesRun, true)
    assert.isTrue(tool.timeout !== undefined && Duration.equals(tool.timeout, Duration.millis(1500)))
  })

  it("withHandler swaps the handler and keeps the rest of the spec", () => {
    const base = Tool.make({ name: "t", description: "d", parameters: Schema.Struct({ n: Schema.Number }), completesRun: true })
    const implemented = Tool.withHandler(base, (args) => Effect.succeed(String(args.n * 2)))
    assert.isDefined(implemented.handler)
    assert.strictEqual(implemented.parameters, base.parameters)
    assert.strictEqual(implemented.completesRun, true)
    assert.isUndefined(Tool.withHandler(implemented, undefined).handler)
  })
})
