/**
 * Vitest `globalSetup`: starts the private PostgreSQL server of `pg-server.ts` once per test
 * run and tells the tests where it is:
 *
 * - `process.env.POLYLOOP_TEST_PG_URL` (inherited by the test workers and by the processes they
 *   spawn) and `inject("polyloopPgUrl")`;
 * - if the server could not be installed or started, `process.env.POLYLOOP_TEST_PG_ERROR` and
 *   `inject("polyloopPgError")` carry the reason instead, and every PostgreSQL test fails with it
 *   (the other tests run normally). Nothing is skipped silently.
 *
 * With `POLYLOOP_TEST_PG_URL` already set by the caller, that server is used and none is started.
 * Teardown stops the server and removes its temporary data directory.
 */
import type { TestProject } from "vitest/node"
import * as PgServer from "./pg-server.js"

declare module "vitest" {
  export interface ProvidedContext {
    /** The connection URL of the test run's PostgreSQL database ("" if unavailable). */
    polyloopPgUrl: string
    /** Why PostgreSQL is unavailable ("" if it is available). */
    polyloopPgError: string
  }
}

export default async function setup(project: TestProject): Promise<() => void> {
  const preset = process.env["POLYLOOP_TEST_PG_URL"]
  if (preset !== undefined && preset.length > 0) {
    project.provide("polyloopPgUrl", preset)
    project.provide("polyloopPgError", "")
    return () => {}
  }
  let server: PgServer.PgServer | undefined
  try {
    server = await PgServer.start()
  } catch (error) {
    const reason = `the private PostgreSQL server for the tests could not be started: ${
      error instanceof Error ? error.message : String(error)
    }`
    process.stderr.write(`\npolyloop test setup: ${reason}\n(PostgreSQL tests will fail with this message.)\n\n`)
    process.env["POLYLOOP_TEST_PG_ERROR"] = reason
    project.provide("polyloopPgUrl", "")
    project.provide("polyloopPgError", reason)
    return () => {
      delete process.env["POLYLOOP_TEST_PG_ERROR"]
    }
  }
  const running = server
  // If vitest dies without running teardown, still stop the server on the way out.
  const onExit = () => running.stop()
  process.once("exit", onExit)
  process.env["POLYLOOP_TEST_PG_URL"] = running.url
  project.provide("polyloopPgUrl", running.url)
  project.provide("polyloopPgError", "")
  return () => {
    process.off("exit", onExit)
    delete process.env["POLYLOOP_TEST_PG_URL"]
    running.stop()
  }
}
