import { defaultServerConditions } from "vite"
import { defineConfig } from "vitest/config"

// The tests run on the packages' TypeScript source, not their built `dist/` (design 0210): the
// `@polyloop/source` export condition, for the test files themselves and — through
// NODE_OPTIONS with tsx's loader — for every Node process a test starts (the CLI's launcher,
// crashing agents, killed writers, examples).
const sourceCondition = "@polyloop/source"
const tsxLoader = import.meta.resolve("tsx")
const childNodeOptions = [process.env.NODE_OPTIONS, `--conditions=${sourceCondition}`, `--import=${tsxLoader}`]
  .filter((option) => option !== undefined && option !== "")
  .join(" ")

export default defineConfig({
  resolve: { conditions: [sourceCondition, ...defaultServerConditions] },
  ssr: { resolve: { conditions: [sourceCondition, ...defaultServerConditions] } },
  test: {
    include: [
      "packages/*/test/**/*.test.ts",
      "examples/**/*.test.ts",
      "test/**/*.test.ts",
      "bench/**/*.test.ts"
    ],
    exclude: ["**/node_modules/**", "**/build/**", "**/dist/**"],
    env: { NODE_OPTIONS: childNodeOptions },
    setupFiles: ["./vitest.setup.ts"],
    // A private PostgreSQL server for the PostgreSQL tests (installed and started if needed,
    // stopped after the run); tests find it in process.env.POLYLOOP_TEST_PG_URL.
    // And the code sandbox's Debian packages (bubblewrap, python3-dill), when missing.
    globalSetup: ["./test/support/tools-global-setup.ts", "./test/support/pg-global-setup.ts"],
    // Generous: CI shares 2 cores between two test files that both start processes.
    testTimeout: 180_000,
    hookTimeout: 120_000,
    // Tests share one machine with 2 cores; suites that spawn processes or touch one database
    // guard themselves (describe.sequential); files run in parallel up to the pool size.
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } }
  }
})
