/**
 * Counts every statement this process sends PostgreSQL through `pg` (under `@effect/sql-pg`), by
 * its text (whitespace folded, the first 100 characters): design 0350's statement counts. Install
 * before the first query; `counts()` answers, most frequent first.
 */
import { createRequire } from "node:module"

/** Wraps `pg`'s `Client.prototype.query` (no types of its own here) once. */
export const install = (): { readonly counts: () => ReadonlyArray<readonly [string, number]>; readonly total: () => number } => {
  const counts = new Map<string, number>()
  const pg = createRequire(import.meta.url)("pg") as { readonly Client: { readonly prototype: { query: (...args: Array<unknown>) => unknown } } }
  const proto = pg.Client.prototype
  const original = proto.query
  proto.query = function(this: unknown, ...args: Array<unknown>) {
    const first = args[0]
    const text = typeof first === "string"
      ? first
      : typeof first === "object" && first !== null && "text" in first
      ? String((first as { readonly text: unknown }).text)
      : "?"
    const key = text.replace(/\s+/g, " ").trim().slice(0, 100)
    counts.set(key, (counts.get(key) ?? 0) + 1)
    return original.apply(this, args)
  }
  return {
    counts: () => [...counts].sort((a, b) => b[1] - a[1]),
    total: () => [...counts.values()].reduce((a, b) => a + b, 0)
  }
}
