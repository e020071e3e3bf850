/**
 * The run log's JSON encoder: `JSON.stringify` of a record, guarded so that nothing is written
 * that would read back as something else (SPEC §7: what the store wrote must resume the run).
 *
 * Records built by the loop are already typed, and every record schema's encoded form is its
 * type (no transformations), so Schema's encode pass only re-checks refinements and drops
 * excess properties. The fast path does that check directly, compiled once from the schema's
 * AST: the value has exactly the schema's properties in the schema's order (so the text is
 * byte for byte what `JSON.stringify(Schema.encodeSync(schema)(value))` writes), every
 * refinement holds, and every `unknown` field (tool-call arguments, the snapshot) is a plain
 * JSON value. Anything else takes the slow path: Schema's own encode, `JSON.stringify` with a
 * guard, and a Schema decode of the text, so that an odd but valid value (a class instance
 * where a struct is expected, extra properties, keys in another order) is encoded exactly as
 * before, and a value that would poison the log is refused.
 *
 * Refused, because the JSON would not read back as the value written: numbers that are not
 * finite (`JSON.stringify` writes `null`), `bigint` and cycles (it throws), `undefined`,
 * functions and symbols inside arrays (`null`) or as object properties of a JSON value
 * (dropped), and non-plain objects (`Date`, `Map`, class instances) where a JSON value is
 * expected (`toJSON` or nothing).
 *
 * @internal
 */
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as AST from "effect/SchemaAST"

/** A compiled exact check: true when the fast path may write `JSON.stringify(value)`. */
type Check = (value: unknown) => boolean

/** JSON values nested deeper than this take the slow path (the fast check recurses). */
const FAST_DEPTH = 64

const isPlainObject = (value: object): boolean => {
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

/** Is `value` a JSON value that `JSON.stringify` writes as itself (see the module header)? */
const isJsonValue = (value: unknown, depth: number): boolean => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return true
    case "number":
      return Number.isFinite(value)
    case "object": {
      if (value === null) return true
      if (depth >= FAST_DEPTH) return false
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          if (!isJsonValue(value[i], depth + 1)) return false
        }
        return true
      }
      if (!isPlainObject(value)) return false
      for (const key in value) {
        const v = (value as Record<string, unknown>)[key]
        // `{ a: undefined }` is written as `{}`: the same value as JSON, as Schema encodes it.
        if (v !== undefined && !isJsonValue(v, depth + 1)) return false
      }
      return true
    }
    default:
      return false
  }
}

const alwaysFalse: Check = () => false

interface Property {
  readonly name: string
  readonly optional: boolean
  readonly check: Check
}

const compileTypeLiteral = (ast: AST.TypeLiteral): Check => {
  if (ast.indexSignatures.length > 0) return alwaysFalse
  const properties: Array<Property> = []
  for (const ps of ast.propertySignatures) {
    if (typeof ps.name !== "string") return alwaysFalse
    properties.push({ name: ps.name, optional: ps.isOptional, check: compile(ps.type) })
  }
  const count = properties.length
  return (value) => {
    if (typeof value !== "object" || value === null || Array.isArray(value) || !isPlainObject(value)) return false
    const record = value as Record<string, unknown>
    // Own keys must be the schema's properties, in the schema's order (optional ones may be
    // missing): then `JSON.stringify(value)` is exactly what Schema's encode would write.
    let next = 0
    for (const key in record) {
      while (next < count && properties[next]!.name !== key) {
        if (!properties[next]!.optional) return false
        next++
      }
      if (next === count) return false
      if (!properties[next]!.check(record[key])) return false
      next++
    }
    for (; next < count; next++) if (!properties[next]!.optional) return false
    return true
  }
}

/** The literal `_tag` of a union member, if it is a tagged struct. */
const tagOf = (ast: AST.AST): string | undefined => {
  if (ast._tag !== "TypeLiteral") return undefined
  const tag = ast.propertySignatures.find((ps) => ps.name === "_tag")
  return tag !== undefined && tag.type._tag === "Literal" && typeof tag.type.literal === "string" ? tag.type.literal : undefined
}

const isScalar = (ast: AST.AST): boolean => {
  switch (ast._tag) {
    case "Literal":
    case "StringKeyword":
    case "NumberKeyword":
    case "BooleanKeyword":
    case "UndefinedKeyword":
      return true
    case "Refinement":
      return isScalar(ast.from)
    default:
      return false
  }
}

const compileUnion = (ast: AST.Union): Check => {
  const tags = ast.types.map(tagOf)
  if (tags.every((tag) => tag !== undefined) && new Set(tags).size === tags.length) {
    // A tagged union: Schema picks the member by its tag; so does the check.
    const byTag = new Map<unknown, Check>()
    ast.types.forEach((member, i) => byTag.set(tags[i], compile(member)))
    return (value) => {
      if (typeof value !== "object" || value === null) return false
      const check = byTag.get((value as { readonly _tag?: unknown })._tag)
      return check !== undefined && check(value)
    }
  }
  // Unions of scalars (literals, optional strings): any member that accepts the value.
  if (ast.types.every(isScalar)) {
    const members = ast.types.map(compile)
    return (value) => {
      for (const member of members) if (member(value)) return true
      return false
    }
  }
  return alwaysFalse
}

