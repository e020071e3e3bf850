// polyloop run viewer: the page of `polyloop serve` (plain JavaScript, no build step).
//
// `/` is the runs list (filters and page in the query string), `/?run=<id>` one run's
// transcript and timeline, `/?view=stats` the statistics plots, `/?compare=<a>&with=<b>` two runs
// side by side, aligned by step. Data comes from the JSON API under /api/ and live updates from Server-Sent Events
// (/api/live for the list, /api/runs/<id>/live for a run).
//
// Everything shown comes from model replies and tool output, which are untrusted: every element
// is built with createElement and every text set with textContent (the `el` helper below);
// innerHTML is never used. The server's Content-Security-Policy forbids inline script besides.
//
// The file is longer than a module of the library: it is the whole page, kept in one file so
// that it is served as it is written.

import * as Session from "./session.js"
import * as SubAgents from "./subagents.js"

const main = document.getElementById("main")
const connection = document.getElementById("connection")
const problem = document.getElementById("problem")

// -----------------------------------------------------------------------------
// helpers
// -----------------------------------------------------------------------------

/** An element: `attrs` set as attributes (`class`, `href`, `title`, …), children as text nodes or elements. */
const el = (tag, attrs, ...children) => {
  const node = document.createElement(tag)
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue
    node.setAttribute(name, value === true ? "" : String(value))
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue
    node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child)
  }
  return node
}

/** Epoch milliseconds as `2025-01-31 12:34:56Z` (UTC, as the command prints it). */
const time = (millis) => {
  if (typeof millis !== "number") return "-"
  const date = new Date(millis)
  return Number.isNaN(date.getTime()) ? "?" : `${date.toISOString().slice(0, 19).replace("T", " ")}Z`
}

/** Milliseconds as `850 ms`, `2.4 s`, `3 min 5 s`. */
const duration = (millis) => {
  if (typeof millis !== "number" || !Number.isFinite(millis) || millis < 0) return "?"
  if (millis < 1000) return `${Math.round(millis)} ms`
  if (millis < 60000) return `${(millis / 1000).toFixed(1)} s`
  const minutes = Math.floor(millis / 60000)
  const seconds = Math.round((millis % 60000) / 1000)
  return minutes < 60 ? `${minutes} min ${seconds} s` : `${Math.floor(minutes / 60)} h ${minutes % 60} min`
}

/** A stop reason as the command prints it: `Completed(Tool)`, `BudgetExhausted(Steps)`, `EnvError`. */
const stopReasonLabel = (reason) => {
  if (!reason) return null
  if (reason._tag === "Completed") return `Completed(${reason.by})`
  if (reason._tag === "BudgetExhausted") return reason.scope === undefined ? `BudgetExhausted(${reason.budget})` : `BudgetExhausted(${reason.scope}:${reason.budget})`
  return reason._tag
}

const stopReasonClass = (reason) => (!reason ? "" : reason._tag === "Completed" ? "completed" : reason._tag === "EnvError" ? "enverror" : "budget")

const statusTitles = {
  Unfinished: "running now, or stopped before its end (a resume with the same run id continues it)",
  Suspended: "waiting for a person's decision on a call; the run goes on when it is run again after the decision",
  AwaitingMessage: "a conversation whose every message has had its turn: it goes on when the next message is sent"
}

const statusLabels = { AwaitingMessage: "awaiting message" }

const statusBadge = (status) => {
  const label = statusLabels[status] ?? String(status).toLowerCase()
  return el("span", { class: `badge ${label}`, title: statusTitles[status] }, label)
}

const json = (value) => JSON.stringify(value, null, 2) ?? "undefined"

const runHref = (runId) => `/?${new URLSearchParams({ run: runId })}`

const showProblem = (message) => {
  problem.hidden = message === null
  problem.textContent = message ?? ""
}

/** The server refused this browser's credential: the login form replaces the page. */
const needsLogin = () => {
  Session.forget()
  closeLive()
  setConnection("", false)
  main.replaceChildren(Session.form(el, () => route()))
}

const getJson = async (url) => {
  const response = await fetch(url, { headers: { accept: "application/json", ...Session.headers() } })
  const body = await response.json().catch(() => null)
  if (response.status === 401) needsLogin()
  if (!response.ok) {
    const error = new Error(body?.error?.message ?? `${response.status} ${response.statusText}`)
    error.status = response.status
    throw error
  }
  return body
}

const postJson = async (url, body) => {
  const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json", accept: "application/json", ...Session.headers() }, body: JSON.stringify(body) })
  const answer = await response.json().catch(() => null)
  if (response.status === 401) needsLogin()
  if (!response.ok) throw new Error(answer?.error?.message ?? `${response.status} ${response.statusText}`)
  return answer
}

const setConnection = (text, live) => {
  connection.textContent = text
  connection.classList.toggle("live", live)
}

/** The server's price table (`--prices`), fetched once; null when it has none. */
let pricesLoaded = null
const prices = () => {
  if (pricesLoaded === null) pricesLoaded = getJson("/api/prices").then((body) => body.prices).catch(() => null)
  return pricesLoaded
}

/** What tokens cost for a model under the table (undefined: neither the model nor `*` is priced). */
const costOf = (table, model, input, output) => {
  const price = (model ? table.models[model] : undefined) ?? table.models["*"]
  return price === undefined ? undefined : (input * price.input + output * price.output) / 1000000
}

/** An amount of money, to a precision that shows small runs' costs. */
const money = (amount, currency) => `${amount < 0.01 ? amount.toFixed(6) : amount.toFixed(4)} ${currency}`

/** Sub-agent runs (design 0412): `subagents.js`, drawn with this file's helpers. */
const subAgents = SubAgents.make({ el, runHref, stopReasonLabel, stopReasonClass, money, getJson, showProblem })

// -----------------------------------------------------------------------------
// runs list
// -----------------------------------------------------------------------------

const listParams = () => {
  const params = new URLSearchParams(location.search)
  const keep = new URLSearchParams()
  for (const name of ["status", "agent", "stopReason", "from", "to", "model", "tag", "scorer", "scoreMin", "scoreMax", "children", "page"]) {
    const value = params.get(name)
    if (value) keep.set(name, value)
  }
  return keep
}

/** A score bound (design 0395): only with a scorer chosen. */
const scoreInput = (name, label, current, scorer) =>
  el("label", {}, label, el("input", { type: "number", step: "any", name, "data-filter": name, value: current ?? "", disabled: !scorer, title: scorer ? `${scorer}'s score, included` : "choose a scorer first" }))

/** A date filter (a day, UTC). */
const dateInput = (name, label, current) => el("label", {}, label, el("input", { type: "date", name, "data-filter": name, value: current ?? "" }))

const select = (name, label, current, options) =>
  el(
    "label",
    {},
    label,
    el(
      "select",
      { name, "data-filter": name },
      el("option", { value: "" }, "all"),
      options.map(([value, text]) => el("option", { value, selected: value === current }, text))
    )
  )

const renderList = (data, params) => {
  const scorer = params.get("scorer") ?? ""
  // A scorer named by the URL but not by a definition (added by `rescore`) is still a choice.
  const scorers = [...new Set([...(data.filters.scorers ?? []), ...(scorer ? [scorer] : [])])].sort()
  const tagged = (data.filters.tags ?? []).length > 0
  const filters = el(
    "form",
    { class: "filters", id: "filters" },
    select("status", "Status", params.get("status") ?? "", data.filters.statuses.map((s) => [s, s === "Unfinished" ? "unfinished (running or stopped)" : s === "Suspended" ? "suspended (waiting for a decision)" : s === "AwaitingMessage" ? "awaiting message (a conversation)" : s.toLowerCase()])),
    select("agent", "Agent", params.get("agent") ?? "", data.filters.agents.map((a) => [a, a])),
    select("stopReason", "Stop reason", params.get("stopReason") ?? "", data.filters.stopReasons.map((r) => [r, r])),
    (data.filters.models ?? []).length > 0 ? select("model", "Model", params.get("model") ?? "", data.filters.models.map((m) => [m, m === "-" ? "(none named)" : m])) : null,
    dateInput("from", "Started from", params.get("from")),
    dateInput("to", "to (UTC)", params.get("to")),
    // Tags and scores come from the store's experiments (design 0395): shown when it has some.
    (data.filters.tags ?? []).length > 0 ? select("tag", "Tag", params.get("tag") ?? "", data.filters.tags.map((t) => [t, t])) : null,
    scorers.length > 0 ? select("scorer", "Score by", scorer, scorers.map((name) => [name, name])) : null,
    scorers.length > 0 ? scoreInput("scoreMin", "from", params.get("scoreMin"), scorer) : null,
    scorers.length > 0 ? scoreInput("scoreMax", "to", params.get("scoreMax"), scorer) : null,
    // Sub-agent runs (design 0412): shown when the store has some.
    (data.filters.childRuns ?? 0) > 0 || params.get("children") ? select("children", "Sub-agent runs", params.get("children") ?? "", [["hide", "hidden"]]) : null,
    el("span", { class: "muted", id: "count" }, `${data.total} run${data.total === 1 ? "" : "s"}`),
    el("span", { class: "muted", id: "totals", "data-tokens": String(data.totals.tokens), "data-cost": data.totals.cost ? String(data.totals.cost.amount) : undefined }, `${data.totals.tokens} tokens${data.totals.cost ? ` · ${money(data.totals.cost.amount, data.totals.cost.currency)}${data.totals.cost.unpriced > 0 ? ` (${data.totals.cost.unpriced} run${data.totals.cost.unpriced === 1 ? "" : "s"} of unpriced models not counted)` : ""}` : ""}`)
  )
  filters.addEventListener("change", (event) => {
    const next = listParams()
    const target = event.target
    if (target.value) next.set(target.name, target.value)
    else next.delete(target.name)
    // Score bounds bound the chosen scorer's score: without one they go too.
    if (!next.get("scorer")) {
      next.delete("scoreMin")
      next.delete("scoreMax")
    }
    next.delete("page")
    history.pushState(null, "", `/${next.size > 0 ? `?${next}` : ""}`)
    route()
  })
  const head = el(
    "tr",
    {},
    ["Run", "Agent", "Status", "Stop reason"].map((h) => el("th", {}, h)),
    ["Steps", "Effective", "Tokens"].map((h) => el("th", { class: "num" }, h)),
    data.totals.cost ? el("th", { class: "num", title: "the replies' tokens by the --prices table" }, `Cost (${data.totals.cost.currency})`) : null,
    scorer ? el("th", { class: "num" }, `Score (${scorer})`) : null,
    tagged ? el("th", {}, "Tags") : null,
    el("th", {}, "Started (UTC)"),
    el("th", { class: "num", title: "step time: time spent crashed does not count" }, "Duration")
  )
  const rows = data.runs.map((run) =>
    el(
      "tr",
      { "data-run": run.runId },
      el("td", { class: "run" }, el("a", { href: runHref(run.runId) }, run.runId), run.parent ? [" ", subAgents.parentBadge(run.parent)] : null),
      el("td", {}, run.agent),
      el("td", {}, statusBadge(run.status)),
      el("td", {}, run.stopReasonLabel ? el("span", { class: `badge ${stopReasonClass(run.stopReason ?? run.conversation?.lastStopReason)}` }, run.stopReasonLabel) : el("span", { class: "muted" }, "-")),
      el("td", { class: "num" }, run.steps),
      el("td", { class: "num" }, run.effectiveSteps),
      el("td", { class: "num" }, run.tokens),
      data.totals.cost ? el("td", { class: "num cost", "data-cost": run.cost === null ? "unpriced" : String(run.cost) }, run.cost === null ? el("span", { class: "muted", title: "the price table prices neither this run's model nor *" }, "unpriced") : money(run.cost, data.totals.cost.currency)) : null,
      scorer ? el("td", { class: "num score", "data-score": run.score === null || run.score === undefined ? "" : String(run.score) }, run.score === null || run.score === undefined ? "-" : String(run.score)) : null,
      tagged ? el("td", { class: "tags" }, (run.tags ?? []).map((tag) => el("span", { class: "badge tag", "data-tag": tag }, tag))) : null,
      el("td", { class: "mono" }, time(run.startedAt)),
      el("td", { class: "num" }, duration(run.elapsed))
    )
  )
  const table = el("table", { class: "runs", id: "runs" }, el("thead", {}, head), el("tbody", {}, rows))
  const go = (page) => {
    const next = listParams()
    if (page > 1) next.set("page", String(page))
    else next.delete("page")
    history.pushState(null, "", `/${next.size > 0 ? `?${next}` : ""}`)
    route()
  }
  const prev = el("button", { type: "button", disabled: data.page <= 1 }, "← newer")
  const next = el("button", { type: "button", disabled: data.page >= data.pages }, "older →")
  prev.addEventListener("click", () => go(data.page - 1))
  next.addEventListener("click", () => go(data.page + 1))
  const pager = el("div", { class: "pager" }, prev, el("span", { id: "page" }, `page ${data.page} of ${data.pages}`), next)
  const empty = data.runs.length === 0 ? el("p", { class: "muted" }, data.filters.agents.length === 0 ? "No runs in this store yet." : "No run matches these filters.") : null
  main.replaceChildren(...[el("h1", {}, "Runs"), filters, table, empty, pager].filter((node) => node !== null))
}

