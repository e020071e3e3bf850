/**
 * The script of the sandbox cluster test (shared by the runner processes and the test): one
 * Python program per step — variables set early and read later, a workspace file written early
 * and read later, a counter that a wrong restore would count twice — and the answer they end
 * with. The scripted model's next program is a function of the history (the one after the last
 * that ran; a step the resume settled as interrupted did not run), as a model would write again.
 */
import type { ModelRequest } from "@polyloop/core/ModelClient"

/** The analysis, one program per step. */
export const programs: ReadonlyArray<string> = [
  "import csv, json\nseed = 7\nwith open('data.csv', 'w', newline='') as f:\n    csv.writer(f).writerows([[i, i * i] for i in range(50)])",
  "rows = [list(map(int, r)) for r in csv.reader(open('data.csv'))]\ntotal = sum(r[1] for r in rows)\nopen('notes.txt', 'w').write('total ' + str(total))\nprint(total)",
  "count = 1\nscaled = total * seed\nprint(scaled)",
  // The runner that hosts the run first is killed right after this step's snapshot (its result is
  // not durable): the resumed run must redo it from the state after step 2, not after step 3.
  "count = count + 1\nprint(count)",
  "summary = {'n': len(rows), 'total': total, 'scaled': scaled, 'count': count, 'seed': seed, 'notes': open('notes.txt').read()}\nprint(summary)",
  "final_answer(json.dumps(summary, sort_keys=True))"
]

/** The step after whose snapshot the first runner is killed. */
export const crashStep = 3

/** The answer every run must end with. */
export const expectedAnswer = JSON.stringify({ count: 2, n: 50, notes: "total 40425", scaled: 7 * 40425, seed: 7, total: 40425 })
  .replace(/,/g, ", ")
  .replace(/:/g, ": ")

const interrupted = "was interrupted and may or may not have taken effect"

/** The next program: one after the last that ran. */
export const nextProgram = (request: ModelRequest): string => {
  let replies = 0
  let lost = 0
  for (const message of request.messages) {
    if (message._tag === "Assistant") replies++
    if (message._tag === "User" && message.text.includes(interrupted)) lost++
  }
  return programs[Math.min(programs.length - 1, replies - lost)]!
}
