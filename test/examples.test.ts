/**
 * Every runnable example, run as a user runs it (`npx tsx examples/<name>.ts`, here through tsx's
 * own command line), asserting on its output and exit code: the tool-calling agent, the
 * code-action agent (and its `EnvError` when the runtime cannot start), the crash-and-resume
 * walk-through, the README's example (and that the README shows exactly its code), the user's
 * own store (its contract tests are `examples/custom-store.test.ts`), `Agent.stream` behind an SSE
 * endpoint, the agent over an MCP
 * server's tools, an experiment (scored, resumed: nothing runs twice) and the real-model example
 * without an API key.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as http from "node:http"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { type Result, spawnNode } from "./support/cli-process.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const tsxCli = createRequire(import.meta.url).resolve("tsx/cli")

const cleanEnv = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const name of ["POLYLOOP_API_KEY", "POLYLOOP_BASE_URL", "POLYLOOP_MODEL", "CODE_AGENT_RUNTIME", "CODE_AGENT_PYTHON", "FORCE_COLOR"]) delete env[name]
  return env
}

/** `npx tsx examples/<file> [args]` from `cwd`. */
const example = (
  file: string,
  options: { readonly cwd?: string; readonly env?: NodeJS.ProcessEnv; readonly args?: ReadonlyArray<string> } = {}
): Promise<Result> =>
  spawnNode([tsxCli, path.join(root, "examples", file), ...(options.args ?? [])], { cwd: options.cwd ?? root, env: { ...cleanEnv(), ...options.env } })

const occurrences = (text: string, part: string): number => text.split(part).length - 1