let liveSource = null

const closeLive = () => {
  if (liveSource !== null) liveSource.close()
  liveSource = null
}

const listPage = async () => {
  document.title = "polyloop runs"
  const load = async () => {
    const params = listParams()
    const query = new URLSearchParams(params)
    try {
      const data = await getJson(`/api/runs?${query}`)
      showProblem(null)
      renderList(data, params)
    } catch (error) {
      showProblem(`cannot list the runs: ${error.message}`)
    }
  }
  await load()
  closeLive()
  const source = new EventSource(Session.streamUrl("/api/live"))
  liveSource = source
  let first = true
  source.addEventListener("runs", () => {
    setConnection("live", true)
    // The first event tells the state the page was loaded with.
    if (first) first = false
    else void load()
  })
  source.addEventListener("problem", (event) => showProblem(`the store: ${JSON.parse(event.data).message}`))
  source.addEventListener("error", () => setConnection("reconnecting…", false))
}

// -----------------------------------------------------------------------------
// one run
// -----------------------------------------------------------------------------

const row = (name, ...value) => el("div", { class: "row" }, el("div", { class: "name" }, name), el("div", { class: "value" }, ...value))

const pre = (text, attrs) => el("pre", attrs ?? {}, text === "" ? el("span", { class: "muted" }, "(empty)") : text)

/** Texts longer than this are shown folded (design 0371): their first `foldLines` lines, and a button. */
const foldOver = { lines: 20, chars: 2000 }
const foldLines = 12

/**
 * A long text folded to its first lines, with "show all N lines (M kB)" (and "fold" back); a short
 * one as it is. The page's copy is folded, never the log's.
 */
const folded = (text, attrs) => {
  const value = String(text ?? "")
  const lines = value.split("\n")
  if (lines.length <= foldOver.lines && value.length <= foldOver.chars) return pre(value, attrs)
  let head = lines.slice(0, foldLines).join("\n")
  if (head.length > foldOver.chars) head = head.slice(0, foldOver.chars)
  const node = pre(head, attrs)
  const size = `${(new TextEncoder().encode(value).length / 1024).toFixed(1)} kB`
  const more = `show all ${lines.length} lines (${size})`
  const button = el("button", { type: "button", class: "unfold", "aria-expanded": "false" }, more)
  let open = false
  button.addEventListener("click", () => {
    open = !open
    node.textContent = open ? value : head
    button.textContent = open ? "fold" : more
    button.setAttribute("aria-expanded", String(open))
  })
  return el("div", { class: "folded" }, node, button)
}

const renderAction = (action) =>
  action._tag === "ToolCall"
    ? el("li", { class: "action" }, el("code", {}, action.name), el("span", { class: "note" }, `call ${action.id}`), pre(json(action.arguments), { class: "arguments" }))
    : el("li", { class: "action" }, el("code", {}, `${action.language} code`), pre(action.code, { class: "code" }))

const renderDecision = (decision) => {
  switch (decision._tag) {
    case "Finish":
      return [el("span", { class: "badge decision" }, "Finish"), folded(decision.answer)]
    case "NoAction":
      return [el("span", { class: "badge decision" }, "NoAction"), el("span", { class: "note" }, "the reply took no action; the library fed back its nudge")]
    case "InvalidDecision":
      return [el("span", { class: "badge decision" }, "InvalidDecision"), el("span", { class: "note" }, "explanation fed back to the model:"), pre(decision.explanation)]
    default:
      return [el("span", { class: "badge decision" }, decision._tag)]
  }
}

/** The actions of an `Act` decision: one, or several once a reply may hold parallel calls. */
const actionsOf = (decision) => (Array.isArray(decision.actions) ? decision.actions : decision.action ? [decision.action] : [])

/** The results of a step: one per action (a step may hold several once parallel calls exist). */
const resultsOf = (step) => (Array.isArray(step.results) ? step.results : step.result ? [step.result] : [])

const renderResult = (result, step, replayPolicyOf, label, childBlock) => {
  const outcome = result.outcome
  const notes = []
  if (step.settledOnResume) {
    const policy = result.action._tag === "ToolCall" ? replayPolicyOf(result.action.name) : undefined
    notes.push(
      outcome.observationIsSynthetic && result.executorObservation === ""
        ? `settled on resume: not run again (replay policy ${policy ?? "Never"})`
        : `settled on resume: run again (replay policy ${policy ?? "Always"})`
    )
  }
  if (outcome.envReportedCompletion) notes.push("the environment reported completion")
  const history = step.history
  const sentAs = []
  if (history && history.maskedFrom !== null) sentAs.push(el("span", { class: "badge masked", title: "the log keeps it in full" }, `masked from step ${history.maskedFrom}`))
  if (history && history.replacedFrom !== null) sentAs.push(el("span", { class: "badge masked", title: "the log keeps it in full" }, `not sent from step ${history.replacedFrom}`))
  const parts = [
    row(label, el("ul", { class: "actions" }, renderAction(result.action))),
    row(
      "status",
      result.handlerFailed && outcome.status === "Executed"
        ? el("span", { class: "badge EnvError failed", "data-status": outcome.status, title: "the tool ran and failed; its error was fed back to the model as the observation" }, "tool failed")
        : el("span", { class: `badge ${outcome.status}`, "data-status": outcome.status }, outcome.status),
      notes.map((n) => el("span", { class: "note" }, n))
    ),
    // A sub-agent's call (design 0392): the child run it ran.
    result.child && childBlock ? row("child run", childBlock(result.child)) : null,
    row(
      "observation",
      outcome.observationIsSynthetic ? el("span", { class: "badge synthetic", title: "written by the library, not by the executor" }, "synthetic") : null,
      outcome.observationTruncatedChars > 0 ? el("span", { class: "note" }, `${outcome.observationTruncatedChars} characters cut`) : null,
      sentAs,
      folded(outcome.observation, { class: "observation" })
    )
  ]
  if (outcome.observationIsSynthetic || result.executorObservation !== outcome.observation) {
    parts.push(
      row(
        "executor",
        el("span", { class: "note" }, "audit only, not in history"),
        result.executorObservation === "" ? el("div", { class: "muted" }, "(no text: the action did not run)") : folded(result.executorObservation, { class: "executor" })
      )
    )
  }
  return parts
}

const stepRange = (from, to) => (from === to - 1 ? `${from}` : `${from}–${to - 1}`)

/** `steps 0–11 summarised · 12–15 observations masked · 16–18 verbatim`, as `polyloop show` says it. */
const sentText = (sent, step) => {
  const parts = []
  if (sent.replacedBefore > 0) parts.push(`steps ${stepRange(0, sent.replacedBefore)} ${sent.summarised ? "summarised" : "dropped"}`)
  if (sent.maskedBefore > sent.replacedBefore) parts.push(`${stepRange(sent.replacedBefore, sent.maskedBefore)} observations masked`)
  if (step > sent.maskedBefore) parts.push(`${stepRange(sent.maskedBefore, step)} verbatim`)
  return parts.length === 0 ? "the task only" : parts.join(" · ")
}

/**
 * The messages of step `step`'s request as the model was sent them (design 0300's view: steps
 * before `replacedBefore` summarised or dropped, observations before `maskedBefore` masked): the
 * system prompt, the task, then each earlier step's reply and its observations.
 */
const requestMessages = (transcript, step) => {
  const sent = step.history?.sent ?? { replacedBefore: 0, maskedBefore: 0, summarised: false }
  const messages = [
    { role: "system", text: String(transcript.snapshot?.agent?.systemPrompt ?? "") },
    { role: "user", text: transcript.task }
  ]
  if (sent.replacedBefore > 0) {
    const compaction = (transcript.compactions ?? []).filter((c) => c.step <= step.step && c.toStep === sent.replacedBefore).pop()
    messages.push(
      sent.summarised && compaction?.summary !== undefined
        ? { role: "user", text: compaction.summary, note: `summary of steps ${stepRange(0, sent.replacedBefore)}` }
        : { role: "note", text: `steps ${stepRange(0, sent.replacedBefore)} ${sent.summarised ? "summarised" : "dropped"}` }
    )
  }
  for (const earlier of transcript.steps) {
    if (earlier.step >= step.step) break
    if (earlier.step < sent.replacedBefore) continue
    const reply = earlier.reply?.reply
    if (!reply) continue
    const calls = reply.toolCalls.map((call) => `${call.name}(${call.argumentsText})`).join("\n")
    messages.push({ role: "assistant", text: [reply.text, calls].filter((t) => t !== "").join("\n"), note: `step ${earlier.step}` })
    for (const result of resultsOf(earlier)) {
      messages.push(
        earlier.step < sent.maskedBefore
          ? { role: "tool", text: "(observation masked)", note: `step ${earlier.step}` }
          : { role: "tool", text: result.outcome.observation, note: `step ${earlier.step}` }
      )
    }
  }
  return messages
}

