// The explorer's "Every layer × head" section: a thumbnail per head (and per layer's average)
// with the head's mean row entropy on this sentence and, from the model's card, its
// word-alignment F1; beside it a table of the heads that sorts by entropy, F1 or the BLEU change
// with the head switched off (header buttons, aria-sort). Markup: templates/_explorer.html.
import { isLoaded } from "./attention-client.js";
import { el, setChildren } from "./dom.js";
import { f1Of, headFacts, signed } from "./head-facts.js";
import { drawThumbnail } from "./heatmap.js";
import { maxOf, meanEntropy, shapeOf, viewOf } from "./matrix.js";

const THUMB = 88; // px, the longer side of a thumbnail

/** The table's columns: key, header, the direction a first click sorts in, and its help text. */
const COLUMNS = [
  { key: "position", label: "Head", first: "ascending", help: () => "layer and head, counted from 1 as in the grid" },
  { key: "bits", label: "Entropy", first: "ascending", help: () => "mean row entropy on this sentence (bits): lower is sharper" },
  { key: "f1", label: "F1", first: "descending", help: (f) => `word-alignment F1 on ${f.split} (the model's card)` },
  { key: "delta", label: "ΔBLEU off", first: "ascending", help: (f) => `${f.ablation.split} BLEU change with this head alone switched off (the model's card; beam ${f.ablation.beam ?? "?"}, ${f.ablation.baseline.toFixed(2)} with every head on)` },
];

export const DEFAULT_SORT = { key: "bits", dir: "ascending" };

function compare(key, dir) {
  const sign = dir === "ascending" ? 1 : -1;
  return (a, b) => {
    if (key === "position") return sign * (a.layer - b.layer || a.head - b.head);
    const x = a[key];
    const y = b[key];
    if (x === null || y === null) return (x === null) - (y === null) || a.layer - b.layer || a.head - b.head; // unknown last
    return sign * (x - y) || a.layer - b.layer || a.head - b.head;
  };
}

/** Open a head large; the grid is redrawn, so focus goes back to the control that opened it
 *  (`selector`, inside the grid section) for keyboard users. */
async function openKeepingFocus(explorer, layer, head, selector) {
  await explorer.open(layer, head);
  explorer.c["grid-section"].querySelector(selector)?.focus({ preventScroll: true });
}

/** Draw the grid and the table for the explorer's current response and view. */
export function renderHeadGrid(explorer) {
  const c = explorer.c;
  const section = c["grid-section"];
  if (!section) return;
  const s = explorer.state;
  const { layers, heads } = shapeOf(explorer.response, s.kind);
  section.hidden = layers * heads === 1;
  if (section.hidden) return;
  const facts = explorer.headFacts();
  const options = { merge: s.merge, hideEos: s.hideEos };
  const entries = [];
  c.grid.style.setProperty("--heads", String(heads + (heads > 1 ? 1 : 0)));
  const cells = [];
  let maxBits = 0;
  let keys = 0;
  for (let layer = 0; layer < layers; layer++) {
    cells.push(el("div", { class: "grid-layer" }, `Layer ${layer + 1}`));
    for (const head of heads > 1 ? [...Array(heads).keys(), "avg"] : [0]) {
      if (!isLoaded(explorer.response, s.kind, layer, head)) {
        cells.push(unfetched(explorer, layer, head)); // on demand: drawn once it is looked at
        continue;
      }
      const view = viewOf(explorer.response, s.kind, { ...options, layer, head });
      const bits = meanEntropy(view.z);
      const f1 = f1Of(facts, layer, head);
      keys = view.colLabels.length;
      maxBits = Math.max(maxBits, Math.log2(Math.max(keys, 2)));
      if (head !== "avg") entries.push({ layer, head, bits, f1, delta: facts.delta ? facts.delta[layer][head] : null });
      cells.push(thumbnail(explorer, view, { layer, head, bits, f1 }));
    }
  }
  setChildren(c.grid, cells);
  for (const bar of c.grid.querySelectorAll(".entropy-bar > span")) {
    bar.style.width = `${Math.min(100, (100 * Number(bar.dataset.bits)) / (maxBits || 1))}%`;
  }
  for (const bar of c.grid.querySelectorAll(".f1-bar > span")) bar.style.width = `${100 * Number(bar.dataset.f1)}%`;
  c["uniform-keys"].textContent = String(keys);
  c["uniform-bits"].textContent = Math.log2(Math.max(keys, 1)).toFixed(2);
  const notes = [facts.f1Note, facts.ablationNote].filter(Boolean);
  setChildren(c["heads-note"], notes.map((note) => el("span", {}, note)));
  c["heads-note"].hidden = !notes.length;
  renderTable(explorer, entries, facts);
}

/** A head not fetched yet (attention on demand): a button that opens it, without a picture. */
function unfetched(explorer, layer, head) {
  return el(
    "button",
    {
      type: "button",
      class: "thumb unfetched",
      title: `${explorer.where(layer, head)} — click to fetch and open it`,
      "aria-pressed": "false",
      dataset: { layer: String(layer), head: String(head) },
      onclick: () => openKeepingFocus(explorer, layer, head, `.thumb[data-layer="${layer}"][data-head="${head}"]`),
    },
    el("span", { class: "thumb-img" }),
    el("span", { class: "thumb-label" }, `H${head + 1}`, el("span", { class: "bits" }, "…")),
  );
}

