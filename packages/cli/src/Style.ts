/**
 * Terminal styling for the `polyloop` command: colour when standard output is a terminal (and
 * `NO_COLOR` is not set, or `FORCE_COLOR` is), plain text otherwise — so piped output and tests
 * see no escape codes. Colours come from `@effect/printer-ansi`.
 *
 * @since 0.1.0
 */
import * as Ansi from "@effect/printer-ansi/Ansi"
import * as AnsiDoc from "@effect/printer-ansi/AnsiDoc"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"

/** A way to paint text; the identity when colour is off. */
export type Paint = (text: string) => string

/** The styles the command uses. */
export interface Style {
  readonly enabled: boolean
  readonly bold: Paint
  readonly dim: Paint
  readonly red: Paint
  readonly green: Paint
  readonly yellow: Paint
  readonly blue: Paint
  readonly magenta: Paint
  readonly cyan: Paint
}

const painter = (enabled: boolean, ansi: Ansi.Ansi): Paint =>
  enabled
    ? (text) =>
      text
        .split("\n")
        .map((line) => (line.length === 0 ? line : AnsiDoc.render(AnsiDoc.annotate(AnsiDoc.text(line), ansi), { style: "pretty" })))
        .join("\n")
    : (text) => text

/** Makes the styles, coloured or not. */
export const make = (enabled: boolean): Style => ({
  enabled,
  bold: painter(enabled, Ansi.bold),
  dim: painter(enabled, Ansi.blackBright),
  red: painter(enabled, Ansi.red),
  green: painter(enabled, Ansi.green),
  yellow: painter(enabled, Ansi.yellow),
  blue: painter(enabled, Ansi.blue),
  magenta: painter(enabled, Ansi.magenta),
  cyan: painter(enabled, Ansi.cyan)
})

/** Plain text. */
export const plain: Style = make(false)

/** Is the variable set to something that means "yes" (set, not empty, not `0` or `false`)? */
const isOn = (name: string) =>
  Config.option(Config.string(name)).pipe(Config.map(Option.exists((value) => value !== "" && value !== "0" && value.toLowerCase() !== "false")))

/**
 * Colour iff standard output is a terminal, unless `NO_COLOR` is set (https://no-color.org) or
 * `FORCE_COLOR` is set (colour even when piped).
 */
export const detect: Effect.Effect<Style> = Effect.gen(function*() {
  const noColor = yield* isOn("NO_COLOR")
  const forceColor = yield* isOn("FORCE_COLOR")
  return make(forceColor || (!noColor && process.stdout.isTTY === true))
}).pipe(Effect.orElseSucceed(() => plain))