/** A step's request as a chat, made when opened (a 1,000-step run would otherwise hold a million messages). */
const requestPanel = (step, context) => {
  const details = el("details", { class: "request" }, el("summary", {}, "request as sent"))
  details.addEventListener("toggle", () => {
    if (!details.open || details.querySelector(".chat")) return
    const messages = context.requestOf(step)
    details.append(
      el(
        "ol",
        { class: "chat" },
        messages.map((m) =>
          el(
            "li",
            { class: `message ${m.role}`, "data-role": m.role },
            el("span", { class: "role" }, m.role),
            m.note ? el("span", { class: "note" }, m.note) : null,
            folded(m.text)
          )
        )
      )
    )
  })
  return details
}

const renderStep = (step, context) => {
  const results = resultsOf(step)
  const worst = ["EnvError", "NotExecuted", "Executed"].find((status) => results.some((r) => r.outcome.status === status))
  const statusClass = !step.completed ? "s-pending" : worst === undefined ? "s-none" : `s-${worst}`
  const facts = []
  if (step.tokens) facts.push(`${step.tokens.input + step.tokens.output} tokens (${step.tokens.input} in, ${step.tokens.output} out)`)
  if (step.completion) facts.push(duration(step.completion.elapsed))
  const node = el(
    "section",
    { class: `step ${statusClass}`, id: `step-${step.step}`, "data-step": step.step },
    el("div", { class: "step-head" }, el("span", { class: "title" }, `step ${step.step}`), el("span", { class: "muted" }, facts.join(" · ")))
  )
  // What the model was sent at this step under the run's history policy (design 0300).
  for (const c of (context.compactions ?? []).filter((c) => c.step === step.step)) {
    node.append(
      row(
        "compacted",
        el("span", { class: "badge compacted" }, c.summary !== undefined ? "summarised" : "dropped"),
        el("span", { class: "note" }, `steps ${stepRange(0, c.toStep)} before this request (${c.reason}: ${c.requestTokens} tokens counted)`),
        c.summary !== undefined ? folded(c.summary, { class: "summary" }) : null
      )
    )
  }
  if (step.history) node.append(row("sent", el("span", { class: "sent" }, sentText(step.history.sent, step.step))))
  if (step.reply && context.requestOf) node.append(requestPanel(step, context))
  if (step.reply) {
    const reply = step.reply.reply
    node.append(row("reply", folded(reply.text, { class: "reply" })))
    if (reply.toolCalls.length > 0) {
      node.append(
        row("tool calls", el("ul", { class: "actions" }, reply.toolCalls.map((call) => el("li", {}, el("code", {}, call.name), el("span", { class: "note" }, call.id), folded(call.argumentsText)))))
      )
    }
    if (reply.finishReason) node.append(row("finish reason", el("code", {}, reply.finishReason)))
  }
  for (const request of context.approvals.filter((r) => r._tag === "ApprovalRequested" && r.step === step.step)) {
    const decided = context.approvals.find((d) => d._tag === "ApprovalDecided" && d.callId === request.callId && d.actionHash === request.actionHash)
    node.append(
      row(
        "approval",
        el("span", { class: "note" }, `call ${request.callId} needed a person's decision (requested ${time(request.at)})`),
        decided
          ? el(
            "div",
            { class: "decision-made" },
            el("span", { class: `badge ${decided.decision._tag === "Approve" ? "completed" : "enverror"}` }, decided.decision._tag === "Approve" ? "approved" : "rejected"),
            el("span", { class: "note" }, `by ${decided.by}, ${time(decided.at)}`),
            decided.decision._tag === "Reject" ? pre(decided.decision.reason) : null
          )
          : el("span", { class: "badge suspended" }, "waiting for a decision")
      )
    )
  }
  if (!step.completed) {
    node.append(
      el(
        "div",
        { class: "waiting" },
        context.finished
          ? "The reply is logged but the step never completed."
          : context.suspended
          ? "The reply is logged; the step waits for a person's decision on its calls (above), then for the run to be run again."
          : "The reply is logged; the step has not completed yet (it is running now, or the process stopped mid-step and a resume will settle it)."
      )
    )
    return node
  }
  const decision = step.completion.decision
  if (decision._tag === "Finish" && step.reply && decision.answer === step.reply.reply.text) {
    node.append(row("decision", el("span", { class: "badge decision" }, "Finish"), el("span", { class: "note decision-note" }, "the reply above is the answer")))
  } else if (decision._tag !== "Act") node.append(row("decision", ...renderDecision(decision)))
  // A reply may call several tools (one result each, in call order): each is labelled "action i of n".
  const called = decision._tag === "Act" ? Math.max(actionsOf(decision).length, results.length) : results.length
  if (results.length > 0) {
    results.forEach((result, i) => node.append(...renderResult(result, step, context.replayPolicyOf, called > 1 ? `action ${i + 1} of ${called}` : "action", context.childBlock).filter((part) => part !== null)))
  }
  else if (decision._tag === "Act") node.append(row(actionsOf(decision).length > 1 ? "actions" : "action", el("ul", { class: "actions" }, actionsOf(decision).map(renderAction))))
  return node
}

const budgetBar = (name, used, limit, format, of = "") => {
  const ratio = typeof limit === "number" && limit > 0 ? Math.min(1, used / limit) : 0
  return el(
    "div",
    { class: "budget", "data-budget": name },
    el("div", { class: "label" }, el("span", {}, `${name}${of}`), el("span", { class: "mono" }, typeof limit === "number" ? `${format(used)} / ${format(limit)}` : `${format(used)} (no limit)`)),
    el("div", { class: `bar${ratio >= 1 ? " full" : ""}` }, el("span", { style: undefined }))
  )
}

/**
 * What the budget bars measure: a run's use; a conversation's budget is per turn (design 0300),
 * so its bars show the turn under way (or the last one, when it awaits a message), with `turn`
 * its number; the whole conversation's use is said apart.
 */
const budgetUse = (transcript) => {
  const turns = transcript.turns ?? []
  const used = transcript.used
  if (turns.length === 0) return { ...used, turn: null }
  const awaiting = transcript.summary.status === "AwaitingMessage" || transcript.finished !== null
  if (awaiting) {
    const last = turns[turns.length - 1].counters
    return { steps: last.steps, effectiveSteps: last.effectiveSteps, tokens: last.usage.inputTokens + last.usage.outputTokens, elapsed: last.elapsed, turn: turns[turns.length - 1].turn }
  }
  const sum = (f) => turns.reduce((total, t) => total + f(t.counters), 0)
  return {
    steps: used.steps - sum((c) => c.steps),
    effectiveSteps: used.effectiveSteps - sum((c) => c.effectiveSteps),
    tokens: used.tokens - sum((c) => c.usage.inputTokens + c.usage.outputTokens),
    elapsed: used.elapsed - sum((c) => c.elapsed),
    turn: turns.length
  }
}

/** Sets the bars' widths (through the CSSOM: the policy allows no inline style attribute). */
const sizeBars = (container, transcript) => {
  const budget = transcript.budget ?? {}
  const used = budgetUse(transcript)
  const pairs = { steps: [used.steps, budget.maxSteps], "effective steps": [used.effectiveSteps, budget.maxEffectiveSteps], tokens: [used.tokens, budget.maxTokens], time: [used.elapsed, budget.maxDuration] }
  for (const node of container.querySelectorAll("[data-budget]")) {
    const [value, limit] = pairs[node.getAttribute("data-budget")] ?? [0, undefined]
    node.querySelector(".bar > span").style.width = typeof limit === "number" && limit > 0 ? `${Math.min(100, (100 * value) / limit)}%` : "0%"
  }
}

const renderSnapshot = (transcript) => {
  const snapshot = transcript.snapshot ?? {}
  const agent = snapshot.agent ?? {}
  const tools = Array.isArray(snapshot.tools) ? snapshot.tools : []
  return el(
    "details",
    { class: "panel", id: "snapshot" },
    el("summary", {}, "Snapshot ", el("span", { class: "mono muted" }, `sha256 ${transcript.snapshotHash}`)),
    el(
      "dl",
      { class: "facts" },
      el("dt", {}, "polyloop"), el("dd", {}, String(snapshot.polyloop ?? "?")),
      el("dt", {}, "parser"), el("dd", { class: "mono" }, String(snapshot.parser ?? "?")),
      el("dt", {}, "observation limit"), el("dd", {}, agent.observationLimit == null ? "none" : `${agent.observationLimit} characters`)
    ),
    el("h2", {}, "System prompt"),
    pre(String(agent.systemPrompt ?? ""), { class: "system-prompt" }),
    el("h2", {}, "Model settings"),
    pre(json(agent.modelSettings ?? null)),
    el("h2", {}, `Tools (${tools.length})`),
    el(
      "div",
      { class: "tools" },
      tools.map((tool) =>
        el(
          "details",
          { class: "tool" },
          el("summary", {}, el("code", {}, String(tool.name)), el("span", { class: "note" }, `replay ${tool.replayPolicy}${tool.completesRun ? " · completes the run" : ""}`)),
          el("p", {}, String(tool.description ?? "")),
          pre(json(tool.parameters))
        )
      )
    ),
    el("h2", {}, "Synthetic observations"),
    pre(json(agent.syntheticObservations ?? null)),
    el("h2", {}, "History rendering"),
    pre(json(agent.historyRendering ?? null)),
    el("h2", {}, "Budget"),
    pre(json(agent.budget ?? null))
  )
}

/** Who decides, remembered by the browser (the server records its own default when empty). */
const deciderKey = "polyloop.decider"

/** What was typed in the decision inputs, kept while the page renders again (live updates). */
const typed = { by: undefined, reasons: new Map() }

