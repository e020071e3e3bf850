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
 * JSON value; the writer compiled from the AST checks this and writes the text in the same
 * pass (property names pre-quoted, `JSON.stringify` only for strings that need escaping and
 * for the `unknown` fields). A transformation takes the fast path only when its schema carries
 * the `encodesAsItself` annotation (its encode is the identity and what it writes reads back as
 * itself, e.g. `ModelReply`): the value must then be written by both its sides' writers (the
 * type side's check, the encoded side's text), as Schema's encode checks both. Anything else
 * takes the slow path: Schema's own encode,
 * `JSON.stringify` with a guard, and a Schema decode of the text, so that an odd but valid
 * value (a class instance where a struct is expected, extra properties, keys in another order)
 * is encoded exactly as before, and a value that would poison the log is refused.
 *
 * Refused, because the JSON would not read back as the value written: numbers that are not
 * finite (`JSON.stringify` writes `null`), `bigint` and cycles (it throws), `undefined`,
 * functions and symbols inside arrays (`null`) or as object properties of a JSON value
 * (dropped), and non-plain objects (`Date`, `Map`, class instances) where a JSON value is
 * expected (`toJSON` or nothing).
 *
 * Why one file: the writer is one compiler over the Schema AST whose parts call each other
 * recursively (`compile` dispatches to the struct, union, refinement, array and transformation
 * compilers, each of which compiles its members with `compile`); split, they would import each
 * other in a circle (design 0390).
 *
 * @internal
 */
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import * as AST from "effect/SchemaAST"
import { formatIssues } from "./issues.js"

/**
 * A compiled writer: the JSON text of `value` when the fast path may write it (exactly as
 * `JSON.stringify(Schema.encodeSync(schema)(value))` would), else `null` (take the slow path).
 */
type Writer = (value: unknown) => string | null

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

