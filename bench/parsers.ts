/**
 * The shipped decision parsers' running time against the size of the reply, on the adversarial
 * inputs of `packages/core/test/ParserLinearity.test.ts` (which checks linearity by counting
 * what a parser reads, never by the clock). For each parser and input: the CPU time of one
 * parse at 16 KiB (the best of 7 after warm-up) and at each size doubling to 1 MiB (the best of
 * 3), and how far each is from linear: `(t(n) / t(16 KiB)) / (n / 16 KiB)`, 1 for a linear
 * parser, about `n / 16 KiB` for a quadratic one.
 *
 *   npx tsc -b && npx tsx bench/parsers.ts [--label <name>] [--out <file>] [--quick]
 *
 * It measures the JavaScript `tsc -b` emitted (`dist/`, what users run; build it first), not the source through
 * tsx: tsx compiles with esbuild's `keepNames`, which wraps every closure the JSON reader makes
 * in a call that costs microseconds and would triple its figures. `--quick` stops at 256 KiB
 * with fewer repetitions. Results are appended to `bench/results.parsers.json` (or `--out`)
 * under the label; nothing here fails.
 */
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { argv, cpuMicros, option, round } from "./lib/measure.js"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const quick = argv.includes("--quick")
const label = option("--label") ?? "run"
const out = option("--out") ?? path.join(benchDir, "results.parsers.json")
const baseSize = 16 * 1024
const maxSize = quick ? 256 * 1024 : 1024 * 1024

const json = JsonActionParser.decide({ finishTool: { name: "done" } })
const code = CodeBlockParser.decide({ language: "python", finalAnswer: { line: "Final Answer:", call: "final_answer" } })
const native = NativeToolCallParser.decide()

const repeatTo = (unit: string, size: number): string => unit.repeat(Math.max(1, Math.ceil(size / Math.max(1, unit.length))))
const text = (unit: string) => (size: number) => ModelReply.make({ text: repeatTo(unit, size) })
const args = (unit: string) => (size: number) =>
  ModelReply.make({ text: "", toolCalls: [{ id: "c", name: "t", argumentsText: repeatTo(unit, size) }] })

interface Case {
  readonly parser: string
  readonly input: string
  readonly make: (size: number) => ModelReply.ModelReply
  readonly parse: (reply: ModelReply.ModelReply) => unknown
}

/** The inputs each scanner reacts to most (the test has these and more). */
const units: ReadonlyArray<readonly [string, string]> = [
  ["braces in prose", "see {a, b} and {c} "],
  ["LaTeX", "so $\\frac{a}{b} + \\sqrt{x_{i}}$ holds\n"],
  ["malformed objects", "{\"tool\" \"x\"} "],
  ["empty objects", "{} "],
  ["objects", "{\"tool\":\"read\",\"path\":\"a\"}\n"],
  ["unclosed braces", "{"],
  ["brackets", "[{\"a\":[1,2,{\"b\":null}]}] "],
  ["python blocks", "```python\nx = 1\n```\n"],
  ["CRLF lines", "a\r\n"]
]

const cases: ReadonlyArray<Case> = [
  ...units.flatMap(([name, unit]): Array<Case> => [
    { parser: "JsonActionParser", input: name, make: text(unit), parse: json },
    { parser: "CodeBlockParser", input: name, make: text(unit), parse: code },
    { parser: "NativeToolCallParser", input: `arguments of ${name}`, make: args(unit), parse: native }
  ]),
  {
    parser: "CodeBlockParser",
    input: "a long final-answer literal",
    make: (size) => ModelReply.make({ text: "```python\nfinal_answer(answer=r\"" + repeatTo("a\\n", size) + "\")\n```" }),
    parse: code
  },
  {
    parser: "NativeToolCallParser",
    input: "many calls",
    make: (size) =>
      ModelReply.make({
        text: "",
        toolCalls: Array.from({ length: Math.ceil(size / 32) }, (_, i) => ({ id: `c${i}`, name: "tool", argumentsText: "{\"a\":1}" }))
      }),
    parse: native
  }
]

/** CPU milliseconds of one run. */
const time = (run: () => void): number => {
  const start = cpuMicros()
  run()
  return (cpuMicros() - start) / 1000
}

/** The best of `count` runs (more while they total under 1 ms, at most 50). */
const best = (run: () => void, count: number): number => {
  let min = Number.POSITIVE_INFINITY
  let total = 0
  for (let i = 0; i < 50 && (i < count || total < 1); i++) {
    const t = time(run)
    total += t
    if (t < min) min = t
  }
  return min
}

interface Point {
  readonly size: number
  readonly ms: number
  /** (t(n) / t(base)) / (n / base): 1 is linear. */
  readonly fromLinear: number
}

const measure = (c: Case): ReadonlyArray<Point> => {
  const base = c.make(baseSize)
  best(() => c.parse(base), quick ? 3 : 5)
  // A floor of 0.05 ms keeps a base run too fast for the timer from making every ratio huge.
  const baseMs = Math.max(best(() => c.parse(base), quick ? 3 : 7), 0.05)
  const points: Array<Point> = [{ size: baseSize, ms: round(baseMs, 3), fromLinear: 1 }]
  for (let size = baseSize * 2; size <= maxSize; size *= 2) {
    const sample = c.make(size)
    const ms = best(() => c.parse(sample), quick ? 1 : 3)
    points.push({ size, ms: round(ms, 3), fromLinear: round(ms / baseMs / (size / baseSize), 2) })
  }
  return points
}

const main = (): void => {
  const at = new Date().toISOString()
  const loadBefore = os.loadavg().map((l) => round(l, 2))
  const results = cases.map((c) => {
    const points = measure(c)
    const last = points[points.length - 1]!
    const worst = Math.max(...points.map((p) => p.fromLinear))
    process.stdout.write(
      `${c.parser.padEnd(21)} ${c.input.padEnd(34)} ${String(points[0]!.ms).padStart(8)} ms at 16 KiB  ${String(last.ms).padStart(9)} ms at ${last.size / 1024} KiB  worst ×${worst} of linear\n`
    )
    return { parser: c.parser, input: c.input, points, worstFromLinear: worst }
  })
  const run = {
    at,
    quick,
    machine: { node: process.version, cpus: os.cpus().length, cpu: os.cpus()[0]?.model ?? "unknown", loadAverage: loadBefore, loadAverageAfter: os.loadavg().map((l) => round(l, 2)) },
    results
  }
  const all = fs.existsSync(out) ? (JSON.parse(fs.readFileSync(out, "utf8")) as Record<string, Array<unknown>>) : {}
  all[label] = [...(all[label] ?? []), run]
  fs.writeFileSync(out, `${JSON.stringify(all, null, 2)}\n`)
  process.stdout.write(`written to ${path.relative(process.cwd(), out)} under ${JSON.stringify(label)}\n`)
}

main()
