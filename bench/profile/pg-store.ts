/**
 * The PostgreSQL store alone in one process (issue 35): `--runs` runs (default 300) of 5 steps,
 * 16 at once, on a private server (`test/support/pg-server.ts`); runs per second and the CPU per
 * step of this process and of the server. Run under `--cpu-prof` to see where this process's
 * CPU goes.
 *   node --conditions=@polyloop/source --import tsx bench/profile/pg-store.ts [--runs 300]
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as Cpu from "../lib/cpu.js"
import * as F from "../lib/fixtures.js"
import { option } from "../lib/measure.js"
import * as PgCount from "../lib/pgCount.js"

const RUNS = Number(option("--runs") ?? 300)
const STEPS = 5
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

interface PgServerModule {
  readonly start: (options?: { readonly database?: string }) => Promise<{ readonly url: string; readonly dataDir: string; readonly stop: () => void }>
}

const main = async () => {
  // `--count`: the statements sent, by text, per run (design 0350).
  const counter = process.argv.includes("--count") ? PgCount.install() : undefined
  const PgServer = (await import(pathToFileURL(path.join(repoRoot, "test", "support", "pg-server.ts")).href)) as PgServerModule
  const server = await PgServer.start({ database: "profile" })
  const postmaster = Cpu.postmasterPid(server.dataDir)
  try {
    for (let rep = 0; rep < 3; rep++) {
      await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
        const store = yield* Layer.build(SqlRunLogStore.layerPg({ url: Redacted.make(server.url), maxConnections: 20 })).pipe(
          Effect.map((context) => Context.get(context, RunLogStore.RunLogStore))
        )
        const model = F.model(F.replies(STEPS))
        const c0 = process.cpuUsage()
        const pg0 = Cpu.treeCpuMs(postmaster)
        const t0 = performance.now()
        yield* Effect.forEach(Array.from({ length: RUNS }, (_, i) => `r${rep}-${i}`), (id) => F.runOn(store, model, F.request(id, STEPS)), { concurrency: 16, discard: true })
        const seconds = (performance.now() - t0) / 1000
        const c = process.cpuUsage(c0)
        const steps = RUNS * STEPS
        process.stdout.write(`runs/s ${(RUNS / seconds).toFixed(1)}  process ms/step ${((c.user + c.system) / 1000 / steps).toFixed(2)}  postgres ms/step ${((Cpu.treeCpuMs(postmaster) - pg0) / steps).toFixed(2)}\n`)
        if (counter !== undefined) {
          process.stdout.write(`statements so far: ${counter.total()} (${(counter.total() / (RUNS * (rep + 1))).toFixed(1)} a run)\n`)
          if (rep === 2) for (const [text, n] of counter.counts().slice(0, 12)) process.stdout.write(`  ${String(n).padStart(6)}  ${text}\n`)
        }
      })))
    }
  } finally {
    server.stop()
  }
}
main().catch((e) => {
  process.stderr.write(`${String(e)}\n`)
  process.exit(1)
})
