import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: [
      "packages/*/test/**/*.test.ts",
      "examples/**/*.test.ts",
      "test/**/*.test.ts"
    ],
    exclude: ["**/node_modules/**", "**/build/**"],
    setupFiles: ["./vitest.setup.ts"],
    // A private PostgreSQL server for the PostgreSQL tests (installed and started if needed,
    // stopped after the run); tests find it in process.env.POLYLOOP_TEST_PG_URL.
    globalSetup: ["./test/support/pg-global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Tests share one machine with 2 cores; suites that spawn processes or touch one database
    // guard themselves (describe.sequential); files run in parallel up to the pool size.
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } }
  }
})