/** The calls waiting for a decision, each with Approve / Reject (POST /api/runs/<id>/decisions). */
const renderWaiting = (transcript) => {
  // The page renders again with each live update: what was typed is kept across renders.
  const by = el("input", { type: "text", name: "by", placeholder: "your name (recorded as you claim it, next to the server's user)", value: typed.by ?? localStorage.getItem(deciderKey) ?? "" })
  by.addEventListener("input", () => (typed.by = by.value))
  by.addEventListener("change", () => localStorage.setItem(deciderKey, by.value.trim()))
  const calls = transcript.waiting.map((waiting) => {
    const reason = el("input", { type: "text", name: "reason", placeholder: "why not (told to the model)", value: typed.reasons.get(waiting.callId) ?? "" })
    reason.addEventListener("input", () => typed.reasons.set(waiting.callId, reason.value))
    const approve = el("button", { type: "button", class: "approve" }, "Approve")
    const reject = el("button", { type: "button", class: "reject" }, "Reject")
    const outcome = el("span", { class: "note outcome", role: "status" })
    const decide = async (decision) => {
      if (decision === "Reject" && reason.value.trim() === "") {
        outcome.textContent = "say why it is rejected: the model is told"
        reason.focus()
        return
      }
      approve.disabled = reject.disabled = true
      outcome.textContent = "recording…"
      try {
        const answer = await postJson(`/api/runs/${encodeURIComponent(transcript.runId)}/decisions`, {
          callId: waiting.callId,
          decision,
          actionHash: waiting.actionHash,
          by: by.value.trim(),
          ...(decision === "Reject" ? { reason: reason.value.trim() } : {})
        })
        outcome.textContent = `${decision === "Approve" ? "approved" : "rejected"} by ${answer.decided.by}; the run goes on when it is run again`
      } catch (error) {
        approve.disabled = reject.disabled = false
        outcome.textContent = `not recorded: ${error.message}`
      }
    }
    approve.addEventListener("click", () => void decide("Approve"))
    reject.addEventListener("click", () => void decide("Reject"))
    return el(
      "li",
      { class: "waiting-call", "data-call": waiting.callId },
      el("div", {}, el("code", {}, waiting.tool), el("span", { class: "note" }, `call ${waiting.callId} · step ${waiting.step} · requested ${time(waiting.requestedAt)}`)),
      waiting.action._tag === "ToolCall" ? pre(json(waiting.action.arguments), { class: "arguments" }) : pre(waiting.action.code, { class: "code" }),
      el("div", { class: "decide" }, approve, reject, reason, outcome)
    )
  })
  return el(
    "div",
    { class: "panel approvals", id: "waiting-calls" },
    el("h2", {}, "Waiting for a decision"),
    el("p", { class: "muted" }, "These calls run only once a person approves them. A decision is recorded in the run's log; the run goes on when it is run again (Agent.run with the same run id)."),
    el("label", { class: "by" }, "Decided by ", by),
    el("ul", { class: "actions" }, calls)
  )
}

/** The file names of the export formats. */
const exportFormats = [["jsonl", "JSONL records"], ["openai-chat", "openai-chat"], ["atif", "ATIF"]]

/**
 * A run's export links (what `polyloop export --format` writes). Fetched with the session (a plain
 * link would carry no credential: design 0370), then saved from a blob.
 */
const exportLinks = (runId) =>
  el(
    "span",
    { id: "exports" },
    exportFormats.map(([format, label]) => {
      const link = el("a", { href: `/api/runs/${encodeURIComponent(runId)}/export?format=${format}`, "data-format": format, class: "export" }, label)
      link.addEventListener("click", async (event) => {
        event.preventDefault()
        try {
          const response = await fetch(link.getAttribute("href"), { headers: Session.headers() })
          if (!response.ok) throw new Error(`${response.status} ${response.statusText}`)
          const name = /filename="([^"]+)"/.exec(response.headers.get("content-disposition") ?? "")?.[1] ?? `${runId}.${format}`
          const url = URL.createObjectURL(await response.blob())
          const save = el("a", { href: url, download: name })
          document.body.append(save)
          save.click()
          save.remove()
          setTimeout(() => URL.revokeObjectURL(url), 10000)
        } catch (error) {
          showProblem(`cannot export the run: ${error.message}`)
        }
      })
      return [link, " "]
    })
  )

const renderHeader = (transcript, live, table, subAgentFacts = []) => {
  const summary = transcript.summary
  const reason = summary.stopReason
  const facts = [
    ["agent", el("span", {}, summary.agent)],
    ["status", el("span", {}, statusBadge(summary.status), live ? el("span", { class: "note", id: "live-note" }, live) : null)],
    ["started", el("span", { class: "mono" }, time(transcript.startedAt))],
    ["step time", el("span", {}, duration(summary.elapsed))]
  ]
  if (transcript.forkedFrom) {
    const from = transcript.forkedFrom
    facts.push([
      "forked from",
      el(
        "span",
        { id: "forked-from" },
        el("a", { href: runHref(from.runId) }, from.runId),
        ` at step ${from.step} `,
        el("a", { href: compareHref(from.runId, transcript.runId), id: "compare-parent", class: "note" }, "compare with the parent"),
        el("span", { class: "note" }, from.differences.length === 0 ? "same configuration" : `${from.differences.length} difference(s) in the snapshot: ${from.differences.map((d) => d.path).join(", ")}`)
      )
    ])
  }
  facts.push(...subAgentFacts)
  if (table) {
    const model = transcript.snapshot?.agent?.modelSettings?.model
    const input = transcript.steps.reduce((sum, step) => sum + (step.tokens?.input ?? 0), 0)
    const output = transcript.steps.reduce((sum, step) => sum + (step.tokens?.output ?? 0), 0)
    const amount = costOf(table, model, input, output)
    facts.push([
      "cost",
      el(
        "span",
        { id: "run-cost", "data-cost": amount ?? "" },
        amount === undefined ? `not priced: the price table names neither ${model ? JSON.stringify(model) : "an unnamed model"} nor *` : money(amount, table.currency),
        el("span", { class: "note" }, `${input} input and ${output} output tokens${model ? ` of ${model}` : ""}`)
      )
    ])
  }
  const compareForm = el(
    "form",
    { id: "compare-form", class: "inline-form" },
    el("input", { type: "text", name: "with", placeholder: "another run's id (a replay, another epoch…)", maxlength: "200", required: true, "aria-label": "run to compare with" }),
    el("button", { type: "submit" }, "compare")
  )
  compareForm.addEventListener("submit", (event) => {
    event.preventDefault()
    const other = new FormData(compareForm).get("with")
    if (typeof other !== "string" || other.trim() === "") return
    history.pushState(null, "", compareHref(transcript.runId, other.trim()))
    route()
  })
  facts.push(["compare with", compareForm])
  facts.push(["export", exportLinks(transcript.runId)])
  if (transcript.resumes.length > 0) facts.push(["resumes", el("span", {}, `${transcript.resumes.length}× (at step ${transcript.resumes.map((r) => r.fromStep).join(", ")})`)])
  if (reason) facts.push(["stop reason", el("span", { class: `badge ${stopReasonClass(reason)}`, id: "stop-reason" }, stopReasonLabel(reason))])
  if (reason && reason._tag === "Completed" && typeof reason.answer === "string") facts.push(["answer", pre(reason.answer)])
  if (reason && reason._tag === "EnvError") facts.push(["env error", pre(reason.message)])
  if (transcript.finished) facts.push(["finished", el("span", { class: "mono" }, `${time(transcript.finished.finishedAt)}${transcript.finished.eventDeliveryFailures > 0 ? ` · ${transcript.finished.eventDeliveryFailures} event deliveries failed` : ""}`)])
  const budget = transcript.budget ?? {}
  const used = budgetUse(transcript)
  const of = used.turn === null ? "" : ` (turn ${used.turn})`
  const budgets = el(
    "div",
    { class: "budgets", id: "budgets" },
    budgetBar("steps", used.steps, budget.maxSteps, String, of),
    budgetBar("effective steps", used.effectiveSteps, budget.maxEffectiveSteps, String, of),
    budgetBar("tokens", used.tokens, budget.maxTokens, String, of),
    budgetBar("time", used.elapsed, budget.maxDuration, duration, of)
  )
  const total = used.turn === null
    ? null
    : el(
      "p",
      { class: "muted", id: "budgets-total" },
      `The budget is per turn; all ${(transcript.turns ?? []).length} turns: ${transcript.used.steps} steps, ${transcript.used.tokens} tokens, ${duration(transcript.used.elapsed)}.`
    )
  return el(
    "div",
    { id: "run-header" },
    el("h1", {}, "run ", el("span", { class: "mono", id: "run-id" }, transcript.runId)),
    (transcript.waiting ?? []).length > 0 ? renderWaiting(transcript) : null,
    el("div", { class: "panel" }, el("dl", { class: "facts" }, facts.map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)])), el("h2", {}, "Budget used"), budgets, total),
    el("div", { class: "panel" }, el("h2", {}, "Task"), pre(transcript.task, { class: "task" }))
  )
}

