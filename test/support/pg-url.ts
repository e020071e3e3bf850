/**
 * Where the tests find the private PostgreSQL server started by `pg-global-setup.ts`.
 */

/**
 * The connection URL of the test run's PostgreSQL database. Throws, with the reason the server
 * could not be started, when it is unavailable: a PostgreSQL test never skips silently.
 */
export const testPgUrl = (): string => {
  const url = process.env["POLYLOOP_TEST_PG_URL"]
  if (url !== undefined && url.length > 0) return url
  const reason = process.env["POLYLOOP_TEST_PG_ERROR"]
  throw new Error(
    reason !== undefined && reason.length > 0
      ? reason
      : "POLYLOOP_TEST_PG_URL is not set: run the tests through vitest with the root vitest.config.ts " +
          "(its globalSetup test/support/pg-global-setup.ts starts a private PostgreSQL server)"
  )
}