function thumbnail(explorer, view, { layer, head, bits, f1 }) {
  const s = explorer.state;
  const selected = layer === s.layer && (head === "avg" ? s.avg : !s.avg && head === s.head);
  const canvas = el("canvas", { "aria-hidden": "true" });
  drawThumbnail(canvas, view.z, s.stretch ? Math.max(maxOf(view.z), 1e-6) : 1);
  const rows = view.z.length;
  const cols = view.colLabels.length;
  const scale = THUMB / Math.max(rows, cols, 1);
  canvas.style.width = `${Math.max(8, Math.round(cols * scale))}px`;
  canvas.style.height = `${Math.max(8, Math.round(rows * scale))}px`;
  const f1Text = f1 === null ? "" : ` · alignment F1 ${f1.toFixed(2)}${head === "avg" ? " (average of heads)" : ""}`;
  return el(
    "button",
    {
      type: "button",
      class: `thumb${selected ? " selected" : ""}${head === "avg" ? " avg" : ""}`,
      title: `${explorer.where(layer, head)} — mean entropy ${bits.toFixed(2)} bits${f1Text}`,
      "aria-pressed": selected ? "true" : "false",
      dataset: { layer: String(layer), head: String(head), entropy: bits.toFixed(4), ...(f1 === null ? {} : { f1: String(f1) }) },
      onclick: () => openKeepingFocus(explorer, layer, head, `.thumb[data-layer="${layer}"][data-head="${head}"]`),
    },
    el("span", { class: "thumb-img" }, canvas),
    el("span", { class: "thumb-label" }, head === "avg" ? "avg" : `H${head + 1}`, el("span", { class: "bits" }, bits.toFixed(2))),
    el("span", { class: "entropy-bar" }, el("span", { dataset: { bits: String(bits) } })),
    f1 === null
      ? null
      : el("span", { class: "thumb-label thumb-f1" }, "F1", el("span", { class: "f1" }, f1.toFixed(2))),
    f1 === null ? null : el("span", { class: "f1-bar" }, el("span", { dataset: { f1: String(f1) } })),
  );
}

function renderTable(explorer, entries, facts) {
  const columns = COLUMNS.filter((col) => (col.key !== "f1" || facts.f1) && (col.key !== "delta" || facts.delta));
  let sort = explorer.headSort;
  if (!columns.some((col) => col.key === sort.key)) sort = DEFAULT_SORT; // e.g. F1 chosen, then a model without it
  entries.sort(compare(sort.key, sort.dir));
  const s = explorer.state;
  const header = columns.map((col) => {
    const active = col.key === sort.key;
    const next = active ? (sort.dir === "ascending" ? "descending" : "ascending") : col.first;
    return el(
      "th",
      { scope: "col", "aria-sort": active ? sort.dir : null },
      el(
        "button",
        {
          type: "button",
          class: "sort",
          title: `${col.help(facts)} — click to sort ${next}`,
          dataset: { sort: col.key },
          onclick: () => {
            explorer.headSort = { key: col.key, dir: next };
            renderTable(explorer, entries, facts);
            explorer.c["head-table"].querySelector(`[data-sort="${col.key}"]`)?.focus();
          },
        },
        col.label,
        el("span", { class: "sort-mark", "aria-hidden": "true" }, active ? (sort.dir === "ascending" ? "▲" : "▼") : "↕"),
      ),
    );
  });
  const rows = entries.map((e) => {
    const selected = !s.avg && e.layer === s.layer && e.head === s.head;
    const cells = {
      position: () => el(
        "th",
        { scope: "row" },
        el(
          "button",
          {
            type: "button",
            class: "linklike",
            title: `open layer ${e.layer + 1} · head ${e.head + 1} (L${e.layer}H${e.head} in the API and the cards, which count from 0)`,
            "aria-current": selected ? "true" : null,
            onclick: () => openKeepingFocus(explorer, e.layer, e.head, `tr[data-layer="${e.layer}"][data-head="${e.head}"] button`),
          },
          `L${e.layer + 1} · H${e.head + 1}`,
        ),
      ),
      bits: () => el("td", {}, e.bits.toFixed(2)),
      f1: () => el("td", {}, e.f1 === null ? "–" : e.f1.toFixed(2)),
      delta: () => el("td", { class: e.delta < 0 ? "worse" : null }, signed(e.delta)),
    };
    return el(
      "tr",
      {
        class: selected ? "selected" : null,
        dataset: { layer: String(e.layer), head: String(e.head), entropy: e.bits.toFixed(4), ...(e.f1 === null ? {} : { f1: String(e.f1) }), ...(e.delta === null ? {} : { delta: String(e.delta) }) },
      },
      columns.map((col) => cells[col.key]()),
    );
  });
  // The grid counts from 1 (as people do); the API, the cards and the Heads card from 0.
  explorer.c["count-hint"].textContent =
    `Counted from 1 as in the grid; the API and the model cards count from 0 (layer ${s.layer + 1} · head ${s.head + 1} here is L${s.layer}H${s.head} there).`;
  setChildren(explorer.c["head-table"], el("thead", {}, el("tr", {}, header)), el("tbody", {}, rows));
}
