// Head roles from a model's corpus analysis (`attnscope analyze`, shipped as the model folder's
// analysis/heads.json, served by GET /api/models/{id}/analysis): on the Models page a layer × head
// grid per attention kind coloured by role, the statistics on hover; in the explorer a badge on
// each head's thumbnail (an explorer panel), and on each chip of the Translate page's Heads card. Models without an analysis (404) show neither. Roles and their rules:
// docs/analysis.md; their labels and meanings come from GET /api/head-roles (api.js headRoles).
// The analysis counts layers and heads from 0; the page from 1.
import { headRoles, optionalJSON } from "./api.js";
import { el, plotlyReady } from "./dom.js";
import { KIND_LABELS, KIND_ORDER } from "./matrix.js";
import { pageCards } from "./models-api.js";

/** Each role's colour (the page's choice; the server's catalog names the roles and says what they mean). */
const COLORS = {
  alignment: "#1f5ba8", "positional-previous": "#0f8a6a", "positional-same": "#2b8fb8", "positional-next": "#8a6d1f",
  sink: "#c0392b", "rare-word": "#a3468c", mixed: "#cbd5e1",
};
const OTHER = "#94a3b8"; // a role this page has no colour for (a newer server's)

/** name -> {name, short, help, color} from the roles catalog, in the order the rules are tried. */
async function roleTable() {
  const roles = await headRoles().catch(() => []);
  return new Map(roles.map((r) => [r.name, { ...r, color: COLORS[r.name] || OTHER }]));
}
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
    cache.set(id, optionalJSON(`/api/models/${encodeURIComponent(id)}/analysis`)
      .then((data) => (data && Array.isArray(data.heads) ? data : null)));
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

async function drawKind(div, heads, kind, roles) {
  const Plotly = await plotlyReady();
  const names = [...roles.keys()];
  const layers = 1 + Math.max(...[...heads.values()].map((h) => h.layer));
  const width = 1 + Math.max(...[...heads.values()].map((h) => h.head));
  const at = (l, k) => heads.get(`${l}:${k}`) || null;
  const rows = [...Array(layers).keys()];
  const cols = [...Array(width).keys()];
  const n = names.length;
  // One flat colour per role: z is the role's index, the scale steps at each index.
  const colorscale = names.flatMap((r, i) => [[i / n, roles.get(r).color], [(i + 1) / n, roles.get(r).color]]);
  await Plotly.newPlot(div, [{
    type: "heatmap",
    z: rows.map((l) => cols.map((k) => (at(l, k) ? names.indexOf(at(l, k).role) : null))),
    x: cols.map((k) => `H${k + 1}`),
    y: rows.map((l) => `L${l + 1}`),
    zmin: -0.5, zmax: n - 0.5, colorscale, showscale: false, xgap: 2, ygap: 2,
    text: rows.map((l) => cols.map((k) => roles.get(at(l, k)?.role)?.short ?? at(l, k)?.role ?? "")),
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
    const [analysis, roles] = await Promise.all([loadAnalysis(card.id), roleTable()]);
    if (!analysis) return;
    const names = [...roles.keys()];
    const kinds = KIND_ORDER.filter((k) => headsOf(analysis, k).size);
    const charts = kinds.map((kind) => [kind, el("div", { class: "mini-chart chart", dataset: { chart: `roles-${kind}` } })]);
    const counts = names.map((r) => [r, analysis.heads.filter((h) => h.role === r).length]).filter(([, c]) => c);
    body.append(
      el("p", { class: "hint" }, `From attnscope analyze over ${sourceOf(analysis)}. Hover a head for its statistics.`),
      el("ul", { class: "role-legend", style: { listStyle: "none", padding: "0", display: "flex", flexWrap: "wrap", gap: "10px" } },
        counts.map(([r, c]) => el("li", { title: roles.get(r).help, dataset: { headRole: r } },
          el("span", { style: { display: "inline-block", width: "10px", height: "10px", background: roles.get(r).color, marginRight: "4px" } }),
          `${r}: ${c}`))),
      ...charts.flatMap(([kind, div]) => [el("h5", {}, KIND_LABELS[kind] || kind), div]),
    );
    node.hidden = false;
    await Promise.all(charts.map(([kind, div]) => drawKind(div, headsOf(analysis, kind), kind, roles)));
  };
  return { node, draw };
}

function badge(h, roles) {
  const role = roles.get(h.role) || { short: h.role, color: OTHER };
  return el("span", {
    class: "role-badge",
    dataset: { headRole: h.role },
    title: describeHead(h).join(" · "),
    style: { fontSize: "10px", fontWeight: "600", color: h.role === "mixed" ? "#334155" : "#fff", background: role.color, borderRadius: "3px", padding: "0 3px", alignSelf: "flex-start" },
  }, role.short);
}

/** The explorer panel (explorer.addPanel) that badges every thumbnail of the head grid with its
 *  head's role, after each redraw, for the model and attention kind the explorer shows. */
export function rolePanel() {
  const panel = {
    onGrid: (explorer) => panel.onView(explorer), // the thumbnails were drawn anew (on demand: a layer at a time)
    async onView(explorer) {
      const grid = explorer.c.grid;
      const id = explorer.response?.model;
      const kind = explorer.state.kind;
      const [analysis, roles] = id && kind ? await Promise.all([loadAnalysis(id), roleTable()]) : [null, new Map()];
      if (id !== explorer.response?.model || kind !== explorer.state.kind) return; // moved on meanwhile
      const heads = headsOf(analysis, kind);
      for (const thumb of grid.querySelectorAll(".thumb")) {
        thumb.querySelector(".role-badge")?.remove();
        const h = heads.get(`${thumb.dataset.layer}:${thumb.dataset.head}`);
        if (h) thumb.append(badge(h, roles));
      }
    },
  };
  return panel;
}

/** Badge each chip of the Heads card (the buttons `[data-head="layer:head"]` in `list`, heads of
 *  `kind` of model `id`) with its head's role, the role's statistics added to its tooltip.
 *  `current()` names the model shown once the analysis is in: nothing is added if it changed. */
export async function badgeChips(list, id, kind, current) {
  const [analysis, roles] = await Promise.all([loadAnalysis(id), roleTable()]);
  if (!analysis || current() !== id) return;
  const heads = headsOf(analysis, kind);
  for (const chip of list.querySelectorAll("[data-head]")) {
    const h = heads.get(chip.dataset.head);
    if (!h || chip.querySelector(".role-badge")) continue;
    chip.append(" ", badge(h, roles));
    chip.dataset.headRole = h.role;
    chip.title = `${chip.title}. Role over a corpus: ${describeHead(h).join(" · ")}`;
  }
}
