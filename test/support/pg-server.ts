/**
 * A private PostgreSQL server for the test run: finds the PostgreSQL binaries (installing
 * Debian's `postgresql` package with `apt-get` when they are missing and we are root), runs
 * `initdb` into a fresh temporary directory, starts the server with `pg_ctl` on 127.0.0.1 on a
 * free non-default port (as the `postgres` user via `runuser` when running as root), and creates
 * one database. `stop` shuts the server down and removes the directory.
 *
 * Nothing here assumes a server is already running. Every failure is an `Error` whose message
 * says what was tried and what the tool printed.
 */
import { execFileSync, spawnSync, type SpawnSyncReturns } from "node:child_process"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Apt from "./apt.js"

/** A running private server. */
export interface PgServer {
  /** `postgres://postgres@127.0.0.1:<port>/<database>` (trust authentication, loopback only). */
  readonly url: string
  readonly port: number
  readonly database: string
  readonly dataDir: string
  /** Stops the server (fast shutdown) and removes its directory; idempotent. */
  readonly stop: () => void
  /**
   * Restarts the server (`pg_ctl restart -m fast`: every connection is cut, the server comes
   * back on the same port with the same options); throws with the server log if it fails.
   */
  readonly restart: () => void
}

/** Options of `start`. */
export interface StartOptions {
  readonly database?: string
  /** Print progress (installation, start) to stderr. */
  readonly log?: (line: string) => void
}

const isRoot = Apt.isRoot

const tail = (text: string | Buffer | null | undefined, lines = 25): string => {
  const s = (text ?? "").toString().trimEnd()
  const all = s.split("\n")
  return all.slice(Math.max(0, all.length - lines)).join("\n")
}

const describeRun = (command: string, args: ReadonlyArray<string>, result: SpawnSyncReturns<string>): string => {
  const head = `\`${[command, ...args].join(" ")}\``
  if (result.error) return `${head} could not run: ${result.error.message}`
  const output = [tail(result.stdout), tail(result.stderr)].filter((s) => s.length > 0).join("\n")
  return `${head} exited with ${result.status ?? result.signal}${output.length > 0 ? `:\n${output}` : ""}`
}

const run = (
  command: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd?: string; readonly env?: NodeJS.ProcessEnv; readonly timeoutMs?: number } = {}
): string => {
  const result = spawnSync(command, args, {
    cwd: options.cwd ?? Os.tmpdir(),
    env: options.env ?? process.env,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    timeout: options.timeoutMs ?? 120_000,
    maxBuffer: 64 * 1024 * 1024
  })
  if (result.error || result.status !== 0) throw new Error(describeRun(command, args, result))
  return result.stdout
}

const hasServerBinaries = (dir: string): boolean =>
  ["initdb", "pg_ctl", "postgres", "createdb"].every((name) => {
    try {
      Fs.accessSync(Path.join(dir, name), Fs.constants.X_OK)
      return true
    } catch {
      return false
    }
  })

const versionOf = (dir: string): number => {
  const match = /postgresql\/(\d+)/.exec(dir)
  return match ? Number(match[1]) : 0
}

/** The directory holding `initdb`, `pg_ctl` and `postgres`, if any. */
export const findBinDir = (): string | undefined => {
  const override = process.env["POLYLOOP_PG_BIN"]
  if (override !== undefined && override.length > 0) return hasServerBinaries(override) ? override : undefined
  const candidates: Array<string> = []
  try {
    for (const version of Fs.readdirSync("/usr/lib/postgresql")) {
      candidates.push(Path.join("/usr/lib/postgresql", version, "bin"))
    }
  } catch {
    // no Debian-style installation
  }
  candidates.sort((a, b) => versionOf(b) - versionOf(a))
  for (const dir of (process.env["PATH"] ?? "").split(Path.delimiter)) {
    if (dir.length > 0) candidates.push(dir)
  }
  for (const dir of ["/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin"]) candidates.push(dir)
  return candidates.find(hasServerBinaries)
}

/** Installs Debian's `postgresql` package non-interactively (root only). */
export const install = (log: (line: string) => void): void =>
  Apt.install("postgresql", "PostgreSQL server binaries (initdb, pg_ctl, postgres)", log)

/** A free TCP port on 127.0.0.1 other than PostgreSQL's default 5432 (also used for cluster runners). */
export const freePort = async (): Promise<number> => {
  for (let attempt = 0; attempt < 10; attempt++) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = Net.createServer()
      server.unref()
      server.on("error", reject)
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        server.close(() => resolve(port))
      })
    })
    if (port !== 5432 && port > 0) return port
  }
  throw new Error("could not find a free TCP port on 127.0.0.1")
}

