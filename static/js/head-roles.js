// Head roles from a model's corpus analysis (`attnscope analyze`, shipped as the model folder's
// analysis/heads.json, served by GET /api/models/{id}/analysis): on the Models page a layer × head
// grid per attention kind coloured by role, the statistics on hover; in the explorer a badge on
// each head's thumbnail, and on each chip of the Translate page's Heads card. Models without an analysis (404) show neither. Roles and their rules:
// docs/analysis.md. The analysis counts layers and heads from 0; the page from 1.
import { el, plotlyReady } from "./dom.js";
import { KIND_LABELS, KIND_ORDER } from "./matrix.js";
import { pageCards } from "./models-api.js";

/** Each role's colour, short label (badges, cells) and meaning (legend, hover). */
export const ROLES = {
  alignment: { color: "#1f5ba8", short: "align", help: "cross-attention that aligns words: corpus word-alignment F1 ≥ threshold" },
  "positional-previous": { color: "#0f8a6a", short: "prev", help: "looks at the previous position" },
  "positional-same": { color: "#2b8fb8", short: "same", help: "looks at its own position" },
  "positional-next": { color: "#8a6d1f", short: "next", help: "looks at the next position" },
  sink: { color: "#c0392b", short: "sink", help: "parks its weight on the boundary token (</s>, or <s> in the decoder)" },
  "rare-word": { color: "#a3468c", short: "rare", help: "attends to the sentence's rarest source token" },
  mixed: { color: "#cbd5e1", short: "mixed", help: "none of the rules holds" },
};
const ROLE_NAMES = Object.keys(ROLES);
const STATS = [
  ["entropy", "entropy (nats)"], ["max_weight", "largest weight"], ["eos_share", "on boundary"], ["punct_share", "on punctuation"],
  ["prev_share", "on previous"], ["same_share", "on same"], ["next_share", "on next"], ["rare_share", "on rarest token"],
];
const fmt = (v) => (typeof v === "number" && Number.isFinite(v) ? v.toFixed(2) : null);

const cache = new Map();

/** A model's analysis ({model, corpus, sentences, heads: [{kind, layer, head, role, ...}]}), or
 *  null when it has none (404) or it cannot be read; fetched once per page. */
export function loadAnalysis(id) {
  // the page's cards say which models have one (has_analysis): no request (and no 404) for the others
  const card = pageCards().find((c) => c.id === id);
  if (card && card.has_analysis === false) return Promise.resolve(null);
  if (!cache.has(id)) {
    cache.set(id, fetch(`/api/models/${encodeURIComponent(id)}/analysis`)
      .then((r) => (r.ok ? r.json() : null))
      .then((data) => (data && Array.isArray(data.heads) ? data : null))
      .catch(() => null));
  }
  return cache.get(id);
}

/** The analysed heads of one kind as a Map "layer:head" -> head summary. */
export function headsOf(analysis, kind) {
  return new Map((analysis?.heads || []).filter((h) => h.kind === kind).map((h) => [`${h.layer}:${h.head}`, h]));
}

/** One head's role and statistics as lines of text (hover, tooltips). */
export function describeHead(h) {
  const lines = [`${h.role}${fmt(h.role_score) ? ` (score ${fmt(h.role_score)})` : ""}`];
  if (fmt(h.alignment_f1)) lines.push(`alignment F1 ${fmt(h.alignment_f1)}`);
  for (const [key, label] of STATS) if (fmt(h[`${key}_mean`])) lines.push(`${label} ${fmt(h[`${key}_mean`])}`);
  return lines;
}

/** "Multi30k train.en.gz, 29000 sentences, teacher-forced": where the roles come from. */
export function sourceOf(analysis) {
  return [analysis.corpus, analysis.sentences ? `${analysis.sentences} sentences` : null, analysis.mode].filter(Boolean).join(", ");
}

async function drawKind(div, heads, kind) {
  const Plotly = await plotlyReady();
  const layers = 1 + Math.max(...[...heads.values()].map((h) => h.layer));
  const width = 1 + Math.max(...[...heads.values()].map((h) => h.head));
  const at = (l, k) => heads.get(`${l}:${k}`) || null;
  const rows = [...Array(layers).keys()];
  const cols = [...Array(width).keys()];
  const n = ROLE_NAMES.length;
  // One flat colour per role: z is the role's index, the scale steps at each index.
  const colorscale = ROLE_NAMES.flatMap((r, i) => [[i / n, ROLES[r].color], [(i + 1) / n, ROLES[r].color]]);
  await Plotly.newPlot(div, [{
    type: "heatmap",
    z: rows.map((l) => cols.map((k) => (at(l, k) ? ROLE_NAMES.indexOf(at(l, k).role) : null))),
    x: cols.map((k) => `H${k + 1}`),
    y: rows.map((l) => `L${l + 1}`),
    zmin: -0.5, zmax: n - 0.5, colorscale, showscale: false, xgap: 2, ygap: 2,
    text: rows.map((l) => cols.map((k) => ROLES[at(l, k)?.role]?.short ?? "")),
    texttemplate: "%{text}",
    customdata: rows.map((l) => cols.map((k) => (at(l, k) ? describeHead(at(l, k)).join("<br>") : ""))),
    hovertemplate: `${KIND_LABELS[kind] || kind} %{y} · %{x}<br>%{customdata}<extra></extra>`,
  }], {
    height: 60 + 34 * layers,
    margin: { l: 36, r: 10, t: 6, b: 26 },
    paper_bgcolor: "rgba(0,0,0,0)",
    xaxis: { fixedrange: true },
    yaxis: { autorange: "reversed", fixedrange: true },
    font: { size: 11 },
  }, { displaylogo: false, responsive: true, displayModeBar: false });
}

