// The experiments page of `polyloop serve` (design 0320): `/experiments` lists the store's
// experiments; `/experiments?name=<name>&scorer=<scorer>` shows one — the results table (mean,
// clustered standard error, bootstrap 95% CI per configuration and scorer), a plot of each
// configuration's mean with its CI, and the per-sample grid (sample × configuration × epoch,
// coloured by score) whose every cell links to its run's transcript. Text is always set as text.

import * as Session from "./session.js"

const main = document.getElementById("main")
const problem = document.getElementById("problem")

const el = (tag, attributes = {}, ...children) => {
  const node = document.createElement(tag)
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null) continue
    if (key === "style") node.style.cssText = value
    else node.setAttribute(key, value)
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue
    node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child)
  }
  return node
}

const getJson = async (url) => {
  const response = await fetch(url, { headers: { accept: "application/json", ...Session.headers() } })
  const body = await response.json().catch(() => null)
  if (response.status === 401) {
    Session.forget()
    main.replaceChildren(Session.form(el, () => void start()))
    throw new Error(body?.error?.message ?? "this viewer needs its token")
  }
  if (!response.ok) throw new Error(body?.error?.message ?? `${response.status} ${response.statusText}`)
  return body
}

const fixed = (value, digits = 3) => (value === null || value === undefined ? "–" : Number(value).toFixed(digits))
const runHref = (runId) => `/?${new URLSearchParams({ run: runId })}`
const experimentHref = (name, scorer) => `/experiments?${new URLSearchParams(scorer === undefined ? { name } : { name, scorer })}`

/** A score's colour: red (0) through amber to green (1); values outside [0, 1] are clamped. */
const colour = (score) => {
  const t = Math.max(0, Math.min(1, score))
  return `hsl(${Math.round(t * 120)}, 65%, ${Math.round(82 - t * 12)}%)`
}

const showList = async () => {
  const { experiments } = await getJson("/api/experiments")
  main.replaceChildren(
    el("h1", {}, "Experiments"),
    experiments.length === 0
      ? el("p", { class: "muted" }, "No experiment in this store (run one with polyloop eval <module>).")
      : el("ul", { id: "experiments" }, experiments.map((name) => el("li", {}, el("a", { href: experimentHref(name) }, name))))
  )
}

const resultsTable = (results) =>
  el("table", { class: "runs", id: "results" },
    el("thead", {}, el("tr", {}, ["configuration", "scorer", "mean", "stderr", "95% CI", "finished", "failed", "steps", "tokens"].map((h) => el("th", {}, h)))),
    el("tbody", {}, results.configurations.flatMap((c) =>
      c.scores.map((s) =>
        el("tr", {},
          el("td", {}, c.configuration),
          el("td", {}, s.scorer),
          el("td", { class: "num" }, fixed(s.mean)),
          el("td", { class: "num" }, fixed(s.stderr)),
          el("td", { class: "num" }, s.ci === null ? "–" : `[${fixed(s.ci.lower)}, ${fixed(s.ci.upper)}]`),
          el("td", { class: "num" }, `${c.finished}/${c.planned}`),
          el("td", { class: "num" }, String(c.failed)),
          el("td", { class: "num" }, fixed(c.steps.mean, 1)),
          el("td", { class: "num" }, fixed(c.tokens.mean, 0))
        )))))

const plot = (results, scorer) => {
  const canvas = el("canvas", { id: "plot", "aria-label": `mean ${scorer} with its 95% confidence interval, per configuration` })
  const rows = results.configurations.map((c) => ({ name: c.configuration, stats: c.scores.find((s) => s.scorer === scorer) }))
  if (typeof Chart === "function") {
    new Chart(canvas, {
      data: {
        labels: rows.map((r) => r.name),
        datasets: [
          { type: "bar", label: "95% CI", data: rows.map((r) => (r.stats?.ci ? [r.stats.ci.lower, r.stats.ci.upper] : null)), backgroundColor: "rgba(59,130,246,0.25)", borderColor: "rgb(59,130,246)", borderWidth: 1 },
          { type: "scatter", label: "mean", data: rows.map((r) => ({ x: r.name, y: r.stats?.mean ?? null })), backgroundColor: "rgb(17,24,39)", pointRadius: 5 }
        ]
      },
      options: { animation: false, maintainAspectRatio: false, scales: { x: { type: "category" }, y: { title: { display: true, text: scorer } } } }
    })
  }
  return el("div", { class: "plot panel" }, canvas)
}

const grid = (g) =>
  el("table", { class: "grid", id: "grid" },
    el("thead", {},
      el("tr", {}, el("th", { rowspan: "2" }, "sample"), g.configurations.map((c) => el("th", { colspan: String(g.epochs) }, c))),
      el("tr", {}, g.configurations.flatMap(() => Array.from({ length: g.epochs }, (_, i) => el("th", {}, `e${i + 1}`))))),
    el("tbody", {}, g.samples.map((sample) =>
      el("tr", {},
        el("th", {}, sample),
        g.configurations.flatMap((c) =>
          g.cells[c][sample].map((cell) =>
            cell.score === null
              ? el("td", { class: "none", title: `${cell.runId}: no score` }, el("a", { href: runHref(cell.runId) }, "·"))
              : el("td", { style: `background: ${colour(cell.score)}`, title: `${cell.runId}: ${cell.score}` },
                el("a", { href: runHref(cell.runId) }, fixed(cell.score, cell.score % 1 === 0 ? 0 : 2)))))))))

const showExperiment = async (name, scorer) => {
  const query = scorer === null ? "" : `?${new URLSearchParams({ scorer })}`
  const { results, grid: g } = await getJson(`/api/experiments/${encodeURIComponent(name)}${query}`)
  document.title = `${name} · polyloop experiments`
  main.replaceChildren(
    el("p", {}, el("a", { href: "/experiments" }, "← experiments")),
    el("h1", {}, name),
    el("p", { class: "muted" }, `${results.samples} samples × ${results.epochs} epochs · dataset sha256 ${results.datasetHash.slice(0, 12)}… · standard errors clustered by sample; CI: percentile bootstrap over samples (${results.resamples} resamples, seed ${JSON.stringify(results.seed)})`),
    resultsTable(results),
    el("h2", {}, "Scores with their 95% CI"),
    el("p", {}, "scorer: ", g.scorers.map((s) => (s === g.scorer ? el("strong", {}, `${s} `) : el("a", { href: experimentHref(name, s) }, `${s} `)))),
    plot(results, g.scorer),
    el("h2", {}, `Per sample (${g.scorer}): each cell links to its run`),
    grid(g)
  )
}

const start = async () => {
  try {
    const params = new URLSearchParams(location.search)
    const name = params.get("name")
    if (name === null) await showList()
    else await showExperiment(name, params.get("scorer"))
  } catch (error) {
    problem.hidden = false
    problem.textContent = error instanceof Error ? error.message : String(error)
    if (main.querySelector("#login") === null) main.replaceChildren()
  }
}

/** Logs in with the URL's code when it has one (design 0370), then shows the page. */
const begin = async () => {
  try {
    await Session.start()
  } catch (error) {
    Session.forget()
    main.replaceChildren(Session.form(el, () => void start()))
    problem.hidden = false
    problem.textContent = `cannot log in with this URL: ${error.message}`
    return
  }
  await start()
}

window.addEventListener("hashchange", () => {
  if (new URLSearchParams(location.hash.slice(1)).has("login")) void begin()
})
await begin()