/** Renders a transcript into the page, replacing only the steps that changed (open details stay open). */
const makeRunView = (priceTable) => {
  const header = el("div", {})
  const snapshotSlot = el("div", {})
  const steps = el("div", { id: "steps" })
  const footer = el("div", { class: "finished-line" })
  const rendered = new Map()
  let snapshotHash = null
  let lastChange = null
  const forksSlot = el("div", { id: "forks" })
  const timelineSlot = el("div", {})
  let timelineKey = null
  // Sub-agent runs (design 0412): the header's facts and the section follow the run's tree.
  let lastShown = null
  const renderHead = (transcript, live) => {
    const head = renderHeader(transcript, live, priceTable, subAgentPart.facts(transcript))
    header.replaceChildren(head)
    sizeBars(head, transcript)
  }
  const subAgentPart = subAgents.runPart(priceTable, () => {
    if (lastShown !== null) renderHead(lastShown.transcript, lastShown.live)
  })
  // Jump to a step (design 0371): the step is made if the window had not made it, then scrolled to.
  const jump = el(
    "form",
    { id: "jump", class: "jump" },
    el("label", {}, "jump to step ", el("input", { type: "number", name: "step", min: "0", inputmode: "numeric", "aria-label": "step" })),
    el("button", { type: "submit" }, "go")
  )
  jump.addEventListener("submit", (event) => {
    event.preventDefault()
    const wanted = Number(new FormData(jump).get("step"))
    if (Number.isInteger(wanted)) scrollToStep(wanted)
  })
  main.replaceChildren(header, subAgentPart.section, timelineSlot, snapshotSlot, forksSlot, el("div", { class: "steps-head" }, el("h2", {}, "Steps"), jump), steps, footer)
  /**
   * The windowed list (design 0371): past `windowOver` steps, a step's section is made only while
   * its place is near the viewport (an IntersectionObserver with a margin of screens), and taken
   * down when it is far again; its place keeps the height it had (or an estimate), so the scroll
   * bar is the whole run's.
   */
  const windowOver = 100
  const estimate = 320
  const makers = new Map()
  const filled = new Set()
  const fill = (wrap) => {
    if (filled.has(wrap)) return
    const make = makers.get(wrap)
    if (!make) return
    wrap.replaceChildren(...make())
    wrap.style.minHeight = ""
    filled.add(wrap)
  }
  const empty = (wrap) => {
    if (!filled.has(wrap)) return
    wrap.style.minHeight = `${wrap.offsetHeight}px`
    wrap.replaceChildren()
    filled.delete(wrap)
  }
  const observer = typeof IntersectionObserver === "function"
    ? new IntersectionObserver((entries) => {
      for (const entry of entries) entry.isIntersecting ? fill(entry.target) : empty(entry.target)
    }, { rootMargin: "1500px 0px" })
    : null
  let windowed = false
  const scrollToStep = (index) => {
    const found = rendered.get(index)
    if (!found) return showProblem(`no step ${index} in this run`)
    showProblem(null)
    fill(found.node)
    found.node.scrollIntoView({ block: "start" })
    // The steps above it may be made now and change height: scrolled again once they are.
    requestAnimationFrame(() => requestAnimationFrame(() => found.node.scrollIntoView({ block: "start" })))
  }
  let forksShown = null
  const showForks = async (runId) => {
    try {
      const { forks } = await getJson(`/api/runs/${encodeURIComponent(runId)}/forks`)
      const key = JSON.stringify(forks)
      if (key === forksShown) return
      forksShown = key
      forksSlot.replaceChildren(
        ...(forks.length === 0
          ? []
          : [el(
            "div",
            { class: "panel" },
            el("h2", {}, `Forks (${forks.length})`),
            el(
              "ul",
              { class: "fork-list" },
              forks.map((fork) =>
                el(
                  "li",
                  {},
                  el("a", { href: runHref(fork.runId), class: "fork-run" }, fork.runId),
                  ` from step ${fork.step} `,
                  el("a", { href: compareHref(runId, fork.runId), class: "note compare-fork" }, "compare"),
                  " ",
                  statusBadge(fork.status),
                  fork.stopReasonLabel ? el("span", { class: "note" }, fork.stopReasonLabel) : null,
                  el("span", { class: "note" }, fork.differences === 0 ? "same configuration" : `${fork.differences} snapshot difference(s)`)
                )
              )
            )
          )])
      )
    } catch (error) {
      showProblem(`cannot list the forks: ${error.message}`)
    }
  }
  return {
    waiting: (runId) => {
      header.replaceChildren(el("h1", {}, "run ", el("span", { class: "mono" }, runId)), el("p", { class: "waiting", id: "waiting" }, "No run with this id in the store yet; waiting for it to start…"))
    },
    render: (transcript, changed) => {
      if (changed) lastChange = new Date()
      const finished = transcript.finished !== null
      const live = finished ? null : lastChange === null ? "no new writes since this page opened" : `live · last write seen ${lastChange.toLocaleTimeString()}`
      document.title = `${transcript.runId} · polyloop`
      lastShown = { transcript, live }
      renderHead(transcript, live)
      void showForks(transcript.runId)
      void subAgentPart.update(transcript)
      const nextTimelineKey = JSON.stringify([transcript.steps.map((s) => [s.step, s.completion?.elapsed, s.settledOnResume]), transcript.resumes])
      if (nextTimelineKey !== timelineKey) {
        timelineKey = nextTimelineKey
        timelineSlot.replaceChildren(renderTimeline(transcript))
      }
      if (snapshotHash !== transcript.snapshotHash) {
        snapshotHash = transcript.snapshotHash
        snapshotSlot.replaceChildren(renderSnapshot(transcript))
      }
      const tools = new Map((transcript.snapshot?.tools ?? []).map((tool) => [tool.name, tool.replayPolicy]))
      const context = {
        finished,
        suspended: transcript.summary.status === "Suspended",
        approvals: transcript.approvals ?? [],
        compactions: transcript.compactions ?? [],
        replayPolicyOf: (name) => tools.get(name),
        childBlock: subAgentPart.childBlock,
        requestOf: (step) => requestMessages(transcript, step)
      }
      windowed = windowed || (observer !== null && transcript.steps.length > windowOver)
      const resumesAt = (index) => transcript.resumes.filter((r) => r.fromStep === index)
      // A conversation (design 0300): each turn's end after its last step, and the next turn's message before its first.
      const turns = transcript.turns ?? []
      const spoken = transcript.userMessages ?? []
      const turnsAt = (index) =>
        turns.filter((t) => t.atStep === index).flatMap((t) => [
          el("div", { class: "turn-end", "data-turn": t.turn }, `turn ${t.turn} ended: ${stopReasonLabel(t.stopReason)} after ${t.counters.steps} steps`),
          ...spoken.filter((m) => m.turn === t.turn + 1).map((m) =>
            el("div", { class: "turn-message", "data-turn": m.turn }, el("span", { class: "badge turn" }, `turn ${m.turn}`), el("span", { class: "note" }, `message ${m.messageId}`), folded(m.text, { class: "user-message" })))
        ])
      const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40
      let previous = null
      for (const step of transcript.steps) {
        const key = JSON.stringify([step, resumesAt(step.step), finished, context.suspended, context.approvals.filter((a) => a.step === step.step), context.compactions.filter((c) => c.step === step.step), turns.filter((t) => t.atStep === step.step).map((t) => t.turn), spoken.length])
        const known = rendered.get(step.step)
        let node = known?.node
        if (known === undefined || known.key !== key) {
          const content = () => [
            ...(step.step > 0 ? turnsAt(step.step) : []),
            ...resumesAt(step.step).map((r) => el("div", { class: "resume" }, `↻ resumed at step ${r.fromStep} (${time(r.at)})`)),
            renderStep(step, context)
          ]
          let fresh
          if (windowed) {
            fresh = el("div", { class: "step-wrap", "data-step-place": step.step })
            fresh.style.minHeight = node && filled.has(node) ? `${node.offsetHeight}px` : node?.style.minHeight || `${estimate}px`
            makers.set(fresh, content)
            if (node && filled.has(node)) fill(fresh)
            if (node) {
              observer.unobserve(node)
              makers.delete(node)
              filled.delete(node)
            }
            observer.observe(fresh)
          } else fresh = el("div", { class: "step-wrap", "data-step-place": step.step }, content())
          if (node) node.replaceWith(fresh)
          else if (previous) previous.after(fresh)
          else steps.prepend(fresh)
          node = fresh
          rendered.set(step.step, { key, node })
        }
        previous = node
      }
      const trailing = transcript.resumes.filter((r) => !transcript.steps.some((s) => s.step === r.fromStep))
      footer.replaceChildren(
        ...turnsAt(transcript.steps.length),
        ...trailing.map((r) => el("div", { class: "resume" }, `↻ resumed at step ${r.fromStep} (${time(r.at)})`)),
        transcript.conversation && !finished
          ? el("p", { class: "waiting", id: "conversation" }, `A conversation: ${turns.length} turn(s) answered; new turns appear here as they are written.`)
          : finished
          ? el("p", { id: "finished" }, el("strong", {}, "finished "), `${time(transcript.finished.finishedAt)}: ${stopReasonLabel(transcript.finished.stopReason)} after ${transcript.finished.counters.steps} steps (${transcript.finished.counters.effectiveSteps} effective)`)
          : el("p", { class: "waiting", id: "unfinished" }, "Not finished: new steps appear here as they are written.")
      )
      if (changed && atBottom && !finished) window.scrollTo(0, document.body.scrollHeight)
    }
  }
}

const runPage = async (runId) => {
  document.title = `${runId} · polyloop`
  closeLive()
  const view = makeRunView(await prices())
  let shown = false
  try {
    view.render(await getJson(`/api/runs/${encodeURIComponent(runId)}`), false)
    shown = true
  } catch (error) {
    if (error.status === 404) view.waiting(runId)
    else showProblem(`cannot read the run: ${error.message}`)
  }
  const source = new EventSource(Session.streamUrl(`/api/runs/${encodeURIComponent(runId)}/live`))
  liveSource = source
  let lastId = null
  source.addEventListener("transcript", (event) => {
    showProblem(null)
    const transcript = JSON.parse(event.data)
    // The first document repeats what the page already shows (unless the run had not started).
    const changed = lastId === null ? !shown : lastId !== event.lastEventId
    // The first document of a page already shown repeats it: not rendered again (what is typed keeps its focus).
    if (changed) view.render(transcript, changed)
    shown = true
    lastId = event.lastEventId
    if (transcript.finished !== null) {
      source.close()
      setConnection("finished", false)
    } else setConnection("live", true)
  })
  source.addEventListener("missing", () => {
    setConnection("waiting for the run", true)
    view.waiting(runId)
  })
  source.addEventListener("problem", (event) => showProblem(`the store: ${JSON.parse(event.data).message}`))
  source.addEventListener("error", () => {
    if (source.readyState !== EventSource.CLOSED) setConnection("reconnecting…", false)
  })
}

// -----------------------------------------------------------------------------
// charts (Chart.js, served from /assets/chart.umd.min.js: no network at view time)
// -----------------------------------------------------------------------------
//
// Chart.js draws on a canvas: labels and tooltips from a run (agent names, stop reasons) are
// drawn as text, never parsed as markup. Each chart is followed by a table of the same numbers
// (the text rendering of the picture, and what the tests read).

const palette = ["#1f5fbf", "#1a7f37", "#d9a400", "#b42318", "#6e3bbf", "#0f8a8a", "#c2410c", "#64748b", "#be185d", "#4d7c0f"]
const colorOf = (index) => palette[index % palette.length]

/** The charts on the page, destroyed when the page changes. */
const charts = new Map()

const destroyCharts = () => {
  for (const chart of charts.values()) chart.destroy()
  charts.clear()
}

/** A chart in a box of the stylesheet's height; `id` names its canvas (the tests find it so). */
const chartBox = (id, config, tall) => {
  const canvas = el("canvas", { id, role: "img", "aria-label": config.label ?? id })
  const box = el("div", { class: tall ? "chart-box tall" : "chart-box" }, canvas)
  if (typeof window.Chart !== "function") {
    box.replaceChildren(el("p", { class: "muted" }, "The charting library did not load; the numbers are in the table below."))
    return box
  }
  // Drawn once the canvas is in the document (Chart.js measures its box).
  queueMicrotask(() => {
    charts.get(id)?.destroy()
    charts.set(id, new window.Chart(canvas, {
      type: config.type,
      data: config.data,
      options: { animation: false, responsive: true, maintainAspectRatio: false, ...config.options }
    }))
  })
  return box
}

/** A table of numbers (the chart's data as text). */
const dataTable = (id, head, rows) =>
  el(
    "table",
    { class: "plain", id },
    el("thead", {}, el("tr", {}, head.map(([text, num]) => el("th", { class: num ? "num" : undefined }, text)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map(([text, num, attrs]) => el("td", { class: num ? "num" : undefined, ...(attrs ?? {}) }, text)))))
  )

