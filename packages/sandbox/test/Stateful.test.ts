/**
 * State across steps, restores and forks (design 0330) through `Agent.run`: a variable set in
 * step 1 is read in step 5; a run interrupted in one executor continues in a new one (another
 * process's view: the sessions are gone, only the store remains) with its variables and files;
 * `Agent.fork` at step k restores the workspace byte for byte and the variables by value as they
 * were after step k-1; names that cannot be saved are told to the model after a restore; an
 * interrupted action's process tree is killed and its effects are not kept; the per-action CPU
 * limit stops a busy loop in both languages (and costs no process per trivial action); and
 * JavaScript's top-level let/const are saved and restored as lexical bindings (snapshots of the
 * previous shape still restore).
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Blobs from "@polyloop/core/Blobs"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import type { ModelRequest } from "@polyloop/core/ModelClient"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as v8 from "node:v8"
import { ensureTools, run, testOptions } from "./support.js"

beforeAll(ensureTools, 600_000)

const agent = AgentDefinition.make({
  name: "analyst",
  systemPrompt: "You analyse data by writing Python; call final_answer(value) when done.",
  budget: { maxSteps: 20 }
})
const parser = CodeBlockParser.layer({ language: "python", aliases: ["py"] })

const lastUser = (request: ModelRequest): string => {
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const message = request.messages[i]!
    if (message._tag === "User") return message.text
  }
  return ""
}

/** The services of a run: a store, a scripted model, the parser, the sandbox over the store. */
const services = (store: Layer.Layer<RunLogStore.RunLogStore, unknown>, script: ScriptedModel.Script, options: Sandbox.Options = testOptions) =>
  Layer.mergeAll(
    ScriptedModel.layer(script),
    parser,
    EventSink.layerNoop,
    Sandbox.layer(options)
  ).pipe(Layer.provideMerge(store))

const tempDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-sandbox-state-"))
  fs.chmodSync(dir, 0o711)
  return dir
}

const observations = (log: RunLog.RunLog) => log.results.map((r) => r.outcome.observation)

