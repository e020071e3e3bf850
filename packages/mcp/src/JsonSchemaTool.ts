/**
 * A tool whose parameters are a JSON Schema given from outside (an MCP server's `inputSchema`,
 * or any JSON Schema), validated with ajv (design 0230). The model sees the schema verbatim
 * (`Tool.jsonSchema`); `parameters` is an Effect `Schema` whose decoding runs the compiled ajv
 * validator, so the registry's `validate` reports its issues (`path: must be string`, `path: is
 * missing`) exactly as for a code tool, and an invalid call is `NotExecuted` with them.
 *
 * @since 0.1.0
 */
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv"
import { Ajv2019 } from "ajv/dist/2019.js"
import { Ajv2020 } from "ajv/dist/2020.js"
import * as ajvFormats from "ajv-formats"
import type { Duration } from "effect/Duration"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type { ReplayPolicy } from "@polyloop/core/ActionExecutor"
import * as Tool from "@polyloop/core/Tool"

/** A JSON Schema that ajv cannot compile. */
export class InvalidJsonSchema extends Schema.TaggedError<InvalidJsonSchema>()("InvalidJsonSchema", {
  tool: Schema.String,
  message: Schema.String
}) {}

type AnyAjv = Ajv | Ajv2019 | Ajv2020

// `ajv-formats` is CommonJS with a default export: under NodeNext its namespace's `default` is the plugin.
const addFormats: (ajv: AnyAjv) => unknown = ajvFormats.default as unknown as (ajv: AnyAjv) => unknown

// `addUsedSchema: false`: two tools (or two servers) may use one `$id`; each schema stands alone.
const options = { strict: false, allErrors: true, validateSchema: true, addUsedSchema: false } as const

type Dialect = "draft-07" | "2019-09" | "2020-12"

/**
 * Compiles JSON Schemas with one ajv instance per dialect, made on first use. ajv keeps what it
 * compiled for as long as its instance lives, so a compiler belongs to one registry (one server
 * connection) and goes away with it, rather than living in the module for the process's life.
 */
export interface Compiler {
  readonly compile: (tool: string, jsonSchema: unknown) => Either.Either<Validator, InvalidJsonSchema>
}

/** A fresh compiler. */
export const makeCompiler = (): Compiler => {
  const instances = new Map<Dialect, AnyAjv>()
  const ajvFor = (dialect: Dialect): AnyAjv => {
    let ajv = instances.get(dialect)
    if (ajv === undefined) {
      ajv = dialect === "draft-07" ? new Ajv(options) : dialect === "2019-09" ? new Ajv2019(options) : new Ajv2020(options)
      addFormats(ajv)
      instances.set(dialect, ajv)
    }
    return ajv
  }
  return {
    compile: (tool, jsonSchema) => {
      if (typeof jsonSchema !== "object" || jsonSchema === null || Array.isArray(jsonSchema)) {
        return Either.left(new InvalidJsonSchema({ tool, message: `the schema of "${tool}" is not a JSON object` }))
      }
      let validate: ValidateFunction
      try {
        validate = ajvFor(dialectOf(jsonSchema)).compile(jsonSchema)
      } catch (error) {
        return Either.left(
          new InvalidJsonSchema({ tool, message: `the schema of "${tool}" cannot be compiled: ${error instanceof Error ? error.message : String(error)}` })
        )
      }
      return Either.right((value) => (validate(value) ? undefined : (validate.errors ?? []).map(issueOf)))
    }
  }
}

/**
 * The dialect a schema declares with `$schema`: draft-04/06/07 → draft-07 (ajv's default class
 * also reads draft-06 schemas), 2019-09, and 2020-12 — also when `$schema` is absent, the MCP
 * specification's default dialect.
 */
export const dialectOf = (schema: unknown): Dialect => {
  const declared = typeof schema === "object" && schema !== null && "$schema" in schema ? schema.$schema : undefined
  if (typeof declared !== "string") return "2020-12"
  if (declared.includes("2019-09")) return "2019-09"
  if (declared.includes("2020-12")) return "2020-12"
  return "draft-07"
}

/** A compiled validator: `undefined` when the value is valid, else its issues. */
export type Validator = (value: unknown) => ReadonlyArray<Issue> | undefined

