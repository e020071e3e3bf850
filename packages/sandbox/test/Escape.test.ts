/**
 * The escape suite (design 0330): code that tries to get out of the sandbox or to hurt the host
 * — reading /etc/shadow, the run store's file and another run's workspace; writing outside its
 * workspace; connecting to a TCP server this test started on 127.0.0.1; a fork bomb; allocating
 * until stopped; printing 1 GB; looping forever; signalling its parent and the host — is each
 * contained: the outcome is `Executed` with an observation saying what happened, the run goes on
 * (the next action answers), and the host is unchanged (checked after each).
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import type * as ActionOutcome from "@polyloop/core/ActionOutcome"
import type { ActionExecutor } from "@polyloop/core/ActionExecutor"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { ensureTools, run, testOptions } from "./support.js"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-escape-"))
// The sandbox runs as nobody when the tests run as root: its root must be reachable.
fs.chmodSync(dir, 0o711)
const storeFile = path.join(dir, "runs.db")
const root = path.join(dir, "sessions")
const hostMarker = path.join(os.tmpdir(), `polyloop-escape-marker-${process.pid}`)
/** A host file the code knows the path of (but cannot see); it must stay as it is. */
const victimFile = path.join(dir, "victim.txt")
fs.writeFileSync(victimFile, "unchanged")

let connections = 0
const server = net.createServer((socket) => {
  connections++
  socket.destroy()
})

const layer = Sandbox.layer({ ...testOptions, root, wallTime: "10 seconds", cpuTime: "3 seconds" }).pipe(
  Layer.provideMerge(SqlRunLogStore.layerSqlite({ filename: storeFile, synchronous: "NORMAL" }))
)
let runtime: ManagedRuntime.ManagedRuntime<ActionExecutor, unknown>
let port = 0

const fileHash = (file: string): string => {
  try {
    return createHash("sha256").update(fs.readFileSync(file)).digest("hex")
  } catch (error) {
    return `unreadable: ${String(error)}`
  }
}

/** What must not change on the host. */
const hostState = () => ({
  shadow: fileHash("/etc/shadow"),
  passwd: fileHash("/etc/passwd"),
  marker: fs.existsSync(hostMarker),
  usrEvil: fs.existsSync("/usr/polyloop-evil"),
  victim: fs.readFileSync(victimFile, "utf8"),
  connections,
  alive: process.kill(process.pid, 0)
})
let before: ReturnType<typeof hostState>

const exec = (runId: string, step: number, code: string, language: string = "python"): Promise<ActionOutcome.ActionOutcome> =>
  runtime.runPromise(run(runId, step, code, language))

let step = 0
/** Runs the attack as the next step of run `intruder`, checks it was contained, that the run goes on, and that the host is unchanged. */
const contained = async (code: string, expect: (outcome: ActionOutcome.ActionOutcome) => void, language: string = "python") => {
  const outcome = await exec("intruder", step++, code, language)
  assert.strictEqual(outcome.status, "Executed", outcome.observation)
  assert.isFalse(outcome.observationIsSynthetic)
  expect(outcome)
  if (!code.includes(dir)) assert.notInclude(outcome.observation, dir, "no host path in the observation")
  const next = await exec("intruder", step++, language === "python" ? "print(1 + 1)" : "console.log(1 + 1)", language)
  assert.strictEqual(next.status, "Executed")
  assert.include(next.observation, "2", "the run goes on")
  assert.deepStrictEqual(hostState(), before, "the host is unchanged")
}

beforeAll(async () => {
  ensureTools()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  port = (server.address() as net.AddressInfo).port
  runtime = ManagedRuntime.make(layer)
  await runtime.runPromise(Effect.void)
  before = hostState()
}, 120_000)

/** Host processes of this test's sandboxes: bwrap (its arguments name the sessions' root) and what runs inside. */
/**
 * The processes of this suite's sandboxes: those whose command line names its sessions' root
 * (bwrap, binding the session's directories) and every process under them (the interpreters, what
 * they forked). Not every process running a driver: other test files' sandboxes may be running.
 */
const sandboxProcesses = (): Array<string> => {
  const parent = new Map<string, string>()
  const roots = new Set<string>()
  for (const pid of fs.readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
      parent.set(pid, stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]!)
      if (fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(root)) roots.add(pid)
    } catch {
      // gone meanwhile
    }
  }
  const under = (pid: string): boolean => {
    for (let at: string | undefined = pid, depth = 0; at !== undefined && at !== "0" && depth < 64; at = parent.get(at), depth++) {
      if (roots.has(at)) return true
    }
    return false
  }
  return [...parent.keys()].filter(under)
}

afterAll(async () => {
  await runtime.dispose()
  server.close()
  fs.rmSync(dir, { recursive: true, force: true })
})

