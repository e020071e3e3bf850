/**
 * A `tools/call` result as an observation (design 0230): text items as they are, every other
 * content kind described in one bracketed line, never dropped; no content but
 * `structuredContent` → its JSON. A pure function of the result, so a replay renders the same.
 *
 * @internal
 */

type Item = Readonly<Record<string, unknown>>

const str = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined)

/** Bytes encoded by a base64 text (padding and whitespace accounted for). */
export const base64Bytes = (data: string): number => {
  const clean = data.replace(/\s+/g, "")
  const padding = clean.endsWith("==") ? 2 : clean.endsWith("=") ? 1 : 0
  return Math.max(0, Math.floor((clean.length * 3) / 4) - padding)
}

const sized = (kind: string, item: Item): string => {
  const data = str(item["data"])
  const mime = str(item["mimeType"]) ?? "unknown type"
  return `[${kind}: ${mime}${data === undefined ? "" : `, ${base64Bytes(data)} bytes`}]`
}

const resource = (item: Item): string => {
  const inner = item["resource"]
  if (typeof inner !== "object" || inner === null) return "[resource]"
  const res = inner as Item
  const uri = str(res["uri"]) ?? "(no uri)"
  const mime = str(res["mimeType"])
  const text = str(res["text"])
  if (text !== undefined) return `[resource ${uri}${mime === undefined ? "" : ` (${mime})`}]\n${text}`
  const blob = str(res["blob"])
  return `[resource ${uri}: ${mime ?? "unknown type"}${blob === undefined ? "" : `, ${base64Bytes(blob)} bytes`}]`
}

const resourceLink = (item: Item): string => {
  const name = str(item["name"])
  const uri = str(item["uri"]) ?? "(no uri)"
  const mime = str(item["mimeType"])
  const description = str(item["description"])
  return `[resource link: ${name === undefined ? "" : `${name} `}<${uri}>${mime === undefined ? "" : ` (${mime})`}${
    description === undefined ? "" : `, ${description}`
  }]`
}

/** One content item as text. */
export const describeItem = (item: unknown): string => {
  if (typeof item !== "object" || item === null) return `[content: ${JSON.stringify(item)}]`
  const it = item as Item
  switch (it["type"]) {
    case "text":
      return str(it["text"]) ?? ""
    case "image":
      return sized("image", it)
    case "audio":
      return sized("audio", it)
    case "resource":
      return resource(it)
    case "resource_link":
      return resourceLink(it)
    default:
      return `[content of type ${JSON.stringify(it["type"] ?? null)}]`
  }
}

/** The observation of a result's `content` (and `structuredContent` when there is no content). */
export const observation = (result: { readonly content?: unknown; readonly structuredContent?: unknown }): string => {
  const content = Array.isArray(result.content) ? result.content : []
  if (content.length === 0) {
    return result.structuredContent === undefined ? "" : JSON.stringify(result.structuredContent)
  }
  return content.map(describeItem).join("\n")
}
