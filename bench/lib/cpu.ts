/**
 * CPU time of processes, from Linux's `/proc/<pid>/stat` (utime, stime, and for a parent the
 * children it reaped, cutime, cstime; in clock ticks of `getconf CLK_TCK`), and pinning to CPUs
 * with util-linux `taskset` — for the cluster's cost model (issue 35, `bench/CLUSTER.md`).
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"

const ticksPerSecond = (): number => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
}
const TICK_MS = 1000 / ticksPerSecond()

interface Stat {
  readonly pid: number
  readonly ppid: number
  readonly own: number
  readonly reaped: number
}

const readStat = (pid: number): Stat | undefined => {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    // The command may hold spaces and parentheses: the fields start after the last ")".
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ")
    // fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
    return {
      pid,
      ppid: Number(fields[1]),
      own: (Number(fields[11]) + Number(fields[12])) * TICK_MS,
      reaped: (Number(fields[13]) + Number(fields[14])) * TICK_MS
    }
  } catch {
    return undefined
  }
}

const allStats = (): ReadonlyArray<Stat> =>
  fs.readdirSync("/proc").flatMap((name) => (/^\d+$/.test(name) ? [readStat(Number(name))].filter((s): s is Stat => s !== undefined) : []))

/** The pids of `root` and every process below it. */
export const tree = (root: number): ReadonlyArray<number> => {
  const stats = allStats()
  const children = new Map<number, Array<number>>()
  for (const s of stats) children.set(s.ppid, [...(children.get(s.ppid) ?? []), s.pid])
  const out: Array<number> = []
  const visit = (pid: number) => {
    out.push(pid)
    for (const c of children.get(pid) ?? []) visit(c)
  }
  visit(root)
  return out
}

/**
 * CPU milliseconds used so far by `root` and everything below it: the live processes' own time
 * plus what the root reaped from children that exited (a PostgreSQL backend that disconnected).
 */
export const treeCpuMs = (root: number): number => {
  let total = 0
  for (const pid of tree(root)) {
    const s = readStat(pid)
    if (s === undefined) continue
    total += s.own + (pid === root ? s.reaped : 0)
  }
  return total
}

/** Pins `root` and every process below it (all their threads) to `cpus` (e.g. "0", "1", "0,1"). */
export const pinTree = (root: number, cpus: string): void => {
  for (const pid of tree(root)) {
    try {
      execFileSync("taskset", ["-a", "-p", "-c", cpus, String(pid)], { stdio: "ignore" })
    } catch {
      // A process that exited meanwhile.
    }
  }
}

/** The postmaster's pid of the PostgreSQL server at `dataDirectory` (first line of postmaster.pid). */
export const postmasterPid = (dataDirectory: string): number => Number(fs.readFileSync(`${dataDirectory}/postmaster.pid`, "utf8").split("\n")[0])
