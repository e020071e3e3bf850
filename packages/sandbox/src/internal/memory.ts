/**
 * The sandbox's memory as one total (design 0331, decision 6): a memory cgroup per interpreter
 * where the host allows one (cgroup v2 `memory.max`, else cgroup v1 `memory.limit_in_bytes`),
 * else a measured fallback (the resident memory of the sandbox's processes and the size of its
 * `/tmp`, read from `/proc` by the host).
 *
 * @internal
 */
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"

/** How the sandbox's total memory is bounded on this host. */
export type Accounting = "cgroup v2" | "cgroup v1" | "measured"

/** Where interpreters' cgroups are made, and how. */
export interface Control {
  readonly accounting: Accounting
  /** The directory under which each interpreter gets its cgroup (for the cgroup kinds). */
  readonly base: string | undefined
}

interface Mount {
  readonly point: string
  readonly type: string
  readonly options: ReadonlyArray<string>
  readonly root: string
}

/** The cgroup mounts of this process's mount namespace (`/proc/self/mountinfo`, `proc(5)`). */
const cgroupMounts = (): Array<Mount> => {
  let text: string
  try {
    text = fs.readFileSync("/proc/self/mountinfo", "utf8")
  } catch {
    return []
  }
  const mounts: Array<Mount> = []
  for (const line of text.split("\n")) {
    const [left, right] = line.split(" - ")
    if (left === undefined || right === undefined) continue
    const fields = left.split(" ")
    const [type, , superOptions] = right.split(" ")
    if (type !== "cgroup" && type !== "cgroup2") continue
    mounts.push({ point: fields[4] ?? "", type, options: (superOptions ?? "").split(","), root: fields[3] ?? "/" })
  }
  return mounts
}

/** This process's cgroup in the hierarchy of `controller` (`""` for v2's unified one). */
const ownCgroup = (controller: string): string | undefined => {
  let text: string
  try {
    text = fs.readFileSync("/proc/self/cgroup", "utf8")
  } catch {
    return undefined
  }
  for (const line of text.split("\n")) {
    const [id, controllers, cgroupPath] = line.split(":")
    if (cgroupPath === undefined) continue
    if (controller === "" ? id === "0" && controllers === "" : controllers!.split(",").includes(controller)) return cgroupPath
  }
  return undefined
}

const join = (mount: Mount, cgroupPath: string): string => {
  // A mount of a sub-tree (a container's namespace) shows paths relative to its root.
  const relative = mount.root !== "/" && cgroupPath.startsWith(mount.root) ? cgroupPath.slice(mount.root.length) : cgroupPath
  return path.join(mount.point, relative)
}

/** Makes `dir/<name>` and checks `probe` works in it; the directory on success. */
const tryBase = (dir: string, check: (made: string) => boolean): string | undefined => {
  const base = path.join(dir, `polyloop-${process.pid}-${randomBytes(4).toString("hex")}`)
  try {
    fs.mkdirSync(base)
  } catch {
    return undefined
  }
  try {
    if (check(base)) return base
  } catch {
    // not usable
  }
  try {
    fs.rmdirSync(base)
  } catch {
    // left
  }
  return undefined
}

/**
 * What this host allows, tried in order: a writable cgroup v2 hierarchy with the memory
 * controller, a writable cgroup v1 memory hierarchy, else the measured fallback. The base
 * directory made here is removed by `release`.
 */
export const detect = (wanted: "auto" | "measured"): Control => {
  if (wanted === "measured") return { accounting: "measured", base: undefined }
  const mounts = cgroupMounts()
  const unified = mounts.find((m) => m.type === "cgroup2")
  const own2 = ownCgroup("")
  if (unified !== undefined && own2 !== undefined) {
    const dir = join(unified, own2)
    const base = tryBase(dir, (made) => {
      // The controller must be enabled for children of `made`: its own subtree_control.
      if (!fs.readFileSync(path.join(made, "cgroup.controllers"), "utf8").split(/\s+/).includes("memory")) return false
      fs.writeFileSync(path.join(made, "cgroup.subtree_control"), "+memory")
      const probe = path.join(made, "probe")
      fs.mkdirSync(probe)
      try {
        fs.writeFileSync(path.join(probe, "memory.max"), "max")
        return true
      } finally {
        fs.rmdirSync(probe)
      }
    })
    if (base !== undefined) return { accounting: "cgroup v2", base }
  }
  const v1 = mounts.find((m) => m.type === "cgroup" && m.options.includes("memory"))
  const own1 = ownCgroup("memory")
  if (v1 !== undefined && own1 !== undefined) {
    const base = tryBase(join(v1, own1), (made) => {
      fs.writeFileSync(path.join(made, "memory.limit_in_bytes"), "-1")
      return true
    })
    if (base !== undefined) return { accounting: "cgroup v1", base }
  }
  return { accounting: "measured", base: undefined }
}

