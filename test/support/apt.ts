/**
 * Installing a Debian package for a test that needs a program the machine may lack (PostgreSQL's
 * server, Chromium): `apt-get install` non-interactively, and when that fails (a fresh machine
 * often has no package lists yet) `apt-get update` and once more. Root only; every failure is an
 * `Error` saying what was tried and what apt-get printed.
 */
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"

/** Is this process root (so apt-get can install)? */
export const isRoot = (): boolean => typeof process.getuid === "function" && process.getuid() === 0

const tail = (text: string | null | undefined, lines = 25): string => {
  const all = (text ?? "").trimEnd().split("\n")
  return all.slice(Math.max(0, all.length - lines)).join("\n")
}

const aptGet = (args: ReadonlyArray<string>, timeoutMs: number): void => {
  const binary = ["/usr/bin/apt-get", "/bin/apt-get"].find((p) => Fs.existsSync(p))
  if (binary === undefined) throw new Error("apt-get is not available")
  const result = spawnSync(binary, args, {
    cwd: Os.tmpdir(),
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    timeout: timeoutMs,
    maxBuffer: 64 * 1024 * 1024
  })
  if (result.error || result.status !== 0) {
    const output = [tail(result.stdout), tail(result.stderr)].filter((s) => s.length > 0).join("\n")
    throw new Error(
      `\`apt-get ${args.join(" ")}\` ${result.error ? `could not run: ${result.error.message}` : `exited with ${result.status ?? result.signal}`}${
        output.length > 0 ? `:\n${output}` : ""
      }`
    )
  }
}

/**
 * Installs Debian package `name` (without recommended packages). `what` names it in messages
 * (e.g. "PostgreSQL server binaries (initdb, pg_ctl, postgres)").
 */
export const install = (name: string, what: string, log: (line: string) => void): void => {
  if (!isRoot()) {
    throw new Error(
      `${what} were not found and this process is not root, so they cannot be installed here. Install them (Debian: \`apt-get install ${name}\`).`
    )
  }
  const installArgs = ["install", "-y", "-q", "--no-install-recommends", name]
  log(`polyloop test setup: ${what} missing, installing Debian's ${name} package…`)
  try {
    aptGet(installArgs, 20 * 60_000)
  } catch (first) {
    log("polyloop test setup: apt-get install failed, running apt-get update and retrying…")
    try {
      aptGet(["update", "-q"], 10 * 60_000)
      aptGet(installArgs, 20 * 60_000)
    } catch (second) {
      throw new Error(`installing ${name} failed.\nfirst attempt: ${(first as Error).message}\nafter apt-get update: ${(second as Error).message}`)
    }
  }
}
