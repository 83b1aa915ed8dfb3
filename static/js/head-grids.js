// Per-head grids from a model's card, for the Models page: word-alignment F1 of every
// cross-attention head (card.alignment, from `attnscope evaluate --alignment`) and test BLEU with
// each head switched off (card.ablation, from `attnscope evaluate --ablate`).
import { el, plotlyReady } from "./dom.js";
import { signed } from "./head-facts.js";
import { KIND_LABELS, KIND_ORDER } from "./matrix.js";

const CONFIG = { displaylogo: false, responsive: true, displayModeBar: false };
const fmt = (v, digits = 2) => (typeof v === "number" ? v.toFixed(digits) : "–");
/** "L2 · H1" for the card's 0-based {layer: 1, head: 0}: counted from 1, as the explorer does. */
const headName = ({ layer, head }) => (Number.isInteger(layer) && Number.isInteger(head) ? `L${layer + 1} · H${head + 1}` : "–");

/** A layer x head heatmap with each value written in its cell. */
async function drawGrid(div, grid, { zmin, zmax, colorscale, title, hover, text, reversescale = false }) {
  const Plotly = await plotlyReady();
  const heads = grid[0].length;
  const layers = grid.length;
  await Plotly.newPlot(div, [{
    type: "heatmap",
    z: grid,
    // Counted from 1, as everywhere a person reads them (the cards' JSON counts from 0).
    x: [...Array(heads).keys()].map((h) => `H${h + 1}`),
    y: [...Array(layers).keys()].map((l) => `L${l + 1}`),
    zmin, zmax, colorscale, reversescale,
    text: grid.map((row) => row.map(text)),
    texttemplate: "%{text}",
    hovertemplate: hover,
    colorbar: { title: { text: title }, thickness: 10 },
  }], {
    height: 60 + 34 * layers,
    margin: { l: 36, r: 10, t: 6, b: 26 },
    paper_bgcolor: "rgba(0,0,0,0)",
    xaxis: { side: "bottom", fixedrange: true },
    yaxis: { autorange: "reversed", fixedrange: true },
    font: { size: 11 },
  }, CONFIG);
}

/** The card's alignment section (null when the card has none). Returns {node, draw}. With key
 *  "alignment_reads": the same heads scored on the row of the step that *reads* each word (a card
 *  has it when a head was trained to align that way, Shift-Att). */
export function alignmentGrid(card, key = "alignment") {
  const a = card[key];
  if (!a || !Array.isArray(a.f1) || !a.f1.length || !Array.isArray(a.f1[0])) return null;
  const reads = key === "alignment_reads";
  const div = el("div", { class: "mini-chart chart", dataset: { chart: reads ? "alignment-f1-reads" : "alignment-f1" } });
  const best = a.best_head || {};
  const summary = el("p", { class: "hint" },
    `Word-alignment F1 on ${a.split} against eflomal (grow-diag-final-and)`
    + `${reads ? ", each target word read off the row of the step whose input it is" : ""}: average of all heads `
    + `${fmt(a.average_of_heads?.f1)}, best head ${headName(best)} ${fmt(best.f1)}, `
    + `diagonal baseline ${fmt(a.diagonal?.f1)} (AER = 1 − F1 here).`);
  const node = el("div", { class: "head-grid", dataset: { grid: reads ? "alignment-reads" : "alignment" } },
    el("h4", {}, reads ? "Which heads align words on the step that reads them" : "Which heads align words"), summary, div);
  const draw = () => drawGrid(div, a.f1, {
    zmin: 0, zmax: 1, colorscale: "Blues", reversescale: true, title: "F1", text: (v) => fmt(v),
    hover: "%{y} · %{x}: F1 %{z:.3f}<extra></extra>",
  });
  return { node, draw };
}

/** The card's ablation section: BLEU change with each head off (null when the card has none). */
export function ablationGrids(card) {
  const ab = card.ablation;
  if (!ab || !ab.bleu_without_head || typeof ab.baseline !== "number") return null;
  const parts = [];
  const draws = [];
  // The card's kinds in the explorer's order (the card file may have them sorted by name).
  const kinds = Object.keys(ab.bleu_without_head).sort((a, b) => KIND_ORDER.indexOf(a) - KIND_ORDER.indexOf(b));
  for (const kind of kinds) {
    const grid = ab.bleu_without_head[kind];
    if (!Array.isArray(grid) || !grid.length || !Array.isArray(grid[0])) continue;
    const delta = grid.map((row) => row.map((v) => (typeof v === "number" ? v - ab.baseline : null)));
    const div = el("div", { class: "mini-chart chart", dataset: { chart: `ablation-${kind}` } });
    parts.push(el("h5", {}, KIND_LABELS[kind] || kind), div);
    const span = Math.max(0.5, ...delta.flat().map((v) => Math.abs(v ?? 0)));
    // Reversed RdBu: a head whose loss costs BLEU is red, one whose loss helps is blue.
    draws.push(() => drawGrid(div, delta, {
      zmin: -span, zmax: span, colorscale: "RdBu", reversescale: true, title: "ΔBLEU", text: (v) => signed(v),
      hover: `%{y} · %{x} off: %{z:+.2f} BLEU<extra></extra>`,
    }));
  }
  const node = el("div", { class: "head-grid", dataset: { grid: "ablation" } },
    el("h4", {}, "BLEU with one head switched off"),
    el("p", { class: "hint" }, `${ab.split}, beam ${ab.beam_size}, lowercased BLEU ${fmt(ab.baseline)} with every head on; `
      + "each cell is the change when that head alone is switched off."),
    ...parts);
  return { node, draw: () => Promise.all(draws.map((d) => d())) };
}