/** Removes `control`'s base directory (its interpreters' cgroups are already gone or empty). */
export const release = (control: Control): void => {
  if (control.base === undefined) return
  try {
    for (const name of fs.readdirSync(control.base, { withFileTypes: true })) {
      if (name.isDirectory()) removeGroup(path.join(control.base, name.name))
    }
    fs.rmdirSync(control.base)
  } catch {
    // left for the system: an empty cgroup costs nothing
  }
}

let counter = 0

/** A new cgroup of `bytes` for one interpreter; its directory. */
export const makeGroup = (control: Control, bytes: number): string => {
  const dir = path.join(control.base!, `i-${++counter}`)
  fs.mkdirSync(dir)
  if (control.accounting === "cgroup v2") {
    fs.writeFileSync(path.join(dir, "memory.max"), String(bytes))
    if (fs.existsSync(path.join(dir, "memory.swap.max"))) fs.writeFileSync(path.join(dir, "memory.swap.max"), "0")
  } else {
    fs.writeFileSync(path.join(dir, "memory.limit_in_bytes"), String(bytes))
    // With swap accounting, memory and swap together get the same bound (no swapping past it).
    const memsw = path.join(dir, "memory.memsw.limit_in_bytes")
    if (fs.existsSync(memsw)) {
      try {
        fs.writeFileSync(memsw, String(bytes))
      } catch {
        // swap accounting off
      }
    }
  }
  return dir
}

/** How many processes the kernel killed for memory in `group` so far. */
export const oomKills = (control: Control, group: string): number => {
  try {
    const file = control.accounting === "cgroup v2" ? "memory.events" : "memory.oom_control"
    const line = fs.readFileSync(path.join(group, file), "utf8").split("\n").find((l) => l.startsWith("oom_kill "))
    return line === undefined ? 0 : Number(line.split(" ")[1])
  } catch {
    return 0
  }
}

/** Removes an interpreter's cgroup once its processes are gone (tried a few times: they leave asynchronously). */
export const removeGroup = (group: string): void => {
  try {
    fs.rmdirSync(group)
  } catch {
    // still busy or already gone: the base's release tries again
  }
}

const pageSize = 4096

/** The resident bytes of a process (`/proc/<pid>/statm`'s second field, in pages). */
const residentOf = (pid: number): number => {
  try {
    return Number(fs.readFileSync(`/proc/${pid}/statm`, "utf8").split(" ")[1]) * pageSize
  } catch {
    return 0
  }
}

/** Every process under `root` (its descendants by parent pid, `root` included). */
export const descendants = (root: number): Array<number> => {
  const children = new Map<number, Array<number>>()
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue
    let stat: string
    try {
      stat = fs.readFileSync(`/proc/${name}/stat`, "latin1")
    } catch {
      continue
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
    const list = children.get(ppid) ?? []
    list.push(Number(name))
    children.set(ppid, list)
  }
  const out: Array<number> = []
  const stack = [root]
  while (stack.length > 0) {
    const pid = stack.pop()!
    out.push(pid)
    for (const child of children.get(pid) ?? []) stack.push(child)
  }
  return out
}

/**
 * The measured fallback's reading: the resident memory of every process under `root` and the
 * bytes used in the `/tmp` of `inside` (a process in the sandbox's mount namespace), when given.
 */
export const measured = (root: number, inside: number | undefined): number => {
  let total = 0
  for (const pid of descendants(root)) total += residentOf(pid)
  if (inside !== undefined) {
    try {
      const stat = fs.statfsSync(`/proc/${inside}/root/tmp`)
      total += (stat.blocks - stat.bfree) * stat.bsize
    } catch {
      // gone
    }
  }
  return total
}
