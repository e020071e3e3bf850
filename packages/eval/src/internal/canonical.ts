/**
 * Canonical JSON (sorted keys, no whitespace, `undefined` fields dropped) and SHA-256, for the
 * experiment's recorded definition and the dataset's hash.
 *
 * @internal
 */
import { createHash } from "node:crypto"

const sortValue = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(sortValue)
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {}
    for (const key of Object.keys(value).sort()) {
      const field = (value as Record<string, unknown>)[key]
      if (field !== undefined) out[key] = sortValue(field)
    }
    return out
  }
  return value
}

/** Sorted keys, no whitespace. */
export const canonicalJson = (value: unknown): string => JSON.stringify(sortValue(value))

/** SHA-256 as lowercase hex. */
export const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex")
