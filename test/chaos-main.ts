/**
 * `npm run chaos`: the full enumerated crash suite (`support/chaos.ts`, design 0220). Every
 * crash point of every variant (scripts × stores), as many rounds (seeds) as it takes to reach
 * `CHAOS_SCENARIOS` scenarios (default 10,000), `CHAOS_CONCURRENCY` at a time on a pool of
 * warm children; prints each failure and progress, and writes the summary (scenarios, process
 * deaths, invariants checked, failures, seed, scenarios per second, …) to `chaos-summary.json`
 * (or `CHAOS_SUMMARY`). Exits 1 when any invariant failed.
 *
 *   npm run chaos                                         # the full suite
 *   CHAOS_ID='tools.sqlite.hooked.s7/p17/r4' npm run chaos # replay one scenario by its id
 *   CHAOS_SCENARIOS=1000 npm run chaos                    # fewer
 *   CHAOS_PG=0 npm run chaos                              # SQLite only
 *   CHAOS_VARIANTS=tools.sqlite,approval npm run chaos    # the variants whose ids start so
 *   CHAOS_MAX_SECONDS=3000 npm run chaos                  # stop taking scenarios after 50 minutes (the summary says so)
 *
 * PostgreSQL: the server at `POLYLOOP_TEST_PG_URL`, else a private one started here
 * (`support/pg-server.ts`, as the tests do) and stopped at the end.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Chaos from "./support/chaos.js"
import * as PgServer from "./support/pg-server.js"

const seed = Number(process.env["CHAOS_SEED"] ?? 1)
const concurrency = Number(process.env["CHAOS_CONCURRENCY"] ?? 3)
// Twice as many children as scenarios at a time, and one: a life that will be killed wants a
// fresh child and a surviving one a warm child (chaos-pool.ts), both at hand.
const poolSize = Number(process.env["CHAOS_POOL"] ?? 2 * concurrency + 1)
const summaryFile = process.env["CHAOS_SUMMARY"] ?? "chaos-summary.json"
const replay = process.env["CHAOS_ID"]
const usePg = (process.env["CHAOS_PG"] ?? "1") !== "0"
const maxSeconds = process.env["CHAOS_MAX_SECONDS"] === undefined ? undefined : Number(process.env["CHAOS_MAX_SECONDS"])

/**
 * CPU seconds used so far by the private PostgreSQL server: its postmaster and the backends it
 * reaped (each connection's process; `/proc/<pid>/stat`); undefined for a server not started
 * here or without `/proc`.
 */
const serverCpu = (server: PgServer.PgServer | undefined): number | undefined => {
  if (server === undefined) return undefined
  try {
    const pid = Fs.readFileSync(`${server.dataDir}/postmaster.pid`, "utf8").split("\n")[0]!.trim()
    const fields = Fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
    return (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) / 100
  } catch {
    return undefined
  }
}

const main = async () => {
  let server: PgServer.PgServer | undefined
  let pgUrl = usePg ? process.env["POLYLOOP_TEST_PG_URL"] : undefined
  if (usePg && (pgUrl === undefined || pgUrl === "")) {
    server = await PgServer.start()
    pgUrl = server.url
  }
  const env = await Chaos.makeEnv({ poolSize, ...(pgUrl === undefined ? {} : { pgUrl }) })
  console.log(`children start from ${env.pool.start.snapshot ? "a V8 start-up snapshot" : `their bundle (no snapshot: ${env.pool.start.fallback})`}`)
  try {
    if (replay !== undefined) {
      const { point, seed, variant } = Chaos.parseId(replay)
      const [ref] = await Chaos.references(env, [variant])
      console.log(`crash point ${point}: ${JSON.stringify(ref!.keys[point - 1])}`)
      const outcome = await Chaos.runScenario(env, ref!, point, seed)
      console.log(JSON.stringify(outcome, null, 2))
      if (outcome.failures.length > 0) process.exitCode = 1
      return
    }
    const target = Number(process.env["CHAOS_SCENARIOS"] ?? 10_000)
    const only = process.env["CHAOS_VARIANTS"]?.split(",").filter((v) => v !== "")
    const variants = Chaos.suiteVariants({ pg: pgUrl !== undefined }).filter((v) =>
      only === undefined || only.some((prefix) => Chaos.variantId(v).startsWith(prefix))
    )
    const refs = await Chaos.references(env, variants)
    const points = refs.reduce((n, ref) => n + ref.keys.length, 0)
    const rounds = Math.ceil(target / points)
    console.log(`${points} crash points over ${refs.length} variants; ${rounds} rounds (seeds ${seed}..${seed + rounds - 1}), ${concurrency} at a time, ${poolSize} warm children`)
    const work = Chaos.enumerate(refs, seed, rounds).slice(0, target)
    let done = 0
    const serverBefore = serverCpu(server)
    const totals = await Chaos.runWork(env, work, {
      concurrency,
      ...(maxSeconds === undefined ? {} : { maxSeconds }),
      onOutcome: (outcome) => {
        done++
        for (const failure of outcome.failures) console.log(`FAIL ${failure}`)
        if (done % 250 === 0) console.log(`${done}/${work.length} scenarios`)
      }
    })
    const written = {
      target,
      seed,
      rounds,
      crashPoints: points,
      concurrency,
      poolSize,
      snapshot: env.pool.start.snapshot,
      machine: { cpus: Os.cpus().length, loadAverage: Os.loadavg() },
      finishedAt: new Date().toISOString(),
      ...totals,
      // The PostgreSQL server's share, not in cpuSeconds (undefined: a server not started here).
      ...(serverBefore === undefined ? {} : (() => {
        const seconds = (serverCpu(server) ?? serverBefore) - serverBefore
        return { pgServerCpuSeconds: seconds, cpuSecondsPerScenarioWithServer: totals.scenarios === 0 ? 0 : (totals.cpuSeconds.parent + totals.cpuSeconds.children + seconds) / totals.scenarios }
      })()),
      byVariant: Chaos.byVariant(refs, work)
    }
    Fs.writeFileSync(summaryFile, JSON.stringify(written, null, 2) + "\n")
    console.log(
      `${totals.scenarios} scenarios, ${totals.processDeaths} process deaths, ${totals.invariantsChecked} invariants checked, ${totals.failures.length} failures, ${totals.unreached} timed points unreached, in ${totals.seconds.toFixed(0)} s (${totals.scenariosPerSecond.toFixed(2)} scenarios/s; ${summaryFile})`
    )
    if (totals.failures.length > 0) process.exitCode = 1
  } finally {
    await Chaos.closeEnv(env)
    server?.stop()
  }
}

main().catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
