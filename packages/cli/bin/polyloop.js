#!/usr/bin/env node
// The `polyloop` command. It registers tsx's TypeScript loader in this very process and imports
// the TypeScript entry point, so the command works on a fresh clone without a build step, and the
// agent runs in the process the user started: a SIGKILL of the command kills the agent with it,
// and `polyloop demo --crash-at N` kills the process that is running the agent.
import { register } from "tsx/esm/api"

register()
await import("../src/bin.ts")
