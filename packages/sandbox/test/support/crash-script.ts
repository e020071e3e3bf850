/**
 * The script of the sandbox crash test (shared by the child and the test): one Python program
 * per step, the answer they end with, and the scripted model's choice of the next program.
 */
import type { ModelRequest } from "@polyloop/core/ModelClient"

/** The analysis, one program per step. */
export const programs: ReadonlyArray<string> = [
  "import csv, time\nwith open('data.csv', 'w', newline='') as f:\n    csv.writer(f).writerows([[i, i * i] for i in range(100)])\ntime.sleep(0.2)",
  "rows = [list(map(int, r)) for r in csv.reader(open('data.csv'))]\ntime.sleep(0.2)\nprint(len(rows))",
  "total = sum(r[1] for r in rows)\ncount = globals().get('count', 0) + 1\ntime.sleep(0.2)\nprint(total)",
  "def scale(x):\n    return 3 * x\nscaled = scale(total)\nopen('out.txt', 'w').write(str(scaled))\ntime.sleep(0.2)",
  "count = count + 1\nsummary = {'n': len(rows), 'total': total, 'scaled': int(open('out.txt').read()), 'count': count}\ntime.sleep(0.2)\nprint(summary)",
  "import json\nfinal_answer(json.dumps(summary, sort_keys=True))"
]

/** The answer every run must end with. */
export const expectedAnswer = JSON.stringify({ count: 2, n: 100, scaled: 3 * 328350, total: 328350 }).replace(/,/g, ", ").replace(/:/g, ": ")

const interrupted = "was interrupted and may or may not have taken effect"

/** The next program: one after the last that ran (a step settled as interrupted did not run). */
export const nextProgram = (request: ModelRequest): string => {
  let replies = 0
  let lost = 0
  for (const message of request.messages) {
    if (message._tag === "Assistant") replies++
    if (message._tag === "User" && message.text.includes(interrupted)) lost++
  }
  return programs[Math.min(programs.length - 1, replies - lost)]!
}