/** Characters `JSON.stringify` escapes in a string (lone surrogates included; pairs are checked by it too). */
const NEEDS_ESCAPE = /[\u0000-\u001f"\\\ud800-\udfff]/

/** A string as JSON: `JSON.stringify(text)`, without calling it for the common plain text. */
const quote = (text: string): string => (NEEDS_ESCAPE.test(text) ? JSON.stringify(text) : `"${text}"`)

const never: Writer = () => null

interface Property {
  /** `"name":` */
  readonly key: string
  readonly name: string
  readonly optional: boolean
  /** The property may hold `undefined`, which JSON writes as an absent property (as Schema's encode + JSON did). */
  readonly acceptsUndefined: boolean
  readonly write: Writer
}

const acceptsUndefined = (ast: AST.AST): boolean =>
  ast._tag === "UndefinedKeyword" || ast._tag === "UnknownKeyword" ||
  (ast._tag === "Union" && ast.types.some((member) => member._tag === "UndefinedKeyword"))

/** The writer of one property signature: its value's writer is `write` (by default, its type's). */
const propertyOf = (ps: AST.PropertySignature, write: Writer = compile(ps.type)): Property | undefined =>
  typeof ps.name !== "string" ? undefined : {
    key: `${JSON.stringify(ps.name)}:`,
    name: ps.name,
    optional: ps.isOptional,
    // An unknown field holding `undefined` is left to the slow path (Schema and the decode check decide).
    acceptsUndefined: ps.type._tag !== "UnknownKeyword" && acceptsUndefined(ps.type),
    write
  }

const compileTypeLiteral = (ast: AST.TypeLiteral): Writer => {
  if (ast.indexSignatures.length > 0) return never
  const properties: Array<Property> = []
  for (const ps of ast.propertySignatures) {
    const property = propertyOf(ps)
    if (property === undefined) return never
    properties.push(property)
  }
  return writeProperties(properties)
}

/** The writer of a struct whose properties are written by `properties`, in their order. */
const writeProperties = (properties: ReadonlyArray<Property>): Writer => {
  const count = properties.length
  return (value) => {
    if (typeof value !== "object" || value === null || Array.isArray(value) || !isPlainObject(value)) return null
    const record = value as Record<string, unknown>
    // Own keys must be the schema's properties, in the schema's order (optional ones may be
    // missing): then the text is exactly what Schema's encode + `JSON.stringify` write.
    let text = "{"
    let written = 0
    let next = 0
    for (const key in record) {
      while (next < count && properties[next]!.name !== key) {
        if (!properties[next]!.optional) return null
        next++
      }
      if (next === count) return null
      const property = properties[next]!
      next++
      const v = record[key]
      if (v === undefined) {
        if (property.acceptsUndefined) continue
        return null
      }
      const part = property.write(v)
      if (part === null) return null
      text += written === 0 ? property.key + part : "," + property.key + part
      written++
    }
    for (; next < count; next++) if (!properties[next]!.optional) return null
    return text + "}"
  }
}

/**
 * The annotation of a `Schema.transform` whose `encode` is the identity and whose `decode` gives
 * back every value of its type side unchanged: its records are written by the fast path (see the
 * module header). A promise by the schema's author, kept by a test of that schema.
 * @internal
 */
export const encodesAsItself: unique symbol = Symbol.for("@polyloop/core/internal/recordJson/encodesAsItself")

/**
 * A transformation annotated `encodesAsItself`: Schema's encode checks the value against the
 * type side, encodes it as itself, then checks and writes it as the encoded side; the writer
 * does the same (the type side's writer as the check, the encoded side's text).
 */
const compileTransformation = (ast: AST.Transformation): Writer => {
  if (ast.annotations[encodesAsItself] !== true) return never
  const merged = mergedStructs(ast.from, ast.to)
  if (merged !== undefined) return merged
  const to = compile(ast.to)
  const from = compile(ast.from)
  return (value) => (to(value) === null ? null : from(value))
}

/**
 * Both sides of a transformation that are structs of the same properties, in the same order and
 * optionality (`ModelReply`: its two sides share every field's schema but one): one pass, each
 * property written once when both sides give it the same schema, else checked by the type side
 * and written by the encoded side — what writing the whole value by both sides does, without
 * walking the shared fields twice (issue 35).
 */
const mergedStructs = (from: AST.AST, to: AST.AST): Writer | undefined => {
  if (from._tag !== "TypeLiteral" || to._tag !== "TypeLiteral") return undefined
  if (from.indexSignatures.length > 0 || to.indexSignatures.length > 0) return undefined
  const fromProps = from.propertySignatures
  const toProps = to.propertySignatures
  if (fromProps.length !== toProps.length) return undefined
  const properties: Array<Property> = []
  for (let i = 0; i < fromProps.length; i++) {
    const f = fromProps[i]!
    const t = toProps[i]!
    if (f.name !== t.name || f.isOptional !== t.isOptional) return undefined
    let write: Writer
    if (f.type === t.type) write = compile(f.type)
    else {
      const check = compile(t.type)
      const text = compile(f.type)
      write = (value) => (check(value) === null ? null : text(value))
    }
    // `undefined` is accepted only where both sides accept it.
    const property = propertyOf(f, write)
    if (property === undefined) return undefined
    properties.push(acceptsUndefined(t.type) ? property : { ...property, acceptsUndefined: false })
  }
  return writeProperties(properties)
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
    case "Union":
      // `optional(Literal("a", "b"))`: a union of literals inside the optional's union.
      return ast.types.every(isScalar)
    default:
      return false
  }
}

const compileUnion = (ast: AST.Union): Writer => {
  const tags = ast.types.map(tagOf)
  if (tags.every((tag) => tag !== undefined) && new Set(tags).size === tags.length) {
    // A tagged union: Schema picks the member by its tag; so does the writer.
    const byTag = new Map<unknown, Writer>()
    ast.types.forEach((member, i) => byTag.set(tags[i], compile(member)))
    return (value) => {
      if (typeof value !== "object" || value === null) return null
      const write = byTag.get((value as { readonly _tag?: unknown })._tag)
      return write === undefined ? null : write(value)
    }
  }
  // Unions of scalars (literals, optional strings): the first member that writes the value.
  if (ast.types.every(isScalar)) {
    const members = ast.types.map(compile)
    return (value) => {
      for (const member of members) {
        const text = member(value)
        if (text !== null) return text
      }
      return null
    }
  }
  return never
}

const compileRefinement = (ast: AST.Refinement): Writer => {
  const from = compile(ast.from)
  const options: AST.ParseOptions = {}
  return (value) => {
    const text = from(value)
    return text !== null && ast.filter(value, options, ast)._tag === "None" ? text : null
  }
}

/**
 * Arrays: `Schema.Array(x)` (a rest element only) and `Schema.NonEmptyArray(x)` (required
 * leading elements, then a rest element). Optional elements and tuples without a rest element
 * take the slow path.
 */
