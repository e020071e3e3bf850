/**
 * A deterministic check that a function's work grows linearly with its input: no clock, a
 * count. The work of one synchronous call is the number of characters (and array elements) it
 * reads, counted by replacing, for the duration of the call only, every way a parser can read
 * text that JavaScript lets a test intercept:
 *
 * - every method of `String.prototype`, string iteration (`for … of`, spread) included:
 *   `charCodeAt`, `codePointAt`, `charAt` and `at` read 1; `startsWith`/`endsWith` 1 and the
 *   characters they compare; `indexOf`/`includes` the characters from the start position to the
 *   match (or to the end); `slice`/`substring`/`substr` the characters they copy; anything else
 *   (`trim*`, `toLowerCase`, `split`, iteration…) the whole string plus what it returns, an upper
 *   bound of what it visits;
 * - `JSON.parse` (its input) and `JSON.stringify` (its output);
 * - `RegExp.prototype.exec`, which every regular-expression method calls once it is replaced
 *   (its input; a backtracking expression's real work is not seen: the parsers use none);
 * - every method of `Array.prototype` (the array plus what it returns; `push`, `pop`, `at` only
 *   what they touch) and `Object.keys`/`values`/`entries`/`fromEntries`, so that a loop over
 *   the candidates or keys found in the text is counted too.
 *
 * What cannot be intercepted is not counted: `text[i]` on a primitive string, a `for` loop over
 * an array by index, `+` on strings. The parsers read text only through the methods above
 * (`ParserLinearity.test.ts` checks their source for `text[i]`), and every element of the
 * arrays they index was pushed (counted) from characters that were read (counted).
 *
 * The originals are put back after each call, also when it throws. The count depends only on
 * the code path, so two runs give the same numbers; a first call may initialise something
 * lazily (a schema's parser), so `superlinearWork` runs the function once, uncounted, first.
 *
 * Not collected by vitest on its own.
 */

/** What an intercepted call costs: its receiver, its arguments and what it returned. */
type Cost = (self: unknown, args: ReadonlyArray<unknown>, result: unknown) => number

type Method = (this: unknown, ...args: Array<unknown>) => unknown

/** A counted method: a replacement for `original` that adds its cost to `work`. */
type Wrap = (original: Method) => Method

interface Site {
  readonly owner: object
  readonly key: PropertyKey
  readonly wrap: Wrap
}

/** The work counted so far by the current measurement. */
let work = 0

/** The length of a string or array (0 for anything else). */
const sizeOf = (value: unknown): number =>
  typeof value === "string" ? value.length : Array.isArray(value) ? value.length : 0

/** A replacement that costs `cost(receiver, arguments, result)`. One function for every such site. */
const generic = (cost: Cost): Wrap => (original) =>
  function(this: unknown, ...args: Array<unknown>): unknown {
    // No spread and no array method in here: those are counted sites themselves.
    const result: unknown = Reflect.apply(original, this, args)
    work += cost(this, args, result)
    return result
  }

/** The receiver, and what is returned (a copy, a list of pieces). */
const whole = generic((self, _, result) => sizeOf(self) + sizeOf(result))

const proto = String.prototype
const originalIndexOf = proto.indexOf

/** The characters `indexOf(search, position)` on `self` compares: to the end of the match, or to the end. */
const searched = (self: string, search: unknown, position: unknown, found: number): number => {
  const text = String(search)
  const integer = Math.trunc(Number(position ?? 0))
  const from = Number.isNaN(integer) ? 0 : Math.min(Math.max(integer, 0), self.length)
  return (found === -1 ? self.length - from : found - from) + text.length
}

/**
 * The methods parsers call once per character or line have a replacement each (a function of
 * their own keeps the engine's call sites monomorphic: a shared replacement for all of them made
 * a 1 MiB parse take seconds). Each takes the arguments the method uses, so that `undefined`
 * for a missing one means what it means to the method.
 */