// -----------------------------------------------------------------------------
// a run's timeline
// -----------------------------------------------------------------------------

/** The timeline's rows: each completed step with its start on the run's step clock, its duration, tokens and marks. */
const timelineRows = (transcript) => {
  let clock = 0
  const resumedAt = new Set(transcript.resumes.map((r) => r.fromStep))
  return transcript.steps.filter((step) => step.completion).map((step) => {
    const start = clock
    clock += step.completion.elapsed
    const results = resultsOf(step)
    const worst = ["EnvError", "NotExecuted", "Executed"].find((status) => results.some((r) => r.outcome.status === status)) ?? "NoAction"
    const marks = []
    if (resumedAt.has(step.step)) marks.push("resumed here")
    if (step.settledOnResume) marks.push("retried on resume")
    // The model call's share of the step (recorded since issue 34; absent for a step resumed after its reply, and in older logs).
    const model = typeof step.completion.modelElapsed === "number" ? Math.min(step.completion.modelElapsed, step.completion.elapsed) : null
    return {
      step: step.step,
      start,
      elapsed: step.completion.elapsed,
      model,
      input: step.tokens?.input ?? 0,
      output: step.tokens?.output ?? 0,
      status: worst,
      marks
    }
  })
}

const statusColors = { Executed: "#1a7f37", NotExecuted: "#d9a400", EnvError: "#b42318", NoAction: "#1f5fbf" }

/** The most bars of a timeline chart: longer runs are drawn in buckets of consecutive steps (design 0371). */
const maxTimelineBars = 200

/** Consecutive rows merged into at most `maxTimelineBars` buckets: their span, summed tokens, worst status, marks. */
const bucketRows = (rows) => {
  if (rows.length <= maxTimelineBars) return rows
  const size = Math.ceil(rows.length / maxTimelineBars)
  const buckets = []
  for (let i = 0; i < rows.length; i += size) {
    const part = rows.slice(i, i + size)
    const last = part[part.length - 1]
    buckets.push({
      step: part[0].step,
      label: `steps ${part[0].step}–${last.step}`,
      start: part[0].start,
      elapsed: last.start + last.elapsed - part[0].start,
      model: null,
      input: part.reduce((sum, r) => sum + r.input, 0),
      output: part.reduce((sum, r) => sum + r.output, 0),
      status: ["EnvError", "NotExecuted", "Executed", "NoAction"].find((status) => part.some((r) => r.status === status)),
      marks: [...new Set(part.flatMap((r) => r.marks))]
    })
  }
  return buckets
}

const renderTimeline = (transcript) => {
  const all = timelineRows(transcript)
  if (all.length === 0) return el("div", { class: "panel", id: "timeline" }, el("h2", {}, "Timeline"), el("p", { class: "muted" }, "No step has completed yet."))
  const rows = bucketRows(all)
  const labels = rows.map((r) => `${r.label ?? `step ${r.step}`}${r.marks.length > 0 ? " ↻" : ""}`)
  const statuses = ["Executed", "NotExecuted", "EnvError", "NoAction"].filter((status) => rows.some((r) => r.status === status))
  const timeline = chartBox("chart-timeline", {
    label: "each step as a bar of its duration on the run's step clock",
    type: "bar",
    data: {
      labels,
      datasets: [{
        label: "model call",
        data: rows.map((r) => (r.model === null ? null : [r.start, r.start + r.model])),
        backgroundColor: "#8a94a6",
        grouped: false
      }, ...statuses.map((status) => ({
        label: status === "NoAction" ? "no action" : `${status} (tools)`,
        data: rows.map((r) => (r.status === status ? [r.start + (r.model ?? 0), r.start + r.elapsed] : null)),
        backgroundColor: statusColors[status],
        borderColor: rows.map((r) => (r.marks.length > 0 ? "#6e3bbf" : statusColors[status])),
        borderWidth: rows.map((r) => (r.marks.length > 0 ? 3 : 0)),
        grouped: false
      }))]
    },
    options: {
      indexAxis: "y",
      scales: { x: { title: { display: true, text: "step time (ms; time spent crashed does not count)" }, beginAtZero: true } },
      plugins: {
        tooltip: {
          callbacks: {
            label: (item) => {
              const r = rows[item.dataIndex]
              const split = r.model === null ? "" : ` (model ${duration(r.model)}, tools ${duration(r.elapsed - r.model)})`
              return `${duration(r.elapsed)}${split} · ${r.input + r.output} tokens${r.marks.length > 0 ? ` · ${r.marks.join(", ")}` : ""}`
            }
          }
        }
      }
    }
  }, rows.length > 8)
  const tokens = chartBox("chart-step-tokens", {
    label: "tokens per step, input and output",
    type: "bar",
    data: {
      labels,
      datasets: [
        { label: "input tokens", data: rows.map((r) => r.input), backgroundColor: "#1f5fbf" },
        { label: "output tokens", data: rows.map((r) => r.output), backgroundColor: "#0f8a8a" }
      ]
    },
    options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, title: { display: true, text: "tokens" } } } }
  })
  const table = () => dataTable(
    "timeline-table",
    [["step"], ["starts at", true], ["duration", true], ["model", true], ["tools", true], ["input tokens", true], ["output tokens", true], ["status"], ["marks"]],
    all.map((r) => [
      [String(r.step), false, { "data-step": r.step }],
      [duration(r.start), true],
      [duration(r.elapsed), true, { "data-elapsed": r.elapsed }],
      [r.model === null ? "—" : duration(r.model), true, { "data-model": r.model === null ? "" : r.model }],
      [r.model === null ? "—" : duration(r.elapsed - r.model), true],
      [String(r.input), true],
      [String(r.output), true],
      [r.status],
      [r.marks.join(", "), false, { "data-marks": r.marks.join(",") }]
    ])
  )
  // The table of every step, made when opened (10,000 rows are not made for a page that never looks).
  const numbers = el("details", { class: "data" }, el("summary", {}, "the numbers"))
  if (all.length <= maxTimelineBars) numbers.append(table())
  else numbers.addEventListener("toggle", () => numbers.open && numbers.querySelector("table") === null && numbers.append(table()))
  return el(
    "div",
    { class: "panel", id: "timeline" },
    el("h2", {}, "Timeline"),
    el(
      "p",
      { class: "muted" },
      "Each completed step as a bar of its duration, coloured by what its actions did; steps where the run was resumed, or whose action was settled again on a resume, are outlined and marked ↻. " +
        "Each bar starts with its model call (grey), then its tools; a step resumed after its reply was logged, or one from a log written before the split was recorded, is one bar."
    ),
    all.length > rows.length ? el("p", { class: "muted", id: "timeline-buckets" }, `${all.length} steps, drawn as ${rows.length} bars of ${all.length / rows.length > 1 ? Math.ceil(all.length / maxTimelineBars) : 1} consecutive steps each (the numbers have every step).`) : null,
    el("div", { class: "charts" }, el("div", {}, timeline), el("div", {}, tokens)),
    numbers
  )
}

// -----------------------------------------------------------------------------
// statistics
// -----------------------------------------------------------------------------

const groupLabel = (group) => `${group.agent} · ${group.snapshotHash.slice(0, 8)}`

const statsParams = () => {
  const params = new URLSearchParams(location.search)
  const keep = new URLSearchParams()
  for (const name of ["agent", "snapshot", "page", "agentPage"]) {
    const value = params.get(name)
    if (value) keep.set(name, value)
  }
  return keep
}