/** The OS user the server runs as: `postgres` when we are root (created if missing), else ourselves. */
const serverUser = (): string | undefined => {
  if (!isRoot()) return undefined
  const exists = spawnSync("id", ["-u", "postgres"], { stdio: "ignore" }).status === 0
  if (!exists) run("useradd", ["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"])
  return "postgres"
}

const asUser = (user: string | undefined, command: string, args: ReadonlyArray<string>): [string, Array<string>] =>
  user === undefined ? [command, [...args]] : ["runuser", ["-u", user, "--", command, ...args]]

/**
 * Starts a private server. Installs PostgreSQL first if its binaries are missing. Throws an
 * `Error` with the reason (and the tool's output) if anything fails; cleans up after itself.
 */
export const start = async (options: StartOptions = {}): Promise<PgServer> => {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`))
  const database = options.database ?? "polyloop_test"
  const override = process.env["POLYLOOP_PG_BIN"]
  let binDir = findBinDir()
  if (binDir === undefined && override !== undefined && override.length > 0) {
    throw new Error(`POLYLOOP_PG_BIN=${override} does not hold initdb, pg_ctl, postgres and createdb`)
  }
  if (binDir === undefined) {
    install(log)
    binDir = findBinDir()
    if (binDir === undefined) {
      throw new Error("apt-get installed postgresql but initdb/pg_ctl/postgres are not under /usr/lib/postgresql/*/bin")
    }
  }
  const bin = (name: string) => Path.join(binDir, name)
  const user = serverUser()
  const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "polyloop-pg-"))
  const dataDir = Path.join(root, "data")
  const logFile = Path.join(root, "server.log")
  if (user !== undefined) execFileSync("chown", ["-R", `${user}:`, root])
  Fs.chmodSync(root, 0o700)

  let running = false
  let stopped = false
  const stop = () => {
    if (stopped) return
    stopped = true
    if (running) {
      const [cmd, args] = asUser(user, bin("pg_ctl"), ["-D", dataDir, "-m", "fast", "-w", "-t", "30", "stop"])
      spawnSync(cmd, args, { cwd: root, stdio: "ignore", timeout: 60_000 })
    }
    Fs.rmSync(root, { recursive: true, force: true })
  }
  const serverLog = () => {
    try {
      return tail(Fs.readFileSync(logFile, "utf8"), 40)
    } catch {
      return "(no server log)"
    }
  }

  try {
    const [initCmd, initArgs] = asUser(user, bin("initdb"), [
      "-D",
      dataDir,
      "-U",
      "postgres",
      "--auth=trust",
      "-E",
      "UTF8",
      "--locale=C",
      "--no-sync"
    ])
    run(initCmd, initArgs, { cwd: root })

    let port = 0
    let lastError: unknown = undefined
    for (let attempt = 0; attempt < 3 && !running; attempt++) {
      port = await freePort()
      const serverOptions = [
        "-c listen_addresses=127.0.0.1",
        `-p ${port}`,
        `-c unix_socket_directories='${root}'`,
        // A throw-away test server: durability against OS crashes is not what the tests check
        // (they kill clients, never the server), so skip the flushes.
        "-c fsync=off",
        "-c full_page_writes=off",
        "-c max_connections=200"
      ].join(" ")
      const [ctlCmd, ctlArgs] = asUser(user, bin("pg_ctl"), ["-D", dataDir, "-l", logFile, "-w", "-t", "60", "-o", serverOptions, "start"])
      try {
        run(ctlCmd, ctlArgs, { cwd: root, timeoutMs: 90_000 })
        running = true
      } catch (error) {
        lastError = error
      }
    }
    if (!running) throw new Error(`pg_ctl start failed: ${(lastError as Error).message}\nserver log:\n${serverLog()}`)

    run(bin("createdb"), ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", database], {
      cwd: root,
      timeoutMs: 30_000
    })
    log(`polyloop test setup: private PostgreSQL (${Path.basename(Path.dirname(binDir))}) on 127.0.0.1:${port}, data in ${dataDir}`)
    const restart = () => {
      const [cmd, args] = asUser(user, bin("pg_ctl"), ["-D", dataDir, "-l", logFile, "-m", "fast", "-w", "-t", "60", "restart"])
      try {
        run(cmd, args, { cwd: root, timeoutMs: 90_000 })
      } catch (error) {
        throw new Error(`pg_ctl restart failed: ${(error as Error).message}\nserver log:\n${serverLog()}`)
      }
    }
    return { url: `postgres://postgres@127.0.0.1:${port}/${database}`, port, database, dataDir, stop, restart }
  } catch (error) {
    stop()
    throw error
  }
}