const stringSites: Readonly<Record<string, Wrap>> = {
  charCodeAt: (original) =>
    function(this: unknown, index: unknown): unknown {
      work += 1
      return original.call(this, index)
    },
  codePointAt: (original) =>
    function(this: unknown, index: unknown): unknown {
      work += 1
      return original.call(this, index)
    },
  charAt: (original) =>
    function(this: unknown, index: unknown): unknown {
      work += 1
      return original.call(this, index)
    },
  at: (original) =>
    function(this: unknown, index: unknown): unknown {
      work += 1
      return original.call(this, index)
    },
  // The characters compared: the searched string's, at most the receiver's.
  startsWith: (original) =>
    function(this: unknown, search: unknown, position: unknown): unknown {
      work += 1 + Math.min(sizeOf(search), sizeOf(this))
      return original.call(this, search, position)
    },
  endsWith: (original) =>
    function(this: unknown, search: unknown, position: unknown): unknown {
      work += 1 + Math.min(sizeOf(search), sizeOf(this))
      return original.call(this, search, position)
    },
  // From the start position to the end of the match, or to the end.
  indexOf: (original) =>
    function(this: unknown, search: unknown, position: unknown): unknown {
      const found = original.call(this, search, position)
      work += typeof this === "string" && typeof found === "number" ? searched(this, search, position, found) : 1
      return found
    },
  includes: (original) =>
    function(this: unknown, search: unknown, position: unknown): unknown {
      const result = original.call(this, search, position)
      const found: unknown = typeof this === "string" ? Reflect.apply(originalIndexOf, this, [String(search), position]) : -1
      work += typeof this === "string" && typeof found === "number" ? searched(this, search, position, found) : 1
      return result
    },
  // The characters copied.
  slice: (original) =>
    function(this: unknown, start: unknown, end: unknown): unknown {
      const result = original.call(this, start, end)
      work += 1 + sizeOf(result)
      return result
    },
  substring: (original) =>
    function(this: unknown, start: unknown, end: unknown): unknown {
      const result = original.call(this, start, end)
      work += 1 + sizeOf(result)
      return result
    },
  // The whole string: the blanks scanned and the copy made, at most.
  trim: (original) =>
    function(this: unknown): unknown {
      const result = original.call(this)
      work += sizeOf(this) + sizeOf(result)
      return result
    },
  trimStart: (original) =>
    function(this: unknown): unknown {
      const result = original.call(this)
      work += sizeOf(this) + sizeOf(result)
      return result
    },
  trimEnd: (original) =>
    function(this: unknown): unknown {
      const result = original.call(this)
      work += sizeOf(this) + sizeOf(result)
      return result
    },
  substr: generic((_, __, result) => 1 + sizeOf(result))
}

const arraySites: Readonly<Record<string, Wrap>> = {
  push: (original) =>
    function(this: unknown): unknown {
      // `arguments`: a rest parameter would be an array of its own, and push(undefined) is not push().
      work += Math.max(1, arguments.length)
      return Reflect.apply(original, this, arguments)
    },
  pop: (original) =>
    function(this: unknown): unknown {
      work += 1
      return original.call(this)
    },
  at: (original) =>
    function(this: unknown, index: unknown): unknown {
      work += 1
      return original.call(this, index)
    }
}

/** The own methods of `owner` (functions) but its constructor and `exclude`; `sites` by name, else `whole`. */
const methodsOf = (owner: object, sites: Readonly<Record<string, Wrap>>, exclude: ReadonlyArray<PropertyKey>): Array<Site> =>
  Reflect.ownKeys(owner)
    .filter((key) => key !== "constructor" && !exclude.includes(key))
    .filter((key) => typeof Object.getOwnPropertyDescriptor(owner, key)?.value === "function")
    .map((key) => ({ owner, key, wrap: (typeof key === "string" ? sites[key] : undefined) ?? whole }))

/** Everything counted, listed once (before anything is replaced). */
const sites: ReadonlyArray<Site> = [
  // toString and valueOf return the string itself (a primitive is not converted through them).
  ...methodsOf(proto, stringSites, ["toString", "valueOf"]),
  ...methodsOf(Array.prototype, arraySites, []),
  {
    owner: JSON,
    key: "parse",
    wrap: (original) =>
      function(this: unknown, text: unknown, reviver: unknown): unknown {
        work += sizeOf(text)
        return original.call(this, text, reviver)
      }
  },
  { owner: JSON, key: "stringify", wrap: generic((_, __, result) => sizeOf(result)) },
  { owner: RegExp.prototype, key: "exec", wrap: generic((_, args) => sizeOf(args[0])) },
  { owner: Object, key: "keys", wrap: generic((_, __, result) => 1 + sizeOf(result)) },
  { owner: Object, key: "values", wrap: generic((_, __, result) => 1 + sizeOf(result)) },
  { owner: Object, key: "entries", wrap: generic((_, __, result) => 1 + sizeOf(result)) },
  { owner: Object, key: "fromEntries", wrap: generic((_, args) => 1 + sizeOf(args[0])) }
]

