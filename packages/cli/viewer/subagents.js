// polyloop run viewer: sub-agent runs (design 0412), imported by viewer.js.
//
// A sub-agent's call runs a durable child run `<parent>/<step>/<callId>` (design 0392); the
// parent's result of the call records it (`child`: run id, stop reason, steps, tokens, and its
// own children's totals), and the parent's `RunFinished.counters.children` sums every
// descendant. This module draws, on a run's page, each such result's "child run" block, the
// header's "sub-agents" and "parent run" facts, and the "Sub-agents" section (the run's tree from
// `GET /api/runs/<id>/tree`, which also prices each child by its own model); on the runs list, a
// child run's badge naming its parent.
//
// As in viewer.js every element is made by the `el` helper it hands over (createElement and text
// nodes): run ids, stop reasons and models come from the log and are never parsed as markup.

const plural = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`

const tokensOf = (usage) => (usage?.inputTokens ?? 0) + (usage?.outputTokens ?? 0)

/** `2 child runs, 3 steps, 360 tokens`: a `ChildTotals` (runs, steps, usage). */
const totalsText = (totals) => `${plural(totals.runs, "child run")}, ${plural(totals.steps, "step")}, ${tokensOf(totals.usage)} tokens`

const statusTitles = {
  finished: "its log holds its end",
  unfinished: "running now, or stopped before its end",
  missing: "the parent's log names it, but its own log is not in this store (the figures are the parent's record)",
  unreadable: "its log could not be read"
}

/**
 * The page's sub-agent parts. `ui` is viewer.js's helpers: `el`, `runHref`, `stopReasonLabel`,
 * `stopReasonClass`, `money`, `getJson`, `showProblem`.
 */
export const make = (ui) => {
  const { el, runHref, stopReasonLabel, stopReasonClass, money } = ui

  /** A stop reason's badge, from a record's reason (or a label the server made). */
  const reasonBadge = (reason, label) => {
    const text = label ?? stopReasonLabel(reason)
    return text ? el("span", { class: `badge ${stopReasonClass(reason)} child-stop`, "data-stop-reason": text }, text) : null
  }

  /** The runs list: a child run's badge, linking its parent. */
  const parentBadge = (parent) => el("a", { class: "badge child-of", href: runHref(parent), title: `a sub-agent run of ${parent}`, "data-parent": parent }, `child of ${parent}`)

  /** One run's page: the parts that follow its transcript and its tree. */
  const runPart = (priceTable, onTree) => {
    let tree = null
    let treeKey = null
    let treeRun = null
    const costs = new Map()
    const section = el("div", { id: "subagents-slot" })

    const costText = (runId) => {
      if (!priceTable || !costs.has(runId)) return ""
      const cost = costs.get(runId)
      return cost === null || cost === undefined ? "unpriced" : money(cost, priceTable.currency)
    }

    /** The block of a result that ran a child run. */
    const childBlock = (child) =>
      el(
        "div",
        { class: "child-run", "data-child": child.runId },
        el("a", { href: runHref(child.runId), class: "child-link mono" }, child.runId),
        " ",
        reasonBadge(child.stopReason),
        el(
          "span",
          { class: "note child-figures" },
          `${plural(child.steps, "step")}, ${tokensOf(child.usage)} tokens`,
          child.effectiveSteps !== child.steps ? ` (${child.effectiveSteps} effective)` : "",
          ` · ${child.usage.inputTokens} in, ${child.usage.outputTokens} out`
        ),
        priceTable ? el("span", { class: "note child-cost", "data-child-cost": child.runId, title: "its tokens priced by its own model" }, costText(child.runId)) : null,
        child.children ? el("div", { class: "note child-children" }, `its own sub-agents: ${totalsText(child.children)}`) : null
      )

    /** The header's facts: the parent run (verified by the server), the sub-agents' totals. */
    const facts = (transcript) => {
      const found = []
      if (tree && tree.runId === transcript.runId && tree.parent) {
        found.push(["parent run", el("span", { id: "parent-run" }, el("a", { href: runHref(tree.parent) }, tree.parent), el("span", { class: "note" }, "this is a sub-agent's run"))])
      }
      const counted = transcript.finished?.counters?.children
      const totals = counted ?? (tree && tree.runId === transcript.runId && tree.totals.runs > 0 ? tree.totals : null)
      if (totals) {
        const cost = tree && tree.runId === transcript.runId ? tree.totals.cost : undefined
        found.push([
          "sub-agents",
          el(
            "span",
            { id: "subagent-totals" },
            totalsText(totals),
            cost ? el("span", { class: "note", id: "subagent-cost" }, `${money(cost.amount, cost.currency)}${cost.unpriced > 0 ? ` (${plural(cost.unpriced, "run")} unpriced)` : ""}`) : null,
            counted ? null : el("span", { class: "note" }, "so far")
          )
        ])
      }
      return found
    }

    const nodeItem = (node) =>
      el(
        "li",
        { "data-node": node.runId, "data-status": node.status },
        el("a", { href: runHref(node.runId), class: "mono" }, node.runId),
        " ",
        node.status === "finished" ? null : el("span", { class: `badge ${node.status === "unfinished" ? "unfinished" : "enverror"} node-status`, title: statusTitles[node.status] }, node.status),
        reasonBadge(node.stopReason, node.stopReasonLabel),
        el("span", { class: "note" }, `${plural(node.steps, "step")}, ${tokensOf(node.usage)} tokens${node.model ? ` of ${node.model}` : ""}`),
        node.cost !== undefined && priceTable ? el("span", { class: "note node-cost" }, node.cost === null ? "unpriced" : money(node.cost, priceTable.currency)) : null,
        node.problem ? el("span", { class: "note" }, node.problem) : null,
        node.truncated ? el("span", { class: "note node-truncated" }, "more children not read (the tree's bounds)") : null,
        node.children.length > 0 ? el("ul", { class: "subagent-tree" }, node.children.map(nodeItem)) : null
      )

    const renderSection = () => {
      if (!tree || tree.tree.children.length === 0) {
        section.replaceChildren()
        return
      }
      section.replaceChildren(
        el(
          "div",
          { class: "panel", id: "subagents" },
          el("h2", {}, `Sub-agents (${tree.totals.runs})`),
          el("ul", { class: "subagent-tree" }, tree.tree.children.map(nodeItem)),
          tree.truncated ? el("p", { class: "muted" }, "The tree is cut at its bounds (8 levels, 500 runs): open a child to see below it.") : null
        )
      )
    }

    const collect = (node) => {
      costs.set(node.runId, node.cost)
      node.children.forEach(collect)
    }

    /** Reads the tree again when the run's children may have changed; then the section, the costs and the header follow. */
    const update = async (transcript) => {
      const children = transcript.steps.flatMap((step) => (step.results ?? []).flatMap((result) => (result.child ? [result.child.runId] : [])))
      // A run that names no child and whose id cannot be a child's (`<parent>/<step>/<callId>`) has no tree to read.
      const calling = transcript.steps.some((step) => !step.completed && (step.reply?.reply?.toolCalls ?? []).length > 0)
      if (children.length === 0 && !calling && !/\/\d+\/./.test(transcript.runId)) return
      // Read again when a child is recorded, a step is calling, or the run ends; not at every step.
      const key = JSON.stringify([transcript.runId, children, calling ? transcript.steps.length : -1, transcript.finished !== null])
      if (key === treeKey) return
      treeKey = key
      treeRun = transcript.runId
      try {
        const read = await ui.getJson(`/api/runs/${encodeURIComponent(transcript.runId)}/tree`)
        if (treeRun !== transcript.runId) return
        tree = read
        costs.clear()
        tree.tree.children.forEach(collect)
        renderSection()
        for (const node of document.querySelectorAll("[data-child-cost]")) node.textContent = costText(node.getAttribute("data-child-cost"))
        onTree()
      } catch (error) {
        treeKey = null
        ui.showProblem(`cannot read the run's sub-agents: ${error.message}`)
      }
    }

    return { section, childBlock, facts, update }
  }

  return { parentBadge, runPart }
}