describe.sequential("the escape suite", () => {
  it("reading /etc/shadow: there is no /etc in the sandbox", async () => {
    await contained("print(open('/etc/shadow').read())", (o) => assert.include(o.observation, "FileNotFoundError"))
  })

  it("reading the run store's file: not in the sandbox", async () => {
    await contained(`open(${JSON.stringify(storeFile)}, 'rb').read(16)`, (o) => {
      assert.include(o.observation, "FileNotFoundError")
      assert.notInclude(o.observation, "SQLite format")
    })
  })

  it("reading another run's workspace: neither its host path nor a neighbour is visible", async () => {
    const victim = await exec("victim", 0, "open('secret.txt', 'w').write('the victim run secret')")
    assert.strictEqual(victim.status, "Executed")
    const found = fs.readdirSync(root).flatMap((top) =>
      fs.readdirSync(path.join(root, top)).map((s) => path.join(root, top, s, "workspace", "secret.txt"))
    ).filter((p) => fs.existsSync(p))
    assert.strictEqual(found.length, 1, "the victim's secret is in its own workspace on the host")
    await contained(
      `import os\nprint(sorted(os.listdir('/workspace')), sorted(os.listdir('/')))\nprint(open(${JSON.stringify(found[0])}).read())`,
      (o) => {
        assert.include(o.observation, "FileNotFoundError")
        assert.notInclude(o.observation, "the victim run secret")
        assert.isTrue(o.observation.startsWith("[] ["), "the intruder's workspace is empty")
      }
    )
  })

  it("writing outside the workspace: the system is read-only, /tmp is private", async () => {
    await contained(
      `try:\n    open('/usr/polyloop-evil', 'w')\nexcept OSError as e:\n    print(type(e).__name__, e.errno)\nopen(${JSON.stringify(hostMarker)}, 'w').write('x')\nopen('/tmp/x', 'w').write('private')\nopen('/.polyloop/driver/python.py', 'a')`,
      (o) => {
        assert.include(o.observation, "OSError 30")
        assert.match(o.observation, /FileNotFoundError|OSError/)
      }
    )
  })

  it("connecting to a TCP server of the host on 127.0.0.1: the sandbox has its own network", async () => {
    await contained(
      `import socket\ns = socket.create_connection(('127.0.0.1', ${port}), timeout=3)`,
      (o) => assert.match(o.observation, /ConnectionRefusedError|OSError|timed out/)
    )
    assert.strictEqual(connections, 0)
  })

  it("a fork bomb: stopped by the process limit", async () => {
    await contained("import os\nwhile True:\n    os.fork()", (o) => assert.match(o.observation, /BlockingIOError|killed/))
  })

  it("allocating until stopped: out of memory, in Python and in JavaScript", async () => {
    await contained(
      "def hog():\n    chunks = []\n    while True:\n        chunks.append(bytearray(64 * 1024 * 1024))\nhog()",
      (o) => assert.include(o.observation, "out of memory")
    )
    await contained(
      "const hog = []; while (true) hog.push(new Array(1e7).fill(1.5))",
      (o) => assert.include(o.observation, "out of memory"),
      "javascript"
    )
  })

  it("printing 1 GB: the observation is cut and the rest counted", async () => {
    await contained("import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)", (o) => {
      assert.isAtMost(o.observation.length, testOptions.outputLimit! + 200)
      if (o.observation.includes("killed")) assert.isAbove(o.observationTruncatedChars, 0)
      else assert.strictEqual(o.observationTruncatedChars, 1024 * 1024 * 1024 - testOptions.outputLimit!)
    })
  })

  it("looping forever: killed at the CPU or wall-time limit, in Python and in JavaScript", async () => {
    await contained("while True:\n    pass", (o) => assert.match(o.observation, /killed: CPU time limit of 3 s exceeded|killed after 10 s/))
    await contained("while (true) {}", (o) => assert.match(o.observation, /killed: CPU time limit of 3 s exceeded|killed after 10 s/), "javascript")
  })

  it("planting links and FIFOs for the host: a link to a host file in the state directory, then a kill; a FIFO in the workspace", async () => {
    await contained(
      `import os\ntarget = '/.polyloop/state/python.state'\nif os.path.lexists(target):\n    os.remove(target)\nos.symlink(${JSON.stringify(victimFile)}, target)\nos.symlink(${JSON.stringify(victimFile)}, 'link-to-host')\nwhile True:\n    pass`,
      (o) => assert.match(o.observation, /killed/)
    )
    await contained("import os\nos.mkfifo('pipe')\nprint('made')", (o) => assert.include(o.observation, "made"))
  })

  it("signalling its parent and the host: nothing outside the sandbox can be reached", async () => {
    await contained(
      `import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(${process.pid}, signal.SIGKILL)`,
      (o) => assert.include(o.observation, "ProcessLookupError")
    )
  })

  it("releasing the executor kills every process of the sandboxes (the fork bomb's included)", async () => {
    // Each process by pid and start time (a pid may be reused): none may outlive the release,
    // even one that left the tree (reparented when its bwrap died).
    const statOf = (pid: string): { readonly start: string; readonly state: string; readonly name: string } | undefined => {
      try {
        const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
        const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
        return { start: fields[19]!, state: fields[0]!, name: stat.slice(0, stat.lastIndexOf(")") + 1) }
      } catch {
        return undefined
      }
    }
    // A zombie is dead (a killed bwrap its parent, this process, has not reaped yet).
    const startOf = (pid: string) => {
      const stat = statOf(pid)
      return stat === undefined || stat.state === "Z" || stat.state === "X" ? undefined : stat.start
    }
    const before = sandboxProcesses().map((pid) => [pid, startOf(pid)] as const)
    assert.isAbove(before.length, 0, "the sessions' interpreters are running")
    await runtime.dispose()
    assert.deepStrictEqual(sandboxProcesses(), [])
    assert.deepStrictEqual(before.filter(([pid, start]) => start !== undefined && startOf(pid) === start).map(([pid]) => JSON.stringify(statOf(pid))), [], "a process of the sandboxes outlived the release")
  })
})