let counting = false

/**
 * The work of `run()`: the characters and elements it reads through every site above. The
 * originals are restored before this returns or throws.
 */
export const workOf = (run: () => void): number => {
  if (counting) throw new Error("workOf: already counting (measurements do not nest)")
  const saved: Array<readonly [Site, PropertyDescriptor]> = []
  counting = true
  try {
    for (const site of sites) {
      const descriptor = Object.getOwnPropertyDescriptor(site.owner, site.key)
      if (descriptor === undefined || typeof descriptor.value !== "function") continue
      const original: Method = descriptor.value
      saved.push([site, descriptor])
      Object.defineProperty(site.owner, site.key, { ...descriptor, value: site.wrap(original) })
    }
    // Installing went through replaced methods (push, iteration): only what `run` reads counts.
    work = 0
    run()
    return work
  } finally {
    for (let i = saved.length - 1; i >= 0; i--) {
      const entry = saved[i]!
      Object.defineProperty(entry[0].owner, entry[0].key, entry[1])
    }
    counting = false
    work = 0
  }
}

/** The work at one size. */
export interface Measured {
  /** The size asked for. */
  readonly size: number
  /** The input's actual length in characters (`n`). */
  readonly length: number
  readonly work: number
}

/** What a failed check reports: the first size over the bound, and the sizes before it. */
export interface Excess {
  readonly at: Measured
  readonly bound: number
  readonly below: ReadonlyArray<Measured>
}

/** Options: the base size, the largest size, and the work allowed per character. */
export interface Options {
  readonly baseSize?: number
  readonly maxSize?: number
  readonly perCharacter: number
}

/** The default base size: 1 KiB (constant costs, such as building an explanation, are amortised). */
export const defaultBaseSize = 1024
/** The default largest size: 1 MiB. */
export const defaultMaxSize = 1024 * 1024

/**
 * Measures `run(input(size))` at sizes from `baseSize` doubling to `maxSize`, stopping after the
 * first size whose work exceeds `perCharacter` times the input's length. `lengthOf` gives an
 * input's length in characters; the function runs once, uncounted, before the first size.
 */
export const measure = <I>(
  input: (size: number) => I,
  lengthOf: (input: I) => number,
  run: (input: I) => unknown,
  options: Options
): { readonly measured: ReadonlyArray<Measured>; readonly excess: Excess | undefined } => {
  const baseSize = options.baseSize ?? defaultBaseSize
  const maxSize = options.maxSize ?? defaultMaxSize
  run(input(baseSize))
  const measured: Array<Measured> = []
  for (let size = baseSize; size <= maxSize; size *= 2) {
    const sample = input(size)
    const length = lengthOf(sample)
    const work = workOf(() => {
      run(sample)
    })
    const at: Measured = { size, length, work }
    const bound = options.perCharacter * length
    if (work > bound) return { measured: [...measured, at], excess: { at, bound, below: measured } }
    measured.push(at)
  }
  return { measured, excess: undefined }
}

/** The first size where the work is over `perCharacter · n`, or undefined when none is. */
export const superlinearWork = <I>(
  input: (size: number) => I,
  lengthOf: (input: I) => number,
  run: (input: I) => unknown,
  options: Options
): Excess | undefined => measure(input, lengthOf, run, options).excess

/** Repeats `unit` to about `size` characters (at least once). */
export const repeatTo = (unit: string, size: number): string => unit.repeat(Math.max(1, Math.ceil(size / Math.max(1, unit.length))))

/** A readable description of a failed check. */
export const describe = (name: string, excess: Excess, perCharacter: number): string =>
  `${name}: ${excess.at.length} characters took ${excess.at.work} reads, ${(excess.at.work / excess.at.length).toFixed(1)} per character; ` +
  `linear work allows at most ${perCharacter} per character (${excess.bound}). Below: ` +
  (excess.below.map((m) => `${m.length} chars: ${m.work}`).join(", ") || "none")