const compileArray = (ast: AST.TupleType): Writer => {
  const rest = ast.rest[0]
  if (ast.rest.length !== 1 || rest === undefined || ast.elements.some((e) => e.isOptional)) return never
  const leading = ast.elements.map((e) => compile(e.type))
  const element = compile(rest.type)
  const required = leading.length
  return (value) => {
    if (!Array.isArray(value) || value.length < required) return null
    let text = "["
    for (let i = 0; i < value.length; i++) {
      // `undefined` (or a hole) would be written as null: no element writer accepts it.
      const part = (i < required ? leading[i]! : element)(value[i])
      if (part === null) return null
      text += i === 0 ? part : "," + part
    }
    return text + "]"
  }
}

/**
 * Compiles the writer of a schema whose encoded form is its type; shapes it does not know
 * (transformations, declarations, index signatures, untagged unions of structs) always take
 * the slow path.
 */
const compile = (ast: AST.AST): Writer => {
  switch (ast._tag) {
    case "StringKeyword":
      return (value) => (typeof value === "string" ? quote(value) : null)
    case "NumberKeyword":
      // A finite number's JSON text is its `String` (`-0` included: both write `0`).
      return (value) => (typeof value === "number" && Number.isFinite(value) ? `${value}` : null)
    case "BooleanKeyword":
      return (value) => (value === true ? "true" : value === false ? "false" : null)
    case "Literal": {
      const literal = ast.literal
      if (typeof literal === "bigint" || (typeof literal === "number" && !Number.isFinite(literal))) return never
      const text = JSON.stringify(literal)
      return (value) => (value === literal ? text : null)
    }
    case "UnknownKeyword":
      return (value) => (isJsonValue(value, 0) ? JSON.stringify(value) : null)
    case "TypeLiteral":
      return compileTypeLiteral(ast)
    case "Union":
      return compileUnion(ast)
    case "Refinement":
      return compileRefinement(ast)
    case "TupleType":
      return compileArray(ast)
    case "Transformation":
      return compileTransformation(ast)
    default:
      // `undefined` (only ever skipped as a property), transformations, declarations, …
      return never
  }
}

/**
 * Whether the fast path writes `value` for `schema` (tests: a record kind the loop writes at every
 * step must not fall to the slow path unnoticed).
 * @internal
 */
export const writesFast = <A, I>(schema: Schema.Schema<A, I>, value: A): boolean => compile(schema.ast)(value) !== null

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
 * Makes the JSON encoder of a record schema (a struct, or a union of structs) whose encoded
 * form is its type (brands aside; a schema with transformations always takes the slow path):
 * `Right(text)`, the text `JSON.stringify(Schema.encodeSync(schema)(value))` would write, or
 * `Left(problem)` for a value Schema refuses or that would not read back as written.
 *
 * @internal
 */
export const makeEncoder = <A, I>(schema: Schema.Schema<A, I>): (value: A) => Either.Either<string, string> => {
  const fast = compile(schema.ast)
  const encode = Schema.encodeEither(schema)
  const decode = Schema.decodeUnknownEither(Schema.parseJson(schema))
  const slow = (value: A): Either.Either<string, string> => {
    const encoded = encode(value)
    if (Either.isLeft(encoded)) return Either.left(formatIssues(encoded.left))
    let text: string
    try {
      text = JSON.stringify(encoded.right, guard)
    } catch (error) {
      return Either.left(error instanceof NotJson ? error.problem : `JSON cannot write it: ${String(error)}`)
    }
    const back = decode(text)
    return Either.isLeft(back)
      ? Either.left(`its JSON does not read back: ${formatIssues(back.left)}`)
      : Either.right(text)
  }
  return (value) => {
    const text = fast(value)
    // Reading a character also makes V8 store the concatenated text as one flat string (the
    // trick of the `flatstr` package): unflattened, each text is a tree of dozens of small
    // pieces, which a store that keeps its texts (the memory store) leaves to the garbage
    // collector — that doubled the in-memory step's GC time. (Records are JSON objects: the
    // check holds for every text the writer makes, and keeps the read from being optimized away.)
    return text !== null && text.charCodeAt(0) === OPEN_BRACE ? Either.right(text) : slow(value)
  }
}

const OPEN_BRACE = 0x7b
