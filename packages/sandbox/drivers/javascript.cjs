// The JavaScript driver of @polyloop/sandbox (design 0330). Runs inside the sandbox under node;
// keeps one `vm` context and runs each action in it. Requests are JSON lines on standard input,
// replies JSON lines on standard error; the code's console writes to standard output, which the
// host reads, ended after each action by a boundary token.
"use strict"
const fs = require("node:fs")
const readline = require("node:readline")
const util = require("node:util")
const v8 = require("node:v8")
const vm = require("node:vm")
const { Console } = require("node:console")
const { Writable } = require("node:stream")

// Every write is synchronous and whole (design 0331, decision 7): what an action prints is in the
// pipe before its boundary token. A descriptor made non-blocking (by code that reached `process`)
// is waited on.
const pause = new Int32Array(new SharedArrayBuffer(4))
const writeAll = (fd, data) => {
  const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data
  let offset = 0
  while (offset < bytes.length) {
    try {
      offset += fs.writeSync(fd, bytes, offset, bytes.length - offset)
    } catch (error) {
      if (error === null || typeof error !== "object" || error.code !== "EAGAIN") throw error
      Atomics.wait(pause, 0, 0, 1)
    }
  }
}
const out = (text) => writeAll(1, text)
const reply = (message) => writeAll(2, JSON.stringify(message) + "\n")
const MAX_TEXT = 4 * 1024 * 1024
const bounded = (text) => text.length <= MAX_TEXT ? text : `${text.slice(0, MAX_TEXT)}\n[cut: ${text.length - MAX_TEXT} more characters]`

class FinalAnswer {
  constructor(value) { this.value = value }
}
const syncOut = new Writable({
  write(chunk, _encoding, callback) {
    writeAll(1, chunk)
    callback()
  }
})
const sandboxConsole = new Console({ stdout: syncOut, stderr: syncOut })
// The timers an action starts are its own: every one still pending when it ends is cleared
// (design 0331, decision 2), as the processes it started are killed.
const timers = new Set()
const track = (start, clear) => (callback, delay, ...args) => {
  const handle = start((...given) => {
    if (start === setTimeout) timers.delete(handle)
    return callback(...given)
  }, delay, ...args)
  timers.add(handle)
  return handle
}
const untrack = (clear) => (handle) => {
  timers.delete(handle)
  clear(handle)
}
const clearTimers = () => {
  for (const handle of timers) clearTimeout(handle)
  timers.clear()
}
const context = vm.createContext({
  console: sandboxConsole,
  final_answer: (value) => { throw new FinalAnswer(value) },
  setTimeout: track(setTimeout, clearTimeout),
  clearTimeout: untrack(clearTimeout),
  setInterval: track(setInterval, clearInterval),
  clearInterval: untrack(clearInterval),
  queueMicrotask,
  TextEncoder, TextDecoder, URL, Buffer, structuredClone
})
const baseNames = new Set(Object.getOwnPropertyNames(context))
// The context's top-level let/const/class bindings (name → kind), as the host found them with a
// parser in each action (design 0330, amendment 2): lexical, so not properties of the global object.
const lexical = new Map()

// The error's type and message, then the stack's frames in the action's own code (as Python's
// traceback ends with them; node's own frames and the source excerpt it prepends are left out).
const userStack = (error, type, message) => {
  const frames = error !== null && typeof error === "object" && typeof error.stack === "string"
    ? error.stack.split("\n").map((l) => l.trim()).filter((line) => line.startsWith("at ") && (line.includes("<step") || line.includes("<code>")))
    : []
  return [`${type}: ${message}`, ...frames].join("\n")
}

const errorName = (error) => error !== null && typeof error === "object" && typeof error.name === "string" ? error.name : typeof error

const run = async (code, name) => {
  const result = { error: null, final: null, exit: null }
  try {
    let value = vm.runInContext(code, context, { filename: `<${name}>` })
    if (value !== null && typeof value === "object" && typeof value.then === "function") value = await value
    if (value !== undefined) out(util.inspect(value) + "\n")
  } catch (error) {
    if (error instanceof FinalAnswer) {
      result.final = bounded(typeof error.value === "string" ? error.value : util.inspect(error.value))
    } else {
      const message = error !== null && typeof error === "object" && "message" in error ? String(error.message) : String(error)
      result.error = { type: errorName(error), message: bounded(message), traceback: bounded(userStack(error, errorName(error), message)) }
    }
  }
  return result
}

