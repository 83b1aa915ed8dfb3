// "Which explanation tells the truth?": a method × model table from the cards' `explanations`
// (written by `attnscope evaluate --explain`, docs/explanations.md). Each cell is the method's
// best head (weights, norm) or layer (rollout, value zeroing, ALTI+) by word-alignment F1 against
// the reference, and by Spearman's ρ with integrated gradients. The cards count heads and layers
// from 0; people read them from 1. The methods' row labels and order come from GET
// /api/explain-methods (`long_label`), after the weights' own row.
import { el } from "./dom.js";

/** method -> row label: the weights, then the catalog's methods (a name stands for a method it lacks). */
export function methodLabels(catalog = []) {
  return { weights: "attention weights", ...Object.fromEntries(catalog.map((m) => [m.name, m.long_label || m.label])) };
}

/** The largest number of a [layer][head or 0] grid and where: {value, layer, head} (0-based), or null. */
export function bestOf(grid) {
  let best = null;
  (grid || []).forEach((row, layer) =>
    (row || []).forEach((value, head) => {
      if (typeof value === "number" && (!best || value > best.value)) best = { value, layer, head };
    }),
  );
  return best;
}

/** "L2 H1" (per head) or "L3" (per layer), counted from 1; nothing for a 1 × 1 grid (an RNN). */
export function whereOf(best, per, grid) {
  if (grid.length === 1 && grid[0].length === 1) return "";
  return per === "head" ? `L${best.layer + 1} H${best.head + 1}` : `L${best.layer + 1}`;
}

function score(name, grid, per, top) {
  const best = bestOf(grid);
  if (!best) return null;
  const where = whereOf(best, per, grid);
  const text = `${name} ${best.value.toFixed(3)}${where ? ` (${where})` : ""}`;
  const isTop = top !== null && Math.abs(best.value - top) < 5e-5;
  return { best, where, node: el(isTop ? "strong" : "span", { dataset: { value: String(best.value), where } }, text) };
}

/** The table of `cards` (one language pair) with explanations, or null where none has them;
 *  `catalog`: GET /api/explain-methods's methods (labels and order). */
export function explanationTable(cards, catalog = []) {
  const withGrids = cards.filter((card) => card.explanations?.methods);
  if (!withGrids.length) return null;
  const labels = methodLabels(catalog);
  const carded = withGrids.flatMap((c) => Object.keys(c.explanations.methods));
  const methods = [...new Set([...Object.keys(labels), ...carded])].filter((m) => withGrids.some((c) => c.explanations.methods[m]));
  const tops = new Map(withGrids.map((card) => {  // per model: the best F1 and ρ over its methods
    const found = Object.values(card.explanations.methods);
    const top = (pick) => Math.max(...found.map((s) => bestOf(pick(s))?.value ?? -Infinity));
    return [card.id, { f1: top((s) => s.alignment?.f1), rho: top((s) => s.spearman_ig) }];
  }));
  const cell = (card, method) => {
    const scores = card.explanations.methods[method];
    if (!scores) return el("td", { class: "muted", dataset: { model: card.id, method } }, "–");
    const f1 = score("F1", scores.alignment?.f1, scores.per, tops.get(card.id).f1);
    const rho = score("ρ", scores.spearman_ig, scores.per, tops.get(card.id).rho);
    return el(
      "td",
      { dataset: { model: card.id, method, f1: f1 ? String(f1.best.value) : "", where: f1?.where || "" } },
      f1?.node, f1 && rho ? el("br") : null, rho?.node,
    );
  };
  const first = withGrids[0].explanations;
  return el(
    "div",
    { class: "card chart-card", dataset: { role: "explain-table" } },
    el("h3", {}, "Which explanation tells the truth?"),
    el("p", { class: "hint" },
      `Best head or layer of each method (heads and layers counted from 1): word-alignment F1 against the reference and Spearman's ρ with integrated gradients, on ${first.split} (${first.sentences} sentences), from each card; bold is the model's best. See docs/explanations.md.`),
    el("div", { class: "table-scroll" },
      el("table", { class: "score-table explain-table" },
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "method"), withGrids.map((c) => el("th", { scope: "col" }, c.id)))),
        el("tbody", {}, methods.map((m) => el("tr", { dataset: { method: m } }, el("th", { scope: "row" }, labels[m] || m), withGrids.map((c) => cell(c, m))))),
      ),
    ),
  );
}