const plural = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`

/** A row's figures after its key cells: runs, stop reasons, steps, effective steps, tokens, resumes, cost. */
const figureCells = (g, cost, currency) => [
  [String(g.runs), true],
  [Object.entries(g.stopReasons).map(([k, v]) => `${k} ${v}`).join(", ")],
  [`${g.steps.median} / ${g.steps.p90} / ${g.steps.max}`, true],
  [`${g.effectiveSteps.median} / ${g.effectiveSteps.p90} / ${g.effectiveSteps.max}`, true],
  [`${g.tokens.median} / ${g.tokens.p90} / ${g.tokens.max}`, true],
  [`${g.resumedRuns} (${g.resumes})`, true],
  ...(currency && cost ? [[`${cost.amount.toFixed(6)}${cost.unpriced > 0 ? ` (${cost.unpriced} unpriced)` : ""}`, true, { "data-cost": cost.amount }]] : [])
]

const figureHeads = (currency) => [["runs", true], ["stop reasons"], ["steps (median / p90 / max)", true], ["effective steps", true], ["tokens", true], ["resumed runs (resumes)", true], ...(currency ? [[`cost (${currency})`, true]] : [])]

const cellsRow = (attrs, cells) => el("tr", attrs, cells.map(([text, num, more]) => el("td", { class: num ? "num" : undefined, ...(more ?? {}) }, text)))

/** A pager: previous / "page n of m" / next, moving the URL's `param`. */
const pager = (id, page, count, pageSize, param) => {
  const pages = Math.max(1, Math.ceil(count / pageSize))
  const go = (next) => {
    const params = statsParams()
    if (next > 1) params.set(param, String(next))
    else params.delete(param)
    params.set("view", "stats")
    history.pushState(null, "", `/?${params}`)
    route()
  }
  const prev = el("button", { type: "button", class: "prev", disabled: page <= 1 }, "← previous")
  const next = el("button", { type: "button", class: "next", disabled: page >= pages }, "next →")
  prev.addEventListener("click", () => go(page - 1))
  next.addEventListener("click", () => go(page + 1))
  return pages <= 1 ? null : el("div", { class: "pager", id }, prev, el("span", {}, `page ${page} of ${pages}`), next)
}

const statsPage = async () => {
  document.title = "statistics · polyloop"
  closeLive()
  const params = statsParams()
  let data
  try {
    data = await getJson(`/api/stats?${params}`)
    showProblem(null)
  } catch (error) {
    showProblem(`cannot compute the statistics: ${error.message}`)
    return
  }
  const { groups, groupCount, byAgent, chart, finished, histograms, cost, agents } = data
  const currency = cost?.currency ?? null
  const totalCost = cost?.total ?? 0
  const unpriced = cost?.unpriced ?? 0
  const oneAgent = params.get("agent")
  const filter = el(
    "form",
    { class: "filters", id: "stats-filters" },
    select("agent", "Agent", oneAgent ?? "", agents.map((a) => [a, a])),
    el("span", { class: "muted", id: "stats-count" }, `${plural(finished, "finished run")} of ${plural(byAgent.count, "agent")} in ${plural(groupCount, "configuration")}`)
  )
  filter.addEventListener("change", (event) => {
    const next = statsParams()
    next.delete("page")
    next.delete("agentPage")
    if (event.target.value) next.set(event.target.name, event.target.value)
    else next.delete(event.target.name)
    next.set("view", "stats")
    history.pushState(null, "", `/?${next}`)
    route()
  })
  const reasons = [...new Set(chart.bars.flatMap((b) => Object.keys(b.stopReasons)))].sort()
  const stopChart = chartBox("chart-stop-reasons", {
    label: chart.by === "agent" ? "stop reasons per agent (stacked)" : "stop reasons per snapshot (stacked)",
    type: "bar",
    data: {
      labels: chart.bars.map((b) => b.label),
      datasets: reasons.map((reason, i) => ({ label: reason, data: chart.bars.map((b) => b.stopReasons[reason] ?? 0), backgroundColor: colorOf(i) }))
    },
    options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 }, title: { display: true, text: "runs" } } } }
  }, true)
  const histogramChart = (id, label, bins, axis, color) =>
    chartBox(id, {
      label,
      type: "bar",
      data: { labels: bins.map((b) => b.label), datasets: [{ label: "runs", data: bins.map((b) => b.count), backgroundColor: color, barPercentage: 1, categoryPercentage: 0.95 }] },
      options: {
        plugins: { legend: { display: false } },
        scales: { x: { title: { display: true, text: axis } }, y: { beginAtZero: true, ticks: { precision: 0 }, title: { display: true, text: "runs" } } }
      }
    })
  /** One agent's snapshots, fetched when its row is opened, shown under it. */
  const expand = async (row, button, agent) => {
    const shown = [...row.parentNode.querySelectorAll(`tr.snapshot-row`)].filter((r) => r.getAttribute("data-agent") === agent)
    if (shown.length > 0) {
      for (const r of shown) r.remove()
      button.textContent = "▸"
      button.setAttribute("aria-expanded", "false")
      return
    }
    button.disabled = true
    try {
      const detail = await getJson(`/api/stats?${new URLSearchParams({ agent, pageSize: "200" })}`)
      const rows = detail.groups.map((g, i) =>
        cellsRow({ class: "snapshot-row", "data-agent": agent, "data-snapshot": g.snapshotHash }, [
          [""],
          [el("a", { href: `/?${new URLSearchParams({ view: "stats", agent, snapshot: g.snapshotHash.slice(0, 16) })}`, class: "mono", title: g.snapshotHash }, g.snapshotHash.slice(0, 12))],
          ...figureCells(g, detail.cost?.groups?.[i], currency)
        ]))
      if (detail.groupCount > detail.groups.length) rows.push(el("tr", { class: "snapshot-row", "data-agent": agent }, el("td", { colspan: "9", class: "muted" }, `… ${detail.groupCount - detail.groups.length} more: choose the agent above`)))
      row.after(...rows)
      button.textContent = "▾"
      button.setAttribute("aria-expanded", "true")
    } catch (error) {
      showProblem(`cannot read the snapshots of ${agent}: ${error.message}`)
    } finally {
      button.disabled = false
    }
  }
  let table
  if (oneAgent === null) {
    table = el(
      "div",
      {},
      el(
        "table",
        { class: "plain", id: "stats-agents" },
        el("thead", {}, el("tr", {}, [["agent"], ["snapshots", true], ...figureHeads(currency)].map(([text, num]) => el("th", { class: num ? "num" : undefined }, text)))),
        el(
          "tbody",
          {},
          byAgent.rows.map((g, i) => {
            const button = el("button", { type: "button", class: "expand", "aria-expanded": "false", title: `show the snapshots of ${g.agent}` }, "▸")
            const row = cellsRow({ class: "agent-row", "data-agent": g.agent }, [
              [el("span", { class: "nowrap" }, button, " ", el("a", { href: `/?${new URLSearchParams({ view: "stats", agent: g.agent })}` }, g.agent)), false, { "data-agent": g.agent }],
              [String(g.snapshots), true],
              ...figureCells(g, cost?.agents?.[i], currency)
            ])
            button.addEventListener("click", () => void expand(row, button, g.agent))
            return row
          })
        )
      ),
      pager("stats-agents-pager", byAgent.page, byAgent.count, byAgent.pageSize, "agentPage")
    )
  } else {
    table = el(
      "div",
      {},
      dataTable(
        "stats-table",
        [["agent"], ["snapshot"], ...figureHeads(currency)],
        groups.map((g, i) => [
          [g.agent, false, { "data-agent": g.agent }],
          [g.snapshotHash.slice(0, 12), false, { class: "mono", title: g.snapshotHash }],
          ...figureCells(g, cost?.groups?.[i], currency)
        ])
      ),
      pager("stats-pager", data.page, groupCount, data.pageSize, "page")
    )
  }
  const costLine = currency
    ? el("p", { id: "stats-cost", "data-cost": totalCost }, el("strong", {}, "cost "), money(totalCost, currency), unpriced > 0 ? el("span", { class: "note" }, `${unpriced} run(s) of a model the price table does not price`) : null)
    : el("p", { class: "muted" }, "Start the viewer with --prices <table.json> to see what these tokens cost.")
  main.replaceChildren(
    el("h1", {}, "Statistics"),
    el("p", { class: "muted" }, "Finished runs, as `polyloop stats` counts them: per agent, each agent's snapshots (configurations) on asking (the same figures: hover a bar for its number)."),
    filter,
    finished === 0
      ? el("p", { class: "muted", id: "stats-empty" }, "No finished runs match.")
      : el(
        "div",
        {},
        el(
          "div",
          { class: "panel" },
          el("h2", {}, oneAgent === null ? "Stop reasons per agent" : `Stop reasons per snapshot of ${oneAgent}`),
          chart.left.bars === 0
            ? null
            : el("p", { class: "muted", id: "chart-left" }, `The ${chart.bars.length} ${chart.by === "agent" ? "agents" : "snapshots"} with the most runs; ${chart.left.bars} more (${plural(chart.left.runs, "run")}) are in the table.`),
          stopChart,
          table,
          costLine
        ),
        el(
          "div",
          { class: "charts" },
          el("div", { class: "panel" }, el("h2", {}, "Steps per run"), histogramChart("chart-steps", "steps per run", histograms.steps, "steps", "#1f5fbf")),
          el("div", { class: "panel" }, el("h2", {}, "Tokens per run"), histogramChart("chart-tokens", "tokens per run", histograms.tokens, "tokens", "#0f8a8a")),
          el("div", { class: "panel" }, el("h2", {}, "Runs over time"), histogramChart("chart-over-time", "runs started per period (UTC)", histograms.overTime, "started (UTC)", "#6e3bbf"))
        )
      )
  )
}

// -----------------------------------------------------------------------------
// compare two runs
// -----------------------------------------------------------------------------

/** What a step is, for comparing: the reply (text, calls), the actions, their statuses and observations. */
const stepFacts = (step) => {
  if (!step) return null
  const reply = step.reply?.reply
  return {
    requestHash: step.reply?.requestHash ?? null,
    reply: reply ? reply.text : null,
    calls: reply ? reply.toolCalls.map((c) => `${c.name} ${c.argumentsText}`).join("\n") : null,
    results: resultsOf(step).map((r) => `${r.handlerFailed && r.outcome.status === "Executed" ? "tool failed" : r.outcome.status}: ${r.outcome.observation}`).join("\n"),
    decision: step.completion?.decision?._tag ?? null
  }
}

const sameFacts = (a, b) => JSON.stringify(a) === JSON.stringify(b)

/** A line diff (longest common subsequence) of two texts: rows of [kind, line], kind ctx | del | ins. */
const lineDiff = (left, right) => {
  const a = (left ?? "").split("\n")
  const b = (right ?? "").split("\n")
  if (a.length * b.length > 250000) return [...a.map((l) => ["del", l]), ...b.map((l) => ["ins", l])]
  const lcs = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0))
  for (let i = a.length - 1; i >= 0; i--) for (let j = b.length - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1])
  const rows = []
  let i = 0
  let j = 0
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      rows.push(["ctx", a[i]])
      i++
      j++
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) rows.push(["del", a[i++]])
    else rows.push(["ins", b[j++]])
  }
  while (i < a.length) rows.push(["del", a[i++]])
  while (j < b.length) rows.push(["ins", b[j++]])
  return rows
}

const diffBlock = (name, left, right) =>
  row(
    name,
    el("div", { class: "diff", "data-diff": name }, lineDiff(left, right).map(([kind, line]) => el("span", { class: kind }, `${kind === "del" ? "− " : kind === "ins" ? "+ " : "  "}${line}`)))
  )

/** A step's latency and cost (by the price table; none without one), for comparing. */
const stepMeta = (step, transcript, table) => {
  const elapsed = step.completion?.elapsed
  const model = transcript.snapshot?.agent?.modelSettings?.model
  const amount = table && step.tokens ? costOf(table, model, step.tokens.input, step.tokens.output) : undefined
  return el(
    "div",
    { class: "step-meta" },
    el("span", { class: "step-latency", "data-elapsed": elapsed ?? "" }, typeof elapsed === "number" ? duration(elapsed) : "not completed"),
    step.tokens ? el("span", { class: "note" }, `${step.tokens.input + step.tokens.output} tokens`) : null,
    amount === undefined ? null : el("span", { class: "step-cost note", "data-cost": amount }, money(amount, table.currency))
  )
}

/** Why a run has no step `i` (design 0371): it ended before, it has not run past its fork point, or it has not got there yet. */
const absentReason = (transcript, i, forkPoint) => {
  const last = transcript.steps.length === 0 ? null : transcript.steps[transcript.steps.length - 1].step
  if (transcript.finished) return `${transcript.runId} finished at step ${last ?? 0}`
  if (forkPoint !== null && (last === null || last < forkPoint)) return `${transcript.runId} has not run past its fork point (step ${forkPoint}) yet`
  return `${transcript.runId} has not reached step ${i} yet`
}

const stepSide = (step, transcript, table, absent) => {
  if (!step) return el("div", { class: "side absent muted" }, absent)
  const facts = stepFacts(step)
  return el(
    "div",
    { class: "side" },
    stepMeta(step, transcript, table),
    facts.reply !== null ? folded(facts.reply, { class: "reply" }) : el("span", { class: "muted" }, "(no reply)"),
    facts.calls ? folded(facts.calls, { class: "calls" }) : null,
    facts.results ? folded(facts.results, { class: "observation" }) : null
  )
}

/** A side's totals over the steps from `from`: steps, time, tokens, cost. */
const sideTotals = (transcript, from, table) => {
  const steps = transcript.steps.filter((s) => s.step >= from)
  const elapsed = steps.reduce((sum, s) => sum + (s.completion?.elapsed ?? 0), 0)
  const input = steps.reduce((sum, s) => sum + (s.tokens?.input ?? 0), 0)
  const output = steps.reduce((sum, s) => sum + (s.tokens?.output ?? 0), 0)
  const amount = table ? costOf(table, transcript.snapshot?.agent?.modelSettings?.model, input, output) : undefined
  return `${plural(steps.length, "step")}, ${duration(elapsed)}, ${input + output} tokens${amount === undefined ? "" : `, ${money(amount, table.currency)}`}`
}

const comparePage = async (leftId, rightId) => {
  document.title = `compare ${leftId} · ${rightId} · polyloop`
  closeLive()
  let left
  let right
  let table
  try {
    ;[left, right, table] = await Promise.all([getJson(`/api/runs/${encodeURIComponent(leftId)}`), getJson(`/api/runs/${encodeURIComponent(rightId)}`), prices()])
    showProblem(null)
  } catch (error) {
    showProblem(`cannot read the runs: ${error.message}`)
    return
  }
  // A fork and its parent (design 0371): the fork's steps before its fork point are the parent's, copied.
  const fork = right.forkedFrom?.runId === left.runId ? right : left.forkedFrom?.runId === right.runId ? left : null
  const parent = fork === null ? null : fork === right ? left : right
  const forkPoint = fork === null ? null : fork.forkedFrom.step
  const from = forkPoint ?? 0
  const count = Math.max(left.steps.length, right.steps.length)
  const byIndex = (transcript, i) => transcript.steps.find((s) => s.step === i)
  const forkUnrun = fork !== null && !fork.steps.some((s) => s.step >= forkPoint)
  let first = null
  const rows = []
  if (from > 0) {
    rows.push(
      el(
        "div",
        { class: "compare-row shared-steps" },
        el("div", { class: "index" }, from === 1 ? "step 0" : `steps 0–${from - 1}`),
        el("div", { class: "shared" }, `${from === 1 ? "step 0" : `steps 0–${from - 1}`}: copied from `, el("a", { href: runHref(parent.runId) }, parent.runId), ` by the fork (the same records, not run again)`)
      )
    )
  }
  for (let i = from; i < count; i++) {
    const a = byIndex(left, i)
    const b = byIndex(right, i)
    const same = sameFacts(stepFacts(a), stepFacts(b))
    if (!same && first === null && !forkUnrun) first = i
    rows.push(
      el(
        "div",
        { class: `compare-row ${same ? "same" : first === i ? "differs first-difference" : "differs"}`, "data-step": i, "data-same": same ? "yes" : "no" },
        el("div", { class: "index" }, `step ${i}`),
        stepSide(a, left, table, absentReason(left, i, left === fork ? forkPoint : null)),
        stepSide(b, right, table, absentReason(right, i, right === fork ? forkPoint : null))
      )
    )
  }
  const snapshotNote = left.snapshotHash === right.snapshotHash
    ? "the same configuration (snapshot hash)"
    : `different configurations: ${left.snapshotHash.slice(0, 12)} and ${right.snapshotHash.slice(0, 12)}` +
      (right.forkedFrom && right.forkedFrom.runId === left.runId ? ` (${right.forkedFrom.differences.map((d) => d.path).join(", ")})` : "")
  let difference
  if (forkUnrun) difference = el("p", { id: "fork-note" }, `${fork.runId} has not run past its fork point (step ${forkPoint}) yet: it holds the ${plural(forkPoint, "step")} it copied from ${parent.runId}. Run it (Agent.run with its id) to see where it goes.`)
  else if (first === null) difference = el("p", { id: "no-difference" }, `The runs agree on all ${count} steps.`)
  else {
    const a = stepFacts(byIndex(left, first))
    const b = stepFacts(byIndex(right, first))
    const request = a && b
      ? a.requestHash !== null && a.requestHash === b.requestHash
        ? `the model saw the same request at this step (sha256 ${a.requestHash.slice(0, 16)}…), and replied differently`
        : a.requestHash !== null && b.requestHash !== null
        ? `the model saw different requests (${a.requestHash.slice(0, 16)}… and ${b.requestHash.slice(0, 16)}…): the steps before are the same, so the difference is in the configuration (${snapshotNote})`
        : "no request fingerprint recorded for this step"
      : absentReason(a ? right : left, first, (a ? right : left) === fork ? forkPoint : null)
    difference = el(
      "div",
      { class: "panel diff-panel", id: "first-difference", "data-step": first },
      el("h2", {}, `First difference: step ${first}`),
      row("request", el("span", { id: "request-note" }, request)),
      diffBlock("reply", a?.reply, b?.reply),
      diffBlock("tool calls", a?.calls, b?.calls),
      diffBlock("observations", a?.results, b?.results)
    )
  }
  main.replaceChildren(
    el("h1", {}, "compare"),
    el(
      "div",
      { class: "panel" },
      el(
        "dl",
        { class: "facts" },
        el("dt", {}, "left (−)"), el("dd", {}, el("a", { href: runHref(leftId), id: "compare-left" }, leftId), ` · ${left.steps.length} steps · ${stopReasonLabel(left.finished?.stopReason) ?? "not finished"}`),
        el("dt", {}, "right (+)"), el("dd", {}, el("a", { href: runHref(rightId), id: "compare-right" }, rightId), ` · ${right.steps.length} steps · ${stopReasonLabel(right.finished?.stopReason) ?? "not finished"}`),
        el("dt", {}, "configuration"), el("dd", {}, snapshotNote),
        fork === null ? null : [el("dt", {}, "fork"), el("dd", {}, `${fork.runId} is a fork of ${parent.runId} at step ${forkPoint}`)],
        el("dt", {}, "totals"),
        el(
          "dd",
          { id: "compare-totals" },
          fork === null ? "all steps: " : `from the fork point (step ${forkPoint}): `,
          `${leftId} ${sideTotals(left, from, table)} · ${rightId} ${sideTotals(right, from, table)}`
        )
      )
    ),
    difference,
    el("h2", {}, "Steps, aligned"),
    el("div", { class: "compare-row compare-head" }, el("div", {}), el("div", { class: "muted" }, leftId), el("div", { class: "muted" }, rightId)),
    el("div", { id: "compare-steps" }, rows)
  )
  if (first !== null) document.getElementById("first-difference").scrollIntoView?.({ block: "start" })
}

// -----------------------------------------------------------------------------
// search (the store's own query, a page at a time)
// -----------------------------------------------------------------------------

/** `text` with each case-insensitive occurrence of `wanted` in a <mark> (elements and text nodes only). */
const marked = (text, wanted) => {
  const parts = []
  const lower = text.toLowerCase()
  const needle = wanted.toLowerCase()
  let at = 0
  for (let found = lower.indexOf(needle); needle !== "" && found >= 0; found = lower.indexOf(needle, at)) {
    if (found > at) parts.push(text.slice(at, found))
    parts.push(el("mark", {}, text.slice(found, found + needle.length)))
    at = found + needle.length
  }
  parts.push(text.slice(at))
  return parts
}

const fieldNames = { task: "task", reply: "reply", observation: "observation" }

const searchPage = async () => {
  closeLive()
  const params = new URLSearchParams(location.search)
  const q = params.get("q") ?? ""
  const page = Math.max(1, Number(params.get("page") ?? "1") || 1)
  document.title = `${q} · search · polyloop`
  const input = document.querySelector('#search input[name="q"]')
  if (input) input.value = q
  let data
  try {
    data = await getJson(`/api/search?${new URLSearchParams({ q, page: String(page) })}`)
    showProblem(null)
  } catch (error) {
    showProblem(`cannot search: ${error.message}`)
    main.replaceChildren(el("h1", {}, "Search"))
    return
  }
  const go = (next) => {
    const query = new URLSearchParams({ view: "search", q })
    if (next > 1) query.set("page", String(next))
    history.pushState(null, "", `/?${query}`)
    route()
  }
  const prev = el("button", { type: "button", disabled: data.page <= 1 }, "← previous")
  const next = el("button", { type: "button", disabled: !data.more }, "next →")
  prev.addEventListener("click", () => go(data.page - 1))
  next.addEventListener("click", () => go(data.page + 1))
  main.replaceChildren(
    el("h1", {}, "Search ", el("span", { class: "mono" }, q)),
    el("p", { class: "muted", id: "search-count" }, data.hits.length === 0 ? "Nothing found." : `hits ${(data.page - 1) * data.pageSize + 1}–${(data.page - 1) * data.pageSize + data.hits.length}${data.more ? ", more on the next page" : ""}`),
    el(
      "ul",
      { class: "hits", id: "hits" },
      data.hits.map((hit) =>
        el(
          "li",
          { "data-run": hit.runId, "data-field": hit.field, "data-step": hit.step ?? "" },
          el("a", { href: runHref(hit.runId), class: "mono" }, hit.runId),
          el("span", { class: "badge decision" }, fieldNames[hit.field] ?? hit.field),
          hit.step === null ? null : el("span", { class: "note" }, `step ${hit.step}`),
          el("div", { class: "snippet" }, marked(hit.snippet, q))
        )
      )
    ),
    el("div", { class: "pager" }, prev, el("span", { id: "search-page" }, `page ${data.page}`), next)
  )
}

document.getElementById("search")?.addEventListener("submit", (event) => {
  event.preventDefault()
  const q = new FormData(event.target).get("q")
  if (typeof q !== "string" || q.trim() === "") return
  history.pushState(null, "", `/?${new URLSearchParams({ view: "search", q })}`)
  route()
})

const compareHref = (left, right) => `/?${new URLSearchParams({ compare: left, with: right })}`

// -----------------------------------------------------------------------------
// routing
// -----------------------------------------------------------------------------

const route = () => {
  showProblem(null)
  destroyCharts()
  const params = new URLSearchParams(location.search)
  const runId = params.get("run")
  const view = params.get("view")
  for (const [id, current] of [["nav-runs", view === null && !params.get("compare")], ["nav-stats", view === "stats"]]) {
    document.getElementById(id)?.classList.toggle("current", current)
  }
  if (params.get("compare") && params.get("with")) void comparePage(params.get("compare"), params.get("with"))
  else if (view === "stats") void statsPage()
  else if (view === "search" && params.get("q")) void searchPage()
  else if (runId !== null && runId !== "") void runPage(runId)
  else void listPage()
}

/** Logs in with the URL's code when it has one (design 0370), then shows the page. */
const begin = async () => {
  try {
    await Session.start()
  } catch (error) {
    needsLogin()
    showProblem(`cannot log in with this URL: ${error.message}`)
    return
  }
  route()
}

window.addEventListener("popstate", route)
// The printed URL opened over this page changes only the fragment: no new document.
window.addEventListener("hashchange", () => {
  if (new URLSearchParams(location.hash.slice(1)).has("login")) void begin()
})
await begin()