const compileRefinement = (ast: AST.Refinement): Check => {
  const from = compile(ast.from)
  const options: AST.ParseOptions = {}
  return (value) => from(value) && ast.filter(value, options, ast)._tag === "None"
}

const compileArray = (ast: AST.TupleType): Check => {
  const rest = ast.rest[0]
  if (ast.elements.length > 0 || ast.rest.length !== 1 || rest === undefined) return alwaysFalse
  const element = compile(rest.type)
  return (value) => {
    if (!Array.isArray(value)) return false
    for (let i = 0; i < value.length; i++) if (!element(value[i])) return false
    return true
  }
}

/** Compiles the exact check of a schema whose encoded form is its type; unknown shapes always take the slow path. */
const compile = (ast: AST.AST): Check => {
  switch (ast._tag) {
    case "StringKeyword":
      return (value) => typeof value === "string"
    case "NumberKeyword":
      return (value) => typeof value === "number" && Number.isFinite(value)
    case "BooleanKeyword":
      return (value) => typeof value === "boolean"
    case "UndefinedKeyword":
      return (value) => value === undefined
    case "Literal": {
      const literal = ast.literal
      return typeof literal === "number" && !Number.isFinite(literal) ? alwaysFalse : (value) => value === literal
    }
    case "UnknownKeyword":
      return (value) => isJsonValue(value, 0)
    case "TypeLiteral":
      return compileTypeLiteral(ast)
    case "Union":
      return compileUnion(ast)
    case "Refinement":
      return compileRefinement(ast)
    case "TupleType":
      return compileArray(ast)
    default:
      return alwaysFalse
  }
}

/** Thrown by the slow path's guard; caught by the encoder. */
class NotJson {
  constructor(readonly problem: string) {}
}

const describeKey = (holder: unknown, key: string): string => (Array.isArray(holder) ? `element ${key}` : key === "" ? "the record" : `property ${JSON.stringify(key)}`)

/** The slow path's `JSON.stringify` replacer: throws `NotJson` on what would not read back as written. */
function guard(this: unknown, key: string, value: unknown): unknown {
  const original = (this as Record<string, unknown>)[key]
  switch (typeof original) {
    case "number":
      if (!Number.isFinite(original)) throw new NotJson(`${describeKey(this, key)} is ${original}, which JSON writes as null`)
      return value
    case "bigint":
      throw new NotJson(`${describeKey(this, key)} is a bigint, which JSON cannot write`)
    case "undefined":
    case "function":
    case "symbol":
      if (Array.isArray(this) || typeof original !== "undefined") {
        throw new NotJson(`${describeKey(this, key)} is ${typeof original === "undefined" ? "undefined" : `a ${typeof original}`}, which JSON cannot write`)
      }
      return value
    case "object":
      if (original !== null && !Array.isArray(original) && !isPlainObject(original)) {
        throw new NotJson(`${describeKey(this, key)} is a ${original.constructor?.name ?? "non-plain object"}, not a plain JSON object`)
      }
      return value
    default:
      return value
  }
}

/**
 * Makes the JSON encoder of a schema whose encoded form is its type (brands aside; a schema with
 * transformations always takes the slow path): `Right(text)`, the text
 * `JSON.stringify(Schema.encodeSync(schema)(value))` would write, or `Left(problem)` for a value
 * Schema refuses or that would not read back as written.
 *
 * @internal
 */
export const makeEncoder = <A, I>(schema: Schema.Schema<A, I>): (value: A) => Either.Either<string, string> => {
  const fast = compile(schema.ast)
  const encode = Schema.encodeEither(schema)
  const decode = Schema.decodeUnknownEither(Schema.parseJson(schema))
  const slow = (value: A): Either.Either<string, string> => {
    const encoded = encode(value)
    if (Either.isLeft(encoded)) return Either.left(ParseResult.TreeFormatter.formatErrorSync(encoded.left))
    let text: string
    try {
      text = JSON.stringify(encoded.right, guard)
    } catch (error) {
      return Either.left(error instanceof NotJson ? error.problem : `JSON cannot write it: ${String(error)}`)
    }
    const back = decode(text)
    return Either.isLeft(back)
      ? Either.left(`its JSON does not read back: ${ParseResult.TreeFormatter.formatErrorSync(back.left)}`)
      : Either.right(text)
  }
  return (value) => (fast(value) ? Either.right(JSON.stringify(value)) : slow(value))
}

/** The fast path's check alone (for tests: which values skip Schema's encode). @internal */
export const makeExactCheck = <A, I>(schema: Schema.Schema<A, I>): (value: unknown) => boolean => compile(schema.ast)