/** The Models page's "Head roles" section for a card: {node, draw}; the node stays hidden when
 *  the model has no analysis. */
export function roleGrid(card) {
  const body = el("div", { class: "role-grids" });
  const node = el("div", { class: "head-grid", dataset: { grid: "roles" }, hidden: true }, el("h4", {}, "Head roles over a corpus"), body);
  const draw = async () => {
    const analysis = await loadAnalysis(card.id);
    if (!analysis) return;
    const kinds = KIND_ORDER.filter((k) => headsOf(analysis, k).size);
    const charts = kinds.map((kind) => [kind, el("div", { class: "mini-chart chart", dataset: { chart: `roles-${kind}` } })]);
    const counts = ROLE_NAMES.map((r) => [r, analysis.heads.filter((h) => h.role === r).length]).filter(([, c]) => c);
    body.append(
      el("p", { class: "hint" }, `From attnscope analyze over ${sourceOf(analysis)}. Hover a head for its statistics.`),
      el("ul", { class: "role-legend", style: { listStyle: "none", padding: "0", display: "flex", flexWrap: "wrap", gap: "10px" } },
        counts.map(([r, c]) => el("li", { title: ROLES[r].help, dataset: { headRole: r } },
          el("span", { style: { display: "inline-block", width: "10px", height: "10px", background: ROLES[r].color, marginRight: "4px" } }),
          `${r}: ${c}`))),
      ...charts.flatMap(([kind, div]) => [el("h5", {}, KIND_LABELS[kind] || kind), div]),
    );
    node.hidden = false;
    await Promise.all(charts.map(([kind, div]) => drawKind(div, headsOf(analysis, kind), kind)));
  };
  return { node, draw };
}

function badge(h) {
  const role = ROLES[h.role] || ROLES.mixed;
  return el("span", {
    class: "role-badge",
    dataset: { headRole: h.role },
    title: describeHead(h).join(" · "),
    style: { fontSize: "10px", fontWeight: "600", color: role === ROLES.mixed ? "#334155" : "#fff", background: role.color, borderRadius: "3px", padding: "0 3px", alignSelf: "flex-start" },
  }, role.short);
}

/** Badge every thumbnail of an explorer's head grid with its head's role, whenever the grid is
 *  drawn. `modelOf()` names the model the explorer shows. Returns the observer. */
export function watchExplorerRoles(explorerRoot, modelOf) {
  const grid = explorerRoot?.querySelector('[data-role="grid"]');
  if (!grid) return null;
  const decorate = async () => {
    const id = modelOf();
    const kind = explorerRoot.querySelector('[data-role="kind"] [aria-checked="true"]')?.dataset.kind;
    const analysis = id && kind ? await loadAnalysis(id) : null;
    if (id !== modelOf()) return; // another model was chosen meanwhile
    const heads = headsOf(analysis, kind);
    for (const thumb of grid.querySelectorAll(".thumb")) {
      thumb.querySelector(".role-badge")?.remove();
      const h = heads.get(`${thumb.dataset.layer}:${thumb.dataset.head}`);
      if (h) thumb.append(badge(h));
    }
  };
  const observer = new MutationObserver(decorate);
  observer.observe(grid, { childList: true });
  return observer;
}

/** Badge each chip of the Heads card (the buttons `[data-head="layer:head"]` in `list`, heads of
 *  `kind` of model `id`) with its head's role, the role's statistics added to its tooltip.
 *  `current()` names the model shown once the analysis is in: nothing is added if it changed. */
export async function badgeChips(list, id, kind, current) {
  const analysis = await loadAnalysis(id);
  if (!analysis || current() !== id) return;
  const heads = headsOf(analysis, kind);
  for (const chip of list.querySelectorAll("[data-head]")) {
    const h = heads.get(chip.dataset.head);
    if (!h || chip.querySelector(".role-badge")) continue;
    chip.append(" ", badge(h));
    chip.dataset.headRole = h.role;
    chip.title = `${chip.title}. Role over a corpus: ${describeHead(h).join(" · ")}`;
  }
}