/** One validation issue: where (path segments into the value) and what is wrong. */
export interface Issue {
  readonly path: ReadonlyArray<string>
  readonly message: string
}

const pointerSegments = (pointer: string): Array<string> =>
  pointer === "" ? [] : pointer.slice(1).split("/").map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"))

/** An ajv error as an issue, worded like Effect Schema's (`x: is missing`, `x: is unexpected`). */
const issueOf = (error: ErrorObject): Issue => {
  const path = pointerSegments(error.instancePath)
  const params = error.params as Readonly<Record<string, unknown>>
  if (error.keyword === "required" && typeof params["missingProperty"] === "string") {
    return { path: [...path, params["missingProperty"]], message: "is missing" }
  }
  if (error.keyword === "additionalProperties" && typeof params["additionalProperty"] === "string") {
    return { path: [...path, params["additionalProperty"]], message: "is unexpected" }
  }
  if (error.keyword === "unevaluatedProperties" && typeof params["unevaluatedProperty"] === "string") {
    return { path: [...path, params["unevaluatedProperty"]], message: "is unexpected" }
  }
  return { path, message: error.message ?? `fails "${error.keyword}"` }
}

/** Compiles one JSON Schema with a fresh compiler; a schema ajv refuses is `InvalidJsonSchema`. */
export const compile = (tool: string, jsonSchema: unknown): Either.Either<Validator, InvalidJsonSchema> =>
  makeCompiler().compile(tool, jsonSchema)

/**
 * An Effect `Schema` that accepts exactly the values the validator accepts (decoded as they are)
 * and reports each issue at its path. Its encoding checks the same.
 */
export const toSchema = (tool: string, validator: Validator): Schema.Schema<unknown> => {
  const check = (input: unknown, ast: Schema.Schema.Any["ast"]): Either.Either<unknown, ParseResult.ParseIssue> => {
    const issues = validator(input)
    if (issues === undefined) return Either.right(input)
    const located = issues.map((issue): ParseResult.ParseIssue => {
      const type = new ParseResult.Type(ast, input, issue.message)
      const [head, ...tail] = issue.path
      return head === undefined ? type : new ParseResult.Pointer([head, ...tail], input, type)
    })
    const [first, ...rest] = located
    return Either.left(
      first === undefined
        ? new ParseResult.Type(ast, input, "does not match the tool's JSON Schema")
        : new ParseResult.Composite(ast, input, [first, ...rest])
    )
  }
  return Schema.declare([], {
    decode: () => (input, _options, ast) => check(input, ast),
    encode: () => (input, _options, ast) => check(input, ast)
  }, { identifier: `JsonSchema(${tool})`, description: `the JSON Schema of ${tool}` })
}

/** Options of `make`. */
export interface Options<E, R> {
  readonly name: string
  readonly description: string
  /** The JSON Schema of the arguments: shown to the model verbatim, enforced with ajv. */
  readonly jsonSchema: Tool.JsonSchema
  readonly handler?: Tool.Handler<unknown, E, R>
  readonly replayPolicy?: ReplayPolicy
  readonly completesRun?: boolean
  readonly timeout?: Duration
  /** The compiler to use (one per registry); a fresh one by default. */
  readonly compiler?: Compiler
}

/** A tool from a JSON Schema; a schema ajv cannot compile is `InvalidJsonSchema` naming the tool. */
export const make = <E = never, R = never>(options: Options<E, R>): Either.Either<Tool.Tool<unknown, E, R>, InvalidJsonSchema> =>
  Either.map((options.compiler ?? makeCompiler()).compile(options.name, options.jsonSchema), (validator) =>
    Tool.make<unknown, unknown, E, R>({
      name: options.name,
      description: options.description,
      parameters: toSchema(options.name, validator),
      jsonSchema: options.jsonSchema,
      ...(options.handler === undefined ? {} : { handler: options.handler }),
      ...(options.replayPolicy === undefined ? {} : { replayPolicy: options.replayPolicy }),
      ...(options.completesRun === undefined ? {} : { completesRun: options.completesRun }),
      ...(options.timeout === undefined ? {} : { timeout: options.timeout })
    }))
