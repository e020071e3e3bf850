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

const out = (text) => fs.writeSync(1, text)
const reply = (message) => fs.writeSync(2, JSON.stringify(message) + "\n")

class FinalAnswer {
  constructor(value) { this.value = value }
}
const sandboxConsole = new Console({ stdout: process.stdout, stderr: process.stdout })
const context = vm.createContext({
  console: sandboxConsole,
  final_answer: (value) => { throw new FinalAnswer(value) },
  setTimeout, clearTimeout, setInterval, clearInterval, queueMicrotask,
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
      result.final = typeof error.value === "string" ? error.value : util.inspect(error.value)
    } else {
      const message = error !== null && typeof error === "object" && "message" in error ? String(error.message) : String(error)
      result.error = { type: errorName(error), message, traceback: userStack(error, errorName(error), message) }
    }
  }
  return result
}

const save = (path) => {
  const values = {}
  const saved = []
  const unsaved = []
  for (const name of Object.getOwnPropertyNames(context)) {
    if (baseNames.has(name)) continue
    const value = context[name]
    try {
      if (typeof value === "function") throw new Error("function")
      values[name] = v8.serialize(value).toString("base64")
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
      lexicalValues[name] = { kind, value: v8.serialize(value).toString("base64") }
      saved.push(name)
    } catch (error) {
      unsaved.push({ name, reason: `${kind === "class" ? "class" : typeof value}: cannot be serialized` })
    }
  }
  fs.writeFileSync(path + ".tmp", JSON.stringify({ values, order: Object.keys(values), lexical: lexicalValues }))
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

const main = async () => {
  reply({ ready: true, node: process.version, pickler: "v8.serialize" })
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  for await (const line of lines) {
    const request = JSON.parse(line)
    let message
    if (request.op === "exec") {
      for (const { name, kind } of request.lexical ?? []) if (!lexical.has(name)) lexical.set(name, kind)
      message = await run(request.code, request.name ?? "code")
      out(request.boundary)
    } else {
      try {
        message = request.op === "save" ? save(request.path) : load(request.path)
      } catch (error) {
        message = { failed: `${errorName(error)}: ${error instanceof Error ? error.message : String(error)}` }
      }
    }
    message.id = request.id
    reply(message)
  }
}
main()
