/**
 * The names a JavaScript action declares at its top level with `let`, `const` or `class`
 * (design 0330, amendment 2): found with acorn in the host and sent with the action, so that the
 * driver can save them (they are bindings of the context's global lexical scope, not properties
 * of its global object) and list the unsaveable ones as lost.
 *
 * @internal
 */
import * as acorn from "acorn"

/** A top-level lexical declaration. */
export interface Lexical {
  readonly name: string
  readonly kind: "let" | "const" | "class"
}

const namesOf = (pattern: acorn.Pattern, into: Array<string>): void => {
  switch (pattern.type) {
    case "Identifier":
      into.push(pattern.name)
      return
    case "ObjectPattern":
      for (const property of pattern.properties) {
        if (property.type === "RestElement") namesOf(property.argument, into)
        else namesOf(property.value, into)
      }
      return
    case "ArrayPattern":
      for (const element of pattern.elements) if (element !== null) namesOf(element, into)
      return
    case "RestElement":
      namesOf(pattern.argument, into)
      return
    case "AssignmentPattern":
      namesOf(pattern.left, into)
      return
    case "MemberExpression":
      // Not a declaration's pattern (only assignments have these).
      return
  }
}

/**
 * The top-level `let`/`const`/`class` names of `code`, parsed as the driver runs it (a script);
 * none when it does not parse (the interpreter reports the `SyntaxError`).
 */
export const topLevel = (code: string): ReadonlyArray<Lexical> => {
  let program: acorn.Program
  try {
    program = acorn.parse(code, { ecmaVersion: "latest", sourceType: "script", allowHashBang: true })
  } catch {
    return []
  }
  const found: Array<Lexical> = []
  for (const statement of program.body) {
    if (statement.type === "ClassDeclaration") {
      found.push({ name: statement.id.name, kind: "class" })
    } else if (statement.type === "VariableDeclaration" && (statement.kind === "let" || statement.kind === "const")) {
      const kind = statement.kind
      for (const declarator of statement.declarations) {
        const names: Array<string> = []
        namesOf(declarator.id, names)
        for (const name of names) found.push({ name, kind })
      }
    }
  }
  return found
}
