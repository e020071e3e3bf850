/**
 * Structural comparison for contract checks: deep equality of decoded values (plain objects,
 * arrays, `Option`s), with `SameValueZero` on numbers and a key holding `undefined` treated as
 * absent (both encode to the same JSON). Reports the path of the first difference.
 *
 * @internal
 */
import * as Option from "effect/Option"

const MAX_SHOWN = 200

/** A short rendering of a value for a violation message. */
export const show = (value: unknown): string => {
  let text: string
  try {
    text =
      typeof value === "string"
        ? JSON.stringify(value)
        : typeof value === "number" && !Number.isFinite(value)
        ? String(value)
        : (JSON.stringify(value, (_key, v: unknown) => (Option.isOption(v) ? (Option.isSome(v) ? { some: v.value } : "none") : v)) ??
          String(value))
  } catch {
    text = String(value)
  }
  return text.length > MAX_SHOWN ? `${text.slice(0, MAX_SHOWN)}… (${text.length} characters)` : text
}

const definedKeys = (value: object): Array<string> =>
  Object.keys(value)
    .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
    .sort()

/** The first difference between `expected` and `actual`, as `path: expected …, got …`; none if equal. */
export const diff = (expected: unknown, actual: unknown, path = "$"): Option.Option<string> => {
  const differ = () => Option.some(`${path}: expected ${show(expected)}, got ${show(actual)}`)
  if (typeof expected === "number" && typeof actual === "number") {
    return expected === actual || (Number.isNaN(expected) && Number.isNaN(actual)) ? Option.none() : differ()
  }
  if (typeof expected !== "object" || expected === null || typeof actual !== "object" || actual === null) {
    return Object.is(expected, actual) ? Option.none() : differ()
  }
  if (Option.isOption(expected) || Option.isOption(actual)) {
    if (!Option.isOption(expected) || !Option.isOption(actual) || expected._tag !== actual._tag) return differ()
    return Option.isSome(expected) && Option.isSome(actual) ? diff(expected.value, actual.value, `${path}.value`) : Option.none()
  }
  if (Array.isArray(expected) || Array.isArray(actual)) {
    if (!Array.isArray(expected) || !Array.isArray(actual)) return differ()
    if (expected.length !== actual.length) {
      return Option.some(`${path}: expected ${expected.length} elements, got ${actual.length}`)
    }
    for (let i = 0; i < expected.length; i++) {
      const d = diff(expected[i], actual[i], `${path}[${i}]`)
      if (Option.isSome(d)) return d
    }
    return Option.none()
  }
  const expectedKeys = definedKeys(expected)
  const actualKeys = definedKeys(actual)
  for (const key of new Set([...expectedKeys, ...actualKeys])) {
    const d = diff((expected as Record<string, unknown>)[key], (actual as Record<string, unknown>)[key], `${path}.${key}`)
    if (Option.isSome(d)) return d
  }
  return Option.none()
}

/** Deep equality as `diff` defines it. */
export const equals = (expected: unknown, actual: unknown): boolean => Option.isNone(diff(expected, actual))
