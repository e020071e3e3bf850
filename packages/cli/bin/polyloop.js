#!/usr/bin/env node
// The `polyloop` command. It imports the package's own `bin` module by name: plain `node` gets
// the compiled `dist/bin.js`; the monorepo's tests, which run under the `@polyloop/source`
// condition with tsx's loader (design 0210), get `src/bin.ts`. The agent runs in the process the
// user started: a SIGKILL of the command kills the agent with it, and
// `polyloop demo --crash-at N` kills the process that is running the agent.
await import("@polyloop/cli/bin")