describe.sequential("stateful code actions", () => {
  it.live("a variable set in step 1 is read in step 5; final_answer completes the run", () =>
    Effect.gen(function*() {
      const store = RunLogStore.inMemory()
      const script = [
        ScriptedModel.code("python", "print('warming up')"),
        ScriptedModel.code("python", "secret = 6 * 7"),
        ScriptedModel.code("python", "open('notes.txt', 'w').write('kept')"),
        ScriptedModel.code("python", "import math"),
        ScriptedModel.code("python", "print(math.sqrt(16))"),
        ScriptedModel.code("python", "print(secret, open('notes.txt').read())"),
        ScriptedModel.code("python", "final_answer(secret)")
      ]
      const id = runId("stateful-1")
      const result = yield* Agent.run({ runId: id, agent, task: "keep a secret", tools: ToolRegistry.empty }).pipe(Effect.provide(services(store, script)))
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Environment" })
      const log = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(id)).pipe(Effect.provide(store))
      assert.deepStrictEqual(observations(log), ["warming up", "(no output)", "4", "(no output)", "4.0", "42 kept", "42"])
      assert.isTrue(log.results[6]!.outcome.envReportedCompletion)
    }))

  it.live("a run interrupted in one executor continues in a new one with its variables and files", () =>
    Effect.gen(function*() {
      const dir = tempDir()
      const store = SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db"), synchronous: "NORMAL" })
      const id = runId("restored-1")
      const programs = [
        "import csv\nwith open('data.csv', 'w', newline='') as f:\n    csv.writer(f).writerows([[i, i * i] for i in range(10)])",
        "rows = [list(map(int, r)) for r in __import__('csv').reader(open('data.csv'))]\ntotal = sum(r[1] for r in rows)\ndef double(x):\n    return 2 * x",
        "print(len(rows), total, double(total))\nfinal_answer(double(total))"
      ]
      const blocked = yield* Deferred.make<void>()
      // First life: two steps, then the model call of step 2 never answers; the run is interrupted.
      const first = yield* Agent.run({ runId: id, agent, task: "sum squares", tools: ToolRegistry.empty }).pipe(
        Effect.provide(services(store, (_request, call) =>
          call.step < 2 ? ScriptedModel.code("python", programs[call.step]!) : Effect.zipRight(Deferred.succeed(blocked, undefined), Effect.never))),
        Effect.fork
      )
      yield* Deferred.await(blocked)
      yield* Fiber.interrupt(first)
      // Second life: a new executor (no session in memory) over the same store.
      const result = yield* Agent.run({ runId: id, agent, task: "sum squares", tools: ToolRegistry.empty }).pipe(
        Effect.provide(services(store, (_request, call) => ScriptedModel.code("python", programs[call.step]!)))
      )
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Environment" })
      const log = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(id)).pipe(Effect.provide(store))
      // The file object of step 0's `with open(...) as f` is the one name not saved, and the model is told.
      assert.deepStrictEqual(observations(log).slice(2), [
        "[the python interpreter was restarted with the variables saved after step 1; not restored: f (TextIOWrapper: files are not saved)]\n10 285 570\n570"
      ])
      fs.rmSync(dir, { recursive: true, force: true })
    }))

  it.live("Agent.fork at step k restores the workspace byte for byte and the variables by value as after step k-1", () =>
    Effect.gen(function*() {
      const dir = tempDir()
      const store = SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db"), synchronous: "NORMAL" })
      const parent = runId("fork-parent")
      const state = "import hashlib, os, json\nprint(json.dumps({'files': {n: hashlib.sha256(open(n, 'rb').read()).hexdigest() for n in sorted(os.listdir('.'))}, 'vars': [a, b]}))"
      const parentPrograms = [
        "a = [1, 2, 3]\nopen('one.bin', 'wb').write(bytes(range(256)) * 100)",
        "b = {'k': 'v'}\nos = __import__('os')\nos.makedirs('sub', exist_ok=True)\nopen('sub/two.txt', 'w').write('two')",
        state.replace("sorted(os.listdir('.'))", "['one.bin', 'sub/two.txt']"),
        "a.append(4)\nb['k'] = 'changed'\nopen('one.bin', 'wb').write(b'overwritten')\nos.remove('sub/two.txt')",
        "final_answer(a)"
      ]
      yield* Agent.run({ runId: parent, agent, task: "fork me", tools: ToolRegistry.empty }).pipe(
        Effect.provide(services(store, (_request, call) => ScriptedModel.code("python", parentPrograms[call.step]!)))
      )
      const parentLog = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(parent)).pipe(Effect.provide(store))
      const atStep2 = parentLog.results[2]!.outcome.observation
      // The fork at step 3 sees the state after step 2 (before the parent changed it in step 3).
      const child = runId("fork-child")
      yield* Agent.fork({ from: parent, atStep: 3, runId: child }).pipe(Effect.provide(store))
      const childPrograms = [state.replace("sorted(os.listdir('.'))", "['one.bin', 'sub/two.txt']"), "final_answer(a)"]
      yield* Agent.run({ runId: child, agent, task: "fork me", tools: ToolRegistry.empty }).pipe(
        Effect.provide(services(store, (_request, call) => ScriptedModel.code("python", childPrograms[call.step - 3]!)))
      )
      const childLog = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(child)).pipe(Effect.provide(store))
      const forked = childLog.results.filter((r) => r.step >= 3).map((r) => r.outcome.observation)
      assert.strictEqual(forked[0], atStep2)
      assert.strictEqual(forked[1], "[1, 2, 3]")
      assert.include(atStep2, `"vars": [[1, 2, 3], {"k": "v"}]`)
      // The parent itself went on from its own state.
      assert.strictEqual(parentLog.results[4]!.outcome.observation, "[1, 2, 3, 4]")
      fs.rmSync(dir, { recursive: true, force: true })
    }))

  it.live("names that cannot be saved are told to the model after a restore; the rest comes back", () =>
    Effect.gen(function*() {
      const store = RunLogStore.inMemory()
      const id = runId("lost-names")
      const blocked = yield* Deferred.make<void>()
      const first = yield* Agent.run({ runId: id, agent, task: "lose a generator", tools: ToolRegistry.empty }).pipe(
        Effect.provide(services(store, (_request, call) =>
          call.step === 0
            ? ScriptedModel.code("python", "kept = 'yes'\ngen = (i for i in range(3))")
            : Effect.zipRight(Deferred.succeed(blocked, undefined), Effect.never))),
        Effect.fork
      )
      yield* Deferred.await(blocked)
      yield* Fiber.interrupt(first)
      let seen = ""
      yield* Agent.run({ runId: id, agent, task: "lose a generator", tools: ToolRegistry.empty }).pipe(
        Effect.provide(services(store, (request, call) => {
          if (call.step === 2) seen = lastUser(request)
          return ScriptedModel.code("python", call.step === 1 ? "print(kept, 'gen' in globals())" : "final_answer(kept)")
        }))
      )
      const log = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(id)).pipe(Effect.provide(store))
      const observation = log.results[1]!.outcome.observation
      assert.include(observation, "not restored: gen (generator")
      assert.include(observation, "yes False")
      assert.include(seen, "not restored: gen")
    }))

  it.live("interrupting an action kills its process tree; the next action starts from the last snapshot", () =>
    Effect.gen(function*() {
      const dir = tempDir()
      const layer = Sandbox.layer({ ...testOptions, root: dir }).pipe(Layer.provideMerge(RunLogStore.layerMemory))
      yield* Effect.gen(function*() {
        yield* run("interrupted", 0, "before = 1")
        const sleepers = () =>
          fs.readdirSync("/proc").filter((pid) => {
            try {
              return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8") === "sleep\u0000300\u0000"
            } catch {
              return false
            }
          })
        const fiber = yield* Effect.fork(run("interrupted", 1, "import subprocess\nsubprocess.Popen(['sleep', '300'])\nafter = 2\nimport time\ntime.sleep(300)"))
        // Wait until the action's child process is running.
        yield* Effect.gen(function*() {
          while (sleepers().length === 0) yield* Effect.sleep("50 millis")
        }).pipe(Effect.timeout("20 seconds"))
        const exit = yield* Fiber.interrupt(fiber)
        assert.isTrue(Exit.isInterrupted(exit))
        assert.deepStrictEqual(sleepers(), [], "the action's child process is gone")
        const next = yield* run("interrupted", 2, "print(before, 'after' in globals())")
        assert.strictEqual(next.observation, "1 False")
      }).pipe(Effect.provide(layer))
      fs.rmSync(dir, { recursive: true, force: true })
    }))

  it.live("JavaScript: globals persist across steps and come back after a restart; functions are named as not restored", () =>
    Effect.gen(function*() {
      // A CPU allowance above the wall time: this loop is stopped by the wall-time limit.
      const layer = Sandbox.layer({ ...testOptions, cpuTime: "60 seconds" }).pipe(Layer.provideMerge(RunLogStore.layerMemory))
      yield* Effect.gen(function*() {
        const first = yield* run("js-state", 0, "var counts = new Map([['a', 1]]); globalThis.total = 41; function twice(x) { return 2 * x }", "javascript")
        assert.strictEqual(first.status, "Executed")
        const second = yield* run("js-state", 1, "console.log(twice(total + counts.get('a')))", "javascript")
        assert.strictEqual(second.observation, "84")
        // An endless loop: killed at the wall-time limit; the next action restarts from the snapshot.
        const killed = yield* run("js-state", 2, "while (true) {}", "javascript")
        assert.include(killed.observation, "killed after 4 s (wall-time limit)")
        const restored = yield* run("js-state", 3, "console.log(total, counts.get('a'), typeof twice)", "javascript")
        assert.include(restored.observation, "not restored: twice (function")
        assert.include(restored.observation, "41 1 undefined")
      }).pipe(Effect.provide(layer))
    }))

  it.live("a busy loop over its CPU allowance (below the wall time) is killed at the CPU limit, in JavaScript and Python; the run goes on from the last snapshot", () =>
    Effect.gen(function*() {
      // The wall time is far above the CPU allowance: only the CPU limit can stop these loops.
      const layer = Sandbox.layer({ ...testOptions, wallTime: "120 seconds", cpuTime: "1 second" }).pipe(Layer.provideMerge(RunLogStore.layerMemory))
      yield* Effect.gen(function*() {
        for (const [language, set, loop, read] of [
          ["javascript", "var kept = 41", "while (true) {}", "console.log(kept + 1)"],
          ["python", "kept = 41", "while True:\n    pass", "print(kept + 1)"]
        ] as const) {
          const id = `cpu-${language}`
          assert.strictEqual((yield* run(id, 0, set, language)).status, "Executed")
          // An action that spends CPU time under its allowance is not stopped: the allowance is per action.
          const busy = language === "javascript"
            ? "var until = Date.now() + 600; while (Date.now() < until) {} console.log('done')"
            : "import time\nuntil = time.time() + 0.6\nwhile time.time() < until:\n    pass\nprint('done')"
          assert.strictEqual((yield* run(id, 1, busy, language)).observation, "done")
          // Python code may lift its own soft limit: the host sets it again before the next action.
          const lift = language === "python" ? "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n" : ""
          assert.strictEqual((yield* run(id, 2, lift + busy, language)).observation, "done")
          const killed = yield* run(id, 3, loop, language)
          assert.strictEqual(killed.status, "Executed")
          assert.strictEqual(killed.observation, `killed: CPU time limit of 1 s exceeded; the interpreter was restarted with the variables saved after step 2`)
          const next = yield* run(id, 4, read, language)
          assert.strictEqual(next.status, "Executed")
          assert.strictEqual(next.observation, "42", `${language}: ${next.observation}`)
        }
      }).pipe(Effect.provide(layer))
    }))

  it.live("JavaScript: top-level let and const (destructuring included) come back after a restart as let and const; classes, functions and names never initialized are named as lost", () =>
    Effect.gen(function*() {
      const store = RunLogStore.inMemory()
      const id = "js-lexical"
      // First life: the bindings are made; the executor (its interpreter and workspace) then goes away.
      yield* Effect.gen(function*() {
        const first = yield* run(id, 0, "let x = 1; const c = { a: [1, 2] }; let { p, q: [r] } = { p: 'P', q: ['R'] }; class K {}; const f = () => 1; console.log(x + c.a[1])", "javascript")
        assert.strictEqual(first.observation, "3")
        const second = yield* run(id, 1, "x = x + 1; let late = (() => { throw new Error('before late') })()", "javascript")
        assert.include(second.observation, "Error: before late")
      }).pipe(Effect.provide(Sandbox.layer(testOptions).pipe(Layer.provideMerge(store))))
      // Second life: a new executor over the same store (another process's view) reads them.
      yield* Effect.gen(function*() {
        const read = yield* run(id, 2, "console.log(x, c.a[1], p, r, typeof K, typeof f)", "javascript")
        assert.strictEqual(
          read.observation,
          "[the javascript interpreter was restarted with the variables saved after step 1; not restored: K (class: cannot be serialized), f (function: cannot be serialized), late (let: never initialized)]\n2 2 P R undefined undefined"
        )
        // Still lexical: a const stays constant, a let is assignable, neither is a global property.
        const kinds = yield* run(id, 3, "x = x + 1; console.log(x, 'x' in globalThis, 'c' in globalThis); c = 5", "javascript")
        assert.strictEqual(kinds.observation, "3 false false\nTypeError: Assignment to constant variable.\nat <step 3>:1:68")
      }).pipe(Effect.provide(Sandbox.layer(testOptions).pipe(Layer.provideMerge(store))))
    }))

  it.live("the CPU limit costs no process per trivial action: prlimit --pid runs only when the limit must move", () =>
    Effect.gen(function*() {
      // prlimit behind a wrapper that records its arguments (isolation "none": the wrapper runs on the host).
      const dir = tempDir()
      const calls = path.join(dir, "calls.txt")
      const wrapper = path.join(dir, "prlimit")
      fs.writeFileSync(wrapper, `#!/bin/sh\necho "$*" >> ${calls}\nexec /usr/bin/prlimit "$@"\n`, { mode: 0o755 })
      const pidCalls = () => (fs.existsSync(calls) ? fs.readFileSync(calls, "utf8").split("\n").filter((l) => l.startsWith("--pid")).length : 0)
      const layer = Sandbox.layer({ ...testOptions, isolation: "none", languages: ["python"], prlimit: wrapper, cpuTime: "5 seconds" }).pipe(Layer.provideMerge(RunLogStore.layerMemory))
      yield* Effect.gen(function*() {
        const atStart = pidCalls()
        for (let step = 0; step < 20; step++) assert.strictEqual((yield* run("cpu-cost", step, `x = ${step}`)).status, "Executed")
        // The first action sets the limit; twenty trivial actions use far less than a second of CPU
        // time together, so the limit (whole seconds) moves at most once more.
        const used = pidCalls() - atStart
        assert.isAtLeast(used, 1)
        assert.isAtMost(used, 2)
      }).pipe(Effect.provide(layer))
      fs.rmSync(dir, { recursive: true, force: true })
    }))

  it.live("JavaScript: a snapshot in the shape written before lexical bindings were saved (no `lexical` field) is still restored", () =>
    Effect.gen(function*() {
      // Written here in the previous driver's shape ({ values, order }: each global property's
      // v8.serialize, base64) — what every JavaScript snapshot stored before amendment 2 holds.
      const store = RunLogStore.inMemory()
      const id = "js-old-state"
      const state = Buffer.from(JSON.stringify({ values: { kept: v8.serialize({ n: 41 }).toString("base64") }, order: ["kept"] }), "utf8")
      const manifest: Sandbox.Manifest = {
        version: 1,
        runId: id,
        step: 0,
        entries: [],
        skipped: [],
        states: { javascript: { hash: Blobs.hashOf(state), saved: ["kept"], unsaved: [], pickler: "v8.serialize" } }
      }
      const manifestBytes = Buffer.from(JSON.stringify(manifest), "utf8")
      yield* Effect.gen(function*() {
        const blobs = (yield* RunLogStore.RunLogStore).blobs!
        yield* blobs.putAll([state, manifestBytes])
        yield* blobs.setRef(id, Sandbox.refName(0), Blobs.hashOf(manifestBytes))
      }).pipe(Effect.provide(store))
      const read = yield* run(id, 1, "console.log(kept.n + 1)", "javascript").pipe(Effect.provide(Sandbox.layer(testOptions).pipe(Layer.provideMerge(store))))
      assert.strictEqual(read.observation, "42")
    }))
})
