/**
 * Short descriptions of Schema failures: one `path: problem` per issue, joined by "; ". Schema's
 * tree formatter prints every enclosing type in full (for a record, the whole `RunRecord` union
 * before the one missing field); these messages name the field and what is wrong with it.
 *
 * @internal
 */
import * as ParseResult from "effect/ParseResult"

/** `path: problem; …` for each issue of a parse error (the root's issues without a path). */
export const formatIssues = (error: ParseResult.ParseError): string =>
  ParseResult.ArrayFormatter.formatErrorSync(error)
    // `String` on each key: a symbol key would make `join` throw.
    .map((issue) => (issue.path.length > 0 ? `${issue.path.map(String).join(".")}: ${issue.message}` : issue.message))
    .join("; ")