describe("examples", () => {
  it("tool-agent.ts: the GovDoc-like agent edits its files, fails and corrects itself, and completes by submit", async () => {
    const result = await example("tool-agent.ts")
    assert.strictEqual(result.code, 0, result.stderr)
    const out = result.stdout
    assert.match(out, /^step 0: list_files \{\}$/m)
    assert.match(out, /^step 2: replace_in_file .*\n\s+Executed: TextNotFound: /m)
    assert.match(out, /^step 4: append_to_file \{"path":"CHANGELOG\.md"\}\n\s+NotExecuted \(synthetic\): The action was not executed: invalid arguments/m)
    assert.match(out, /^stop: Completed\(Tool\)$/m)
    assert.match(out, /^steps: 7 \(6 effective\)/m)
    assert.match(out, /^1\. Customer records are kept for 90 days after an account is closed\.$/m)
    assert.strictEqual(occurrences(out, "- Customer records are now kept for 90 days"), 2, "once in step 5's arguments, once in CHANGELOG.md")
    assert.match(out, /^tool-agent-1\/3\/call_3 {2}replace_in_file policy\.md\ntool-agent-1\/5\/call_5 {2}append_to_file CHANGELOG\.md$/m)
  })

  it("code-agent.ts: a Python CSV analysis in the sandbox, killed after a snapshot and resumed in a new process, completes by final_answer", async () => {
    const result = await example("code-agent.ts")
    assert.strictEqual(result.code, 0, `${result.stdout}\n${result.stderr}`)
    const out = result.stdout
    assert.match(out, /child \| {5}> 7 \{'region': 'north', 'product': 'widget', 'amount': '120\.50'\}/)
    assert.match(out, /child \| {5}> TypeError: unsupported operand type\(s\) for \+: 'int' and 'str'/)
    assert.match(out, /\(killing this process with SIGKILL after the snapshot of step 2\)\n\(child exited: SIGKILL\)/)
    assert.match(out, /child \| resumed from step 2/)
    assert.match(out, /child \| {5}> \{'north': 195\.75, 'south': 179\.99, 'east': 210\.01\}/, "the restored rows are there after the resume")
    assert.match(out, /child \| {3}Executed \(reports completion\):\nchild \| {5}> east: 210\.01/)
    assert.match(out, /^child \| stop: Completed\(Environment\)$/m)
    assert.notMatch(out, /polyloop-sandbox-|\/tmp\//, "observations hold no host path")
  })

  it("code-agent.ts: no interpreter is SandboxUnavailable, naming it, before any step", async () => {
    const result = await example("code-agent.ts", { env: { CODE_AGENT_PYTHON: "/no/such/python3" } })
    assert.strictEqual(result.code, 1)
    assert.match(result.stdout, /SandboxUnavailable: the code sandbox cannot be set up: interpreter — \/no\/such\/python3 was not found/)
    assert.notMatch(result.stdout, /step 0:/)
  })

  it("crash-and-resume.ts: a child killed by SIGKILL mid-step, resumed, and no tool ran twice", async () => {
    const result = await example("crash-and-resume.ts")
    assert.strictEqual(result.code, 0, `${result.stdout}\n${result.stderr}`)
    const out = result.stdout
    assert.match(out, /child \| MID-STEP append_to_file crash-walkthrough\/5\/call_5/)
    assert.match(out, /SIGKILL the child/)
    assert.notMatch(out, /child \| .*step 5: append_to_file/, "the child never recorded step 5")
    assert.match(out, /The log holds \d+ records: 5 completed steps, then step 5's reply/)
    assert.match(out, /step 5: append_to_file → NotExecuted \(synthetic\) \[settled on resume\]: The previous action \(append_to_file\) was interrupted/)
    assert.match(out, /step 6: read_file → Executed/)
    assert.strictEqual(occurrences(out, "   ok   "), 8)
    assert.notInclude(out, "FAIL")
    assert.match(out, /no tool ran twice: Completed\(Tool\) after 8 steps, resumed 1×/)
  })

  it("long-run.ts: masking keeps a 1.6 MB run's requests small, a budget bounds them, the log in full, and a resumed run's requests identical", async () => {
    const result = await example("long-run.ts")
    assert.strictEqual(result.code, 0, `${result.stdout}\n${result.stderr}`)
    const out = result.stdout
    const logged = Number(/logged observations: (\d+) characters/.exec(out)?.[1])
    const all = Number(/largest request, keeping everything: (\d+) characters/.exec(out)?.[1])
    const masked = Number(/largest request, masking: +(\d+) characters/.exec(out)?.[1])
    assert.isAbove(logged, 1_600_000)
    assert.isAbove(all, logged)
    assert.isBelow(masked, all / 10)
    const budgeted = /largest request, masking \+ budget: +(\d+) characters, (\d+) tokens \(budget 14000\); (\d+) compactions recorded/.exec(out)
    assert.isNotNull(budgeted, out)
    assert.isBelow(Number(budgeted![1]), masked)
    assert.isAtMost(Number(budgeted![2]), 14_000)
    assert.isAbove(Number(budgeted![3]), 0)
    assert.match(out, /an older file as the model sees it: \[output of read_log omitted: 128 lines, \d+ characters\]/)
    assert.match(out, /resumed 1 time\(s\), 201 steps: every request identical to the uninterrupted run's: true/)
    assert.match(out, /answer: All 200 logs read: every worker is ok\./)
  })

  it("readme-example.ts: runs durably, and a second run returns the recorded result; the README shows its code", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-readme-"))
    try {
      const first = await example("readme-example.ts", { cwd: dir })
      assert.strictEqual(first.code, 0, first.stderr)
      assert.strictEqual(first.stdout.trim(), "Completed(Answer) after 2 steps")
      assert.isTrue(fs.existsSync(path.join(dir, "weather.db")))
      const second = await example("readme-example.ts", { cwd: dir })
      assert.strictEqual(second.code, 0, second.stderr)
      assert.strictEqual(second.stdout.trim(), "Completed(Answer) after 2 steps")
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
    const code = fs.readFileSync(path.join(root, "examples", "readme-example.ts"), "utf8")
    const body = code.slice(code.indexOf("\n") + 1).trim()
    const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
    assert.include(readme, body, "README.md shows the code of examples/readme-example.ts")
    assert.isBelow(body.split("\n").length, 30, "the README's example stays under 30 lines")
    assert.include(body, "Agent.layer({", "the README's example wires its services in one layer")
  })

  it("approval.ts: the refund suspends, polyloop approve decides in another process, the next run resumes and refunds once; a rejection is told to the model", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-approval-"))
    const launcher = path.join(root, "packages", "cli", "bin", "polyloop.js")
    const polyloop = (args: ReadonlyArray<string>) => spawnNode([launcher, ...args], { cwd: dir, env: cleanEnv() })
    try {
      const first = await example("approval.ts", { cwd: dir })
      assert.strictEqual(first.code, 0, first.stderr)
      assert.match(first.stdout, /^step 0: lookup_order \{"orderId":42\}\n\s+Executed: order 42: 1 ceramic vase/m)
      assert.match(first.stdout, /^step 1: refund needs approval \(call call_s1_0\)$/m)
      assert.match(first.stdout, /^suspended: run refund-order-42 waits for a person's decision on:\n {2}call call_s1_0: refund \{"orderId":42,"amount":180,"reason":"delivered broken"\} \(hash [0-9a-f]{12}\)$/m)
      assert.match(first.stdout, /npx polyloop approve refund-order-42 call_s1_0 --db /)
      assert.isFalse(fs.existsSync(path.join(dir, "approval.db.refunds.jsonl")), "nothing refunded while it waits")
      const still = await example("approval.ts", { cwd: dir })
      assert.match(still.stdout, /^suspended: /m, "run again undecided: still suspended")
      assert.notMatch(still.stdout, /^resumed/m, "and not resumed")

      const pending = await polyloop(["pending", "--db", "approval.db"])
      assert.match(pending.stdout, /^refund-order-42\s+1\s+call_s1_0\s+refund\s+\{"orderId":42,"amount":180,"reason":"delivered broken"\}/m)
      const approved = await polyloop(["approve", "refund-order-42", "call_s1_0", "--db", "approval.db", "--by", "ana"])
      assert.strictEqual(approved.code, 0, approved.stderr)

      const second = await example("approval.ts", { cwd: dir })
      assert.strictEqual(second.code, 0, second.stderr)
      assert.match(second.stdout, /^resumed run refund-order-42 at step 1$/m)
      assert.match(second.stdout, /^step 1: refund \{"orderId":42,"amount":180,"reason":"delivered broken"\}\n\s+Executed: refunded 180 EUR on order 42$/m)
      assert.match(second.stdout, /^finished: Completed\(Answer\); refunds written: 1$/m)
      const third = await example("approval.ts", { cwd: dir })
      assert.match(third.stdout, /^finished: Completed\(Answer\); refunds written: 1$/m)
      const ledger = fs.readFileSync(path.join(dir, "approval.db.refunds.jsonl"), "utf8").trim().split("\n")
      assert.deepStrictEqual(ledger.map((line) => (JSON.parse(line) as { idempotencyKey: string }).idempotencyKey), ["refund-order-42/1/call_s1_0"])

      // Rejected instead: the model is told why, nothing is refunded.
      const fresh = await example("approval.ts", { cwd: dir, args: ["--fresh"] })
      assert.match(fresh.stdout, /^suspended: /m)
      await polyloop(["reject", "refund-order-42", "call_s1_0", "--db", "approval.db", "--reason", "the photo shows another vase"])
      const rejected = await example("approval.ts", { cwd: dir })
      assert.match(rejected.stdout, /^step 1: refund .*\n\s+NotExecuted: The call to refund was rejected by a person and was not executed\. Reason: the photo shows another vase$/m)
      assert.match(rejected.stdout, /^finished: Completed\(Answer\); refunds written: 0$/m)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 600_000)

  it("sub-agents.ts: a planner hands two files to reader agents (durable child runs), is interrupted mid-child and resumed; each file billed once, the children's cost counted, a typed summary of typed reports", async () => {
    const result = await example("sub-agents.ts")
    assert.strictEqual(result.code, 0, result.stderr)
    assert.notInclude(result.stdout, "FAIL")
    assert.include(result.stdout, "planner-1/0/call_s0_0 finished, planner-1/0/call_s0_1 unfinished")
    assert.match(result.stdout, /its children: 2 runs, 6 steps, \d+ tokens/)
    assert.include(result.stdout, "  planner-1/0/call_s0_1 — Completed(Answer), 3 steps")
    // The typed summary (design 0400): each reader's Report, the planner's Summary decoded from its log.
    assert.match(result.stdout, /^ {2}docs\/design\/0392-sub-agents\.md: "0392 — Agents that call agents: a child is a durable run \(issue 47\)", \d+ lines$/m)
    assert.match(result.stdout, /^ok {3}the typed summary counts the files' \d+ lines$/m)
  }, 180_000)

  it("custom-store.ts: the user's own store writes a run and reads it back", async () => {
    const result = await example("custom-store.ts")
    assert.strictEqual(result.code, 0, result.stderr)
    assert.include(result.stdout, "run demo: 1 record(s), started: true")
  })

  it("mcp-agent.ts: the filesystem MCP server's tools, validated by its schema, isError as an ordinary failure, completed by a code tool", async () => {
    const result = await example("mcp-agent.ts")
    assert.strictEqual(result.code, 0, result.stderr)
    const out = result.stdout
    assert.match(out, /^MCP server: secure-filesystem-server \(\d+ tools\), folder /m)
    assert.match(out, /^ {2}read_text_file: replay Always\n {2}write_file: replay Always\n {2}list_directory: replay Always\n {2}submit: replay Never, completes the run$/m)
    assert.match(out, /^step 0: list_directory .*\n\s+Executed: \[FILE\] todo\.md$/m)
    assert.match(out, /^step 2: write_file .*\n\s+NotExecuted \(synthetic\): The action was not executed: invalid arguments for "write_file": content: is missing\./m)
    assert.match(out, /^step 4: read_text_file \{"path":"\/etc\/hostname"\}\n\s+Executed: McpToolError: Access denied - path outside allowed directories/m)
    assert.match(out, /^stop: Completed\(Tool\)$/m)
    assert.match(out, /^steps: 6 \(5 effective\)$/m)
    assert.match(out, /^--- open\.md\n- fix the login page\n- renew the certificate$/m)
  })

  it("sse-endpoint.ts: Agent.stream behind an SSE endpoint — the reply arrives piece by piece, then each step, the result last", async () => {
    const result = await example("sse-endpoint.ts")
    assert.strictEqual(result.code, 0, result.stderr)
    const lines = result.stdout.trimEnd().split("\n")
    const replies = lines.filter((line) => line.startsWith("model ▸ "))
    assert.lengthOf(replies, 2, result.stdout)
    // Pieces of at most 6 characters, as the scripted model streams them, that join into the replies.
    assert.isAbove(replies[1]!.split("|").length, 10)
    assert.strictEqual(replies[1]!.slice("model ▸ ".length).split("|").join(""), "It is 4 °C in Oslo right now: a coat, a scarf and gloves will do.")
    assert.include(replies[0]!.split("|").join(""), "weather{\"city\":\"Oslo\"}")
    assert.deepStrictEqual(lines.slice(-5).filter((line) => !line.startsWith("model")), [
      "step 0 completed (Act)",
      "step 1 completed (Finish)",
      "result: Completed(Answer) after 2 steps"
    ])
  })

  it("experiment.ts: 20 questions × 3 epochs through two configurations, scored with CIs and compared; run again, nothing runs", async () => {
    const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-example-experiment-"))
    const first = await example("experiment.ts", { cwd })
    assert.strictEqual(first.code, 0, first.stderr)
    assert.match(first.stdout, /^ran 120 runs, 0 already finished, 0 failed$/m)
    assert.match(first.stdout, /^tool numeric: mean 1\.000 ± 0\.000 \(95% CI 1\.000–1\.000\)$/m)
    assert.match(first.stdout, /^guess numeric: mean 0\.750 ± 0\.099 \(95% CI 0\.550–0\.900\)$/m)
    assert.match(first.stdout, /^guess − tool on 20 samples: -0\.250 \(95% CI -0\.450–-0\.100\)$/m)
    const second = await example("experiment.ts", { cwd })
    assert.strictEqual(second.code, 0, second.stderr)
    assert.match(second.stdout, /^ran 0 runs, 120 already finished, 0 failed$/m)
    assert.strictEqual(second.stdout.split("\n").slice(1).join("\n"), first.stdout.split("\n").slice(1).join("\n"), "the same results, byte for byte")
  })

  it("real-model.ts: without POLYLOOP_API_KEY it explains what to set and exits 0", async () => {
    const result = await example("real-model.ts")
    assert.strictEqual(result.code, 0, result.stderr)
    assert.include(result.stdout, "POLYLOOP_API_KEY is not set")
  })

  it("otel.ts: the run's spans reach an OTLP/HTTP endpoint — run → step → model call / tool call, with the GenAI attributes", async () => {
    // A collector of our own on loopback: it keeps every OTLP JSON body posted to /v1/traces.
    const bodies: Array<OtlpTraces> = []
    const server = http.createServer((request, response) => {
      let body = ""
      request.setEncoding("utf8").on("data", (chunk: string) => (body += chunk))
      request.on("end", () => {
        if (request.method === "POST" && request.url === "/v1/traces") bodies.push(JSON.parse(body) as OtlpTraces)
        response.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    try {
      const { port } = server.address() as { port: number }
      const result = await example("otel.ts", { env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`, OTEL_SERVICE_NAME: "examples-test" } })
      assert.strictEqual(result.code, 0, result.stderr)
      assert.match(result.stdout, /^otel-\d+: Completed\(Answer\) after 2 steps$/m)
      const resources = bodies.flatMap((body) => body.resourceSpans)
      assert.isTrue(resources.every((r) => r.resource.attributes.some((a) => a.key === "service.name" && a.value.stringValue === "examples-test")))
      const spans = resources.flatMap((r) => r.scopeSpans.flatMap((scope) => scope.spans))
      const attribute = (span: OtlpSpan, key: string) => {
        const value = span.attributes.find((a) => a.key === key)?.value
        return value?.stringValue ?? (value?.intValue === undefined ? undefined : Number(value.intValue))
      }
      const named = (name: string) => spans.filter((span) => span.name === name)
      const run = named("Agent.run")[0]!
      assert.strictEqual(attribute(run, "gen_ai.operation.name"), "invoke_agent")
      const steps = named("Agent.step")
      assert.lengthOf(steps, 2)
      for (const step of steps) assert.strictEqual(step.parentSpanId, run.spanId)
      const models = named("Agent.model")
      assert.lengthOf(models, 2)
      for (const model of models) {
        assert.isTrue(steps.some((step) => step.spanId === model.parentSpanId))
        assert.strictEqual(model.traceId, run.traceId)
        assert.strictEqual(attribute(model, "gen_ai.operation.name"), "chat")
        assert.strictEqual(attribute(model, "gen_ai.request.model"), "gpt-4o-mini")
        assert.strictEqual(attribute(model, "polyloop.run_id"), attribute(run, "polyloop.run_id"))
      }
      assert.deepStrictEqual(models.map((m) => [attribute(m, "gen_ai.usage.input_tokens"), attribute(m, "gen_ai.usage.output_tokens")]).sort(), [[120, 14], [160, 9]])
      const [action] = named("Agent.action")
      assert.strictEqual(attribute(action!, "gen_ai.operation.name"), "execute_tool")
      assert.strictEqual(attribute(action!, "gen_ai.tool.name"), "weather")
      assert.strictEqual(attribute(action!, "gen_ai.tool.call.id"), "call_oslo")
      assert.strictEqual(attribute(action!, "polyloop.step"), 0)
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })
})

/** The parts of an OTLP/HTTP JSON traces body (opentelemetry-proto's ExportTraceServiceRequest) read here. */
interface OtlpValue {
  readonly stringValue?: string
  readonly intValue?: string | number
}
interface OtlpSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly name: string
  readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: OtlpValue }>
}
interface OtlpTraces {
  readonly resourceSpans: ReadonlyArray<{
    readonly resource: { readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: OtlpValue }> }
    readonly scopeSpans: ReadonlyArray<{ readonly spans: ReadonlyArray<OtlpSpan> }>
  }>
}