// A value that would take the state file past `limit` (the sandbox's largest file) is listed as
// not saved (design 0331, decision 4); 64 KiB are kept for the file's own framing.
const save = (path, limit) => {
  const values = {}
  const saved = []
  const unsaved = []
  let budget = typeof limit === "number" ? Math.max(0, limit - 64 * 1024) : Infinity
  const fits = (name, encoded) => {
    const cost = encoded.length + name.length + 64
    if (cost > budget) return false
    budget -= cost
    return true
  }
  for (const name of Object.getOwnPropertyNames(context)) {
    if (baseNames.has(name)) continue
    const value = context[name]
    try {
      if (typeof value === "function") throw new Error("function")
      const encoded = v8.serialize(value).toString("base64")
      if (!fits(name, encoded)) {
        unsaved.push({ name, reason: `${typeof value}: larger than ${limit} bytes` })
        continue
      }
      values[name] = encoded
      saved.push(name)
    } catch (error) {
      unsaved.push({ name, reason: `${typeof value}: cannot be serialized` })
    }
  }
  const lexicalValues = {}
  for (const [name, kind] of lexical) {
    let value
    try {
      // The name is an identifier the parser found: reading it runs no code of the action's.
      value = vm.runInContext(name, context)
    } catch (error) {
      // Declared but never initialized (its declaration threw): even `typeof` throws on it. Else it
      // was never declared (the action that named it did not get to run): nothing to save.
      let declared = false
      try {
        vm.runInContext(`typeof ${name}`, context)
      } catch {
        declared = true
      }
      if (declared) unsaved.push({ name, reason: `${kind}: never initialized` })
      else lexical.delete(name)
      continue
    }
    try {
      if (typeof value === "function") throw new Error("function")
      const encoded = v8.serialize(value).toString("base64")
      if (!fits(name, encoded)) {
        unsaved.push({ name, reason: `${kind}: larger than ${limit} bytes` })
        continue
      }
      lexicalValues[name] = { kind, value: encoded }
      saved.push(name)
    } catch (error) {
      unsaved.push({ name, reason: `${kind === "class" ? "class" : typeof value}: cannot be serialized` })
    }
  }
  try {
    fs.writeFileSync(path + ".tmp", JSON.stringify({ values, order: Object.keys(values), lexical: lexicalValues }))
  } catch (error) {
    // Still not writable (no space left, say): no values, every name listed.
    const reason = `not saved: ${error !== null && typeof error === "object" && typeof error.code === "string" ? error.code : errorName(error)}`
    for (const name of saved) unsaved.push({ name, reason })
    saved.length = 0
    fs.writeFileSync(path + ".tmp", JSON.stringify({ values: {}, order: [], lexical: {} }))
  }
  fs.renameSync(path + ".tmp", path)
  return { saved, unsaved, pickler: "v8.serialize" }
}

const load = (path) => {
  const state = JSON.parse(fs.readFileSync(path, "utf8"))
  const restored = []
  const lost = []
  for (const name of state.order) {
    try {
      context[name] = v8.deserialize(Buffer.from(state.values[name], "base64"))
      restored.push(name)
    } catch (error) {
      lost.push({ name, reason: errorName(error) })
    }
  }
  // Lexical bindings are declared again with their kind, one script each (a const stays constant).
  for (const [name, { kind, value }] of Object.entries(state.lexical ?? {})) {
    try {
      Object.defineProperty(context, "__polyloopRestored", { value: v8.deserialize(Buffer.from(value, "base64")), configurable: true })
      vm.runInContext(`${kind} ${name} = __polyloopRestored`, context)
      lexical.set(name, kind)
      restored.push(name)
    } catch (error) {
      lost.push({ name, reason: errorName(error) })
    } finally {
      delete context.__polyloopRestored
    }
  }
  return { restored, lost }
}

// The processes of the sandbox's pid namespace but its init and this interpreter, not yet exited.
const others = () => {
  const found = []
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || name === "1" || Number(name) === process.pid) continue
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, "latin1")
      const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0]
      if (state !== "Z" && state !== "X") found.push(Number(name))
    } catch {
      // gone meanwhile
    }
  }
  return found
}

// Kills every process an action left (code that reached `process` can start some): in the
// sandbox's own pid namespace kill(-1) reaches exactly those but init and the caller (design 0331).
const reap = () => {
  for (let round = 0; round < 256 && others().length > 0; round++) {
    try {
      process.kill(-1, "SIGKILL")
    } catch {
      // nothing left to signal
    }
    Atomics.wait(pause, 0, 0, 1)
  }
}

const main = async () => {
  reply({ ready: true, node: process.version, pickler: "v8.serialize" })
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  for await (const line of lines) {
    const request = JSON.parse(line)
    let message
    if (request.op === "exec") {
      for (const { name, kind } of request.lexical ?? []) if (!lexical.has(name)) lexical.set(name, kind)
      message = await run(request.code, request.name ?? "code")
      clearTimers()
      if (request.reap) reap()
      out(request.boundary)
    } else {
      try {
        message = request.op === "save" ? save(request.path, request.limit) : load(request.path)
      } catch (error) {
        message = { failed: `${errorName(error)}: ${error instanceof Error ? error.message : String(error)}` }
      }
    }
    message.id = request.id
    reply(message)
  }
}
main()
