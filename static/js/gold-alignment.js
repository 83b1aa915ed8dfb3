// The Models page's gold-alignment table: AER/precision/recall against human sure/possible links
// (card key "alignment_gold", written by `attnscope evaluate --alignment-gold`), beside the published
// lines of other aligners (cited, not run here) and the baselines computed on the same sentences.
import { el } from "./dom.js";

const pct = (v) => (typeof v === "number" ? (100 * v).toFixed(1) : "–");
const ROW_WORDS = { produces: "step that produces the word", reads: "step that reads the word" };
const WEIGHTS_WORDS = "raw attention weights"; // the explanation methods' own labels come from /api/explain-methods

function line(kind, name, scores, note) {
  return el("tr", { dataset: { kind } },
    el("td", {}, name),
    el("td", { class: "num" }, pct(scores?.aer)),
    el("td", { class: "num" }, pct(scores?.precision)),
    el("td", { class: "num" }, pct(scores?.recall)),
    el("td", { class: "hint" }, note || ""));
}

const cell = (c) => (c && typeof c.layer === "number" ? `L${c.layer + 1}${typeof c.head === "number" ? ` · H${c.head + 1}` : ""}` : "");

/** The card's gold-alignment section as a table node, or null when the card has none. */
/** `methods`: the registered explanation methods (GET /api/explain-methods), for their labels. */
export function goldAlignmentTable(card, methods = []) {
  const labels = new Map(methods.map((m) => [m.name, m.long_label || m.label]));
  const g = card.alignment_gold;
  if (!g || typeof g !== "object" || !g.methods || typeof g.methods !== "object") return null;
  const rows = [];
  for (const [method, byRows] of Object.entries(g.methods)) {
    for (const [reading, r] of Object.entries(byRows || {})) {
      if (!r || !r.best_head) continue;
      const what = `${method === "weights" ? WEIGHTS_WORDS : labels.get(method) || method}, ${ROW_WORDS[reading] || reading}`;
      rows.push(line("ours", `${what}: best ${r.best_layer && r.aer?.[0]?.length === 1 ? "layer" : "head"}`, r.best_head, `${cell(r.best_head)} · this model`));
      if (r.best_layer && (r.aer?.[0]?.length ?? 0) > 1) rows.push(line("ours", `${what}: best layer average`, r.best_layer, `${cell(r.best_layer)} · this model`));
    }
  }
  for (const [name, scores] of Object.entries(g.baselines || {})) {
    rows.push(line("baseline", name === "diagonal" ? "diagonal baseline" : `${name} baseline`, scores, `computed here on the same ${g.sentences} sentences`));
  }
  for (const p of g.published || []) {
    rows.push(line("published", p.system, { aer: p.aer }, `published: ${p.source}`));
  }
  return el("div", { class: "gold-alignment", dataset: { grid: "alignment-gold" } },
    el("h4", {}, `Word alignment against human gold (${g.gold}, ${g.direction}, ${g.sentences} sentences)`),
    el("p", { class: "hint" },
      "AER, precision and recall in % (lower AER is better) against sure/possible links. Published lines are the "
      + "papers' numbers for systems trained on Europarl-scale text, not runs of ours; this model's heads are scored "
      + "as they are (the default head is still chosen on silver data)."),
    el("table", { class: "bleu-table gold-table" },
      el("thead", {}, el("tr", {}, ...["Aligner", "AER", "precision", "recall", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)));
}
