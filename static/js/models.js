// The Models page: each model's card (rendered into the page as JSON by the server), its learning
// curve, and per language pair the BLEU-by-sentence-length and validation-BLEU plots of all its models.
import { explainMethods } from "./api.js";
import { el, formatCount, formatDuration, plotlyReady, setChildren, showError } from "./dom.js";
import { explanationTable } from "./explain-table.js";
import { goldAlignmentTable } from "./gold-alignment.js";
import { ablationGrids, alignmentGrid } from "./head-grids.js";
import { roleGrid } from "./head-roles.js";
import { plotlyText } from "./heatmap.js";
import { BLEU_KIND, describeArchitecture, loadCatalog, pageCards, showHealth, stateNote } from "./models-api.js";
import { whenReady } from "./readiness.js";

const PALETTE = ["#1f5ba8", "#e07a1f", "#0f8a6a", "#a3468c", "#c0392b", "#5b6b7f", "#8a6d1f", "#2b8fb8"];
const SETS = { test2016: "test 2016", test2017: "test 2017", mscoco2017: "MSCOCO 2017" };
const SET_ORDER = Object.keys(SETS);
const ARCH_ORDER = { transformer: 0, self_attentive_rnn: 1, rnn: 2 };

/** Known test sets first, in their usual order (the page's JSON arrives with sorted keys). */
const bySet = ([a], [b]) => {
  const rank = (s) => (SET_ORDER.includes(s) ? SET_ORDER.indexOf(s) : SET_ORDER.length);
  return rank(a) - rank(b) || a.localeCompare(b);
};
const byModel = (a, b) =>
  (ARCH_ORDER[a.architecture] ?? 9) - (ARCH_ORDER[b.architecture] ?? 9) ||
  (a.score === "none") - (b.score === "none") ||
  a.id.localeCompare(b.id);
const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };
const BASE_LAYOUT = {
  margin: { l: 52, r: 16, t: 10, b: 44 },
  paper_bgcolor: "rgba(0,0,0,0)",
  plot_bgcolor: "#ffffff",
  font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 12, color: "#1e293b" },
  legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom" },
  hovermode: "x unified",
};
// Legends sit above the plot area (Plotly grows the top margin to fit them): below it, a legend of
// many models wrapped onto the x-axis title ("epoch" printed over a legend entry).

const cards = pageCards();
cards.sort(byModel);
// One colour family per architecture and score function, the same in every language pair: en→de
// and en→fr Transformers are both blue. Two models of one family in one pair (en-de-transformer
// and en-de-transformer-aligned) get a darker or lighter shade, another dash and another marker.
const styleKey = (card) => (card.architecture === "rnn" ? `rnn:${card.score}` : card.architecture || "other");
const FIXED = { transformer: "#1f5ba8", self_attentive_rnn: "#0f8a6a", "rnn:additive": "#e07a1f", "rnn:none": "#5b6b7f", "rnn:general": "#a3468c" };
const DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"];
const SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "star", "cross", "triangle-down"];
const keys = [...new Set(cards.map(styleKey))];
const spare = PALETTE.filter((c) => !Object.values(FIXED).includes(c));
/** `hex` mixed with black (t < 0) or white (t > 0) by |t|. */
function shade(hex, t) {
  const toward = t < 0 ? 0 : 255;
  const mix = (i) => Math.round(parseInt(hex.slice(i, i + 2), 16) * (1 - Math.abs(t)) + toward * Math.abs(t));
  return `#${[1, 3, 5].map((i) => mix(i).toString(16).padStart(2, "0")).join("")}`;
}
const SHADES = [0, -0.35, 0.4, -0.6, 0.6];
const styleOf = new Map();
{
  const seen = new Map(); // "pair|family" -> how many models of it came before
  for (const card of cards) {
    const key = styleKey(card);
    const k = keys.indexOf(key);
    const slot = `${pairKey(card)}|${key}`;
    const r = seen.get(slot) || 0;
    seen.set(slot, r + 1);
    const base = FIXED[key] || spare[k % spare.length];
    styleOf.set(card.id, {
      color: shade(base, SHADES[r % SHADES.length]),
      dash: DASHES[(k + r) % DASHES.length],
      symbol: SYMBOLS[(k + 3 * r) % SYMBOLS.length],
    });
  }
}
const colorOf = new Map(cards.map((card) => [card.id, styleOf.get(card.id).color]));
const lineOf = (card) => {
  const style = styleOf.get(card.id);
  return { line: { color: style.color, width: 2.5, dash: style.dash }, marker: { size: 7, symbol: style.symbol, color: style.color } };
};
/** A round tick step (1, 2, 5 × 10^k) giving about five ticks up to `max`. */
function niceStep(max) {
  const raw = Math.max(max, 1) / 5;
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= raw);
}
const maxY = (traces) => Math.max(1, ...traces.flatMap((t) => t.y.filter(Number.isFinite)));
const roundAxis = (traces) => ({ tick0: 0, dtick: niceStep(maxY(traces)), tickformat: niceStep(maxY(traces)) < 1 ? ".1f" : ".0f" });
const name = (card) => plotlyText(card.id);
/** Height and legend for a chart of `n` lines in `div`: a plot area of about 220 px under a legend
 *  of as many rows as its entries take at this width (one to a row on a phone), never scrolled. */
function legendRoom(div, n) {
  const perRow = Math.max(1, Math.floor((div.clientWidth || 600) / 210));
  const legendPx = 20 * Math.ceil(n / perRow) + 8;
  return { height: 300 + legendPx, legend: { ...BASE_LAYOUT.legend, maxheight: legendPx + 4 } };
}
/** Whole-number ticks on an epoch axis (no "1.5 epochs"). */
const epochAxis = (xs) => ({ tick0: 0, dtick: Math.max(1, niceStep(Math.max(1, ...xs.filter(Number.isFinite)))) });
const num = (x, digits = 1) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(digits) : "–");

function pairKey(card) { // hoisted: the styles above use it
  return card.source_lang && card.target_lang ? `${card.source_lang} → ${card.target_lang}` : "other";
}

function factsList(card) {
  const training = card.training || {};
  const rows = [
    ["Architecture", describeArchitecture(card)],
    ["Parameters", card.parameters ? `${formatCount(card.parameters)} (${card.parameters.toLocaleString("en")})` : null],
    ["Training time", training.time_s !== undefined ? formatDuration(training.time_s) : null],
    ["Hardware", training.hardware],
    ["Epochs / steps", training.epochs !== undefined || training.steps !== undefined ? `${training.epochs ?? "–"} / ${training.steps?.toLocaleString("en") ?? "–"}` : null],
    ["Beam size", card.beam_size],
    ["Note", card.note],
  ].filter(([, value]) => value !== null && value !== undefined && value !== "");
  return el("dl", { class: "facts" }, rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
}

// An imported model's card (attnscope import): where it came from, its family, languages, sizes
// and the conversion checks its card.json records (docs/import.md).
function importedFacts(card) {
  const origin = card.origin;
  if (!origin || typeof origin !== "object") return null;
  const sizes = card.sizes || {};
  const stack = (s) => (s ? `${s.layers} layers × ${s.heads} heads, feed-forward ${s.ff_dim}` : null);
  const codes = Array.isArray(card.language_codes) ? card.language_codes : [];
  const checks = card.conversion_checks || {};
  // Only what the import measured: a decoder-only import records the logits (and its prompt's
  // length), an encoder-decoder's also attention and greedy outputs.
  const check = (c) => {
    if (!c || typeof c !== "object") return null;
    const parts = [
      typeof c.max_logit_difference === "number" ? `logits ±${num(c.max_logit_difference, 6)}` : null,
      typeof c.max_attention_difference === "number" ? `attention ±${num(c.max_attention_difference, 6)}` : null,
      typeof c.greedy_equal === "number" && typeof c.sentences === "number" ? `greedy ${c.greedy_equal}/${c.sentences} equal` : null,
      typeof c.prompt_tokens === "number" ? `on a ${c.prompt_tokens}-token prompt` : null,
    ].filter(Boolean);
    return parts.length ? parts.join(", ") : null;
  };
  const rows = [
    ["Imported from", origin.source],
    ["Family", origin.model_type ? `${origin.family} (${origin.model_type})` : origin.family],
    ["Languages", `${card.source_lang} → ${card.target_lang}${codes.length ? ` (${codes.length} language codes per request)` : ""}`],
    ["Width", sizes.d_model ? `d_model ${sizes.d_model}, vocabulary ${sizes.vocabulary?.toLocaleString("en") ?? "–"}` : null],
    ["Encoder", stack(sizes.encoder)],
    ["Decoder", stack(sizes.decoder)],
    ["Check (float32)", check(checks.float32)],
    ["Check (stored)", check(checks.saved)],
    ["Tokenizer", typeof checks.tokenizer_equal === "number" ? `${checks.tokenizer_equal} check sentences split as the original` : null],
    ["Licence", card.license],
  ].filter(([, value]) => value !== null && value !== undefined && value !== "");
  return el("dl", { class: "facts imported-facts", dataset: { role: "imported" } },
    rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
}

/** A card's chrF of one set; "†" where the translations it scored had another BLEU than the
 * card's (scripts/card_chrf.py keeps both: the card's BLEU was decoded on another device). */
function chrfCell(chrf) {
  const other = chrf?.bleu_same_run;
  const note = other ? `\nBLEU of the translations this chrF scored: cased ${num(other.cased, 2)}, lowercase ${num(other.lowercase_13a, 2)} (the BLEU columns were decoded on another device)` : "";
  return el("td", { title: `${chrf?.signature || ""}${note}`, dataset: { metric: "chrf" } }, `${num(chrf?.score)}${other ? " †" : ""}`);
}

function bleuTable(card) {
  const bleu = card.bleu;
  if (!bleu || typeof bleu !== "object" || !Object.keys(bleu).length) {
    return el("p", { class: "hint" }, "No BLEU in this model's card yet.");
  }
  return el(
    "table",
    { class: "bleu-table" },
    el("thead", {}, el("tr", {}, el("th", {}, "BLEU"), el("th", {}, "cased"), el("th", {}, "lowercase"), el("th", {}, "chrF"))),
    el(
      "tbody",
      {},
      Object.entries(bleu).sort(bySet).map(([set, s]) =>
        el(
          "tr",
          {},
          el("td", {}, SETS[set] || set),
          el("td", { title: s?.signature_cased || "" }, num(s?.cased)),
          el("td", { title: s?.signature_lowercase || "" }, num(s?.lowercase_13a)),
          chrfCell(card.chrf?.[set]),
        ),
      ),
    ),
  );
}

async function drawCurve(div, card) {
  const Plotly = await plotlyReady();
  const curve = card.curve;
  const x = curve.map((p) => p.epoch ?? p.step);
  const xTitle = curve[0].epoch !== undefined ? "epoch" : "step";
  const line = (key, label, extra) => ({
    type: "scatter", mode: "lines+markers", name: label, x, y: curve.map((p) => p[key] ?? null), marker: { size: 5 }, ...extra,
  });
  const traces = [
    line("train_loss", "train loss", { line: { color: "#94a3b8" } }),
    line("val_loss", "val loss", { line: { color: "#1f5ba8" } }),
  ];
  if (curve.some((p) => typeof p.val_bleu === "number")) {
    traces.push(line("val_bleu", "val BLEU", { yaxis: "y2", line: { color: "#e07a1f", dash: "dot" } }));
  }
  await Plotly.newPlot(div, traces, {
    ...BASE_LAYOUT,
    height: 250,
    margin: { l: 48, r: 52, t: 8, b: 40 },
    xaxis: { title: { text: xTitle, standoff: 4 }, zeroline: false, ...(xTitle === "epoch" ? epochAxis(x) : {}) },
    yaxis: { title: { text: "loss" }, zeroline: false, gridcolor: "#eef2f7", nticks: 5 },
    yaxis2: { title: { text: "val BLEU" }, overlaying: "y", side: "right", showgrid: false, zeroline: false, tickformat: ".0f", nticks: 5, rangemode: "tozero" },
  }, PLOT_CONFIG);
}

function modelCard(card) {
  const hasCurve = Array.isArray(card.curve) && card.curve.length > 0;
  const imported = Boolean(card.origin); // no training of ours: no BLEU table or curve to promise
  const curveDiv = el("div", { class: "mini-chart chart", dataset: { chart: "curve" } });
  const grids = [alignmentGrid(card), alignmentGrid(card, "alignment_reads"), ablationGrids(card), card.error ? null : roleGrid(card)].filter(Boolean);
  const node = el(
    "article",
    { class: "card model-card", id: `model-${card.id}` },
    el(
      "header",
      {},
      el("h3", {}, card.id),
      el("span", { class: "badge", style: { background: `${colorOf.get(card.id)}22`, color: colorOf.get(card.id) } }, describeArchitecture(card).split(",")[0]),
    ),
    card.error ? el("p", { class: "error" }, card.error) : null,
    stateNote(card) ? el("p", { class: "hint model-state" }, `State:${stateNote(card).slice(2)}`) : null,
    ...(card.warnings || []).map((warning) => el("p", { class: "hint model-warning" }, `⚠ ${warning}`)),
    factsList(card),
    importedFacts(card),
    imported && !card.bleu ? null : bleuTable(card),
    imported && !hasCurve ? null : el("h4", {}, "Learning curve"),
    hasCurve ? curveDiv : imported ? null : el("p", { class: "hint" }, "No learning curve in this model's card."),
    ...grids.map((g) => g.node),
    goldAlignmentTable(card, explainCatalog || []),
    card.hyperparameters && Object.keys(card.hyperparameters).length
      ? el("details", {}, el("summary", {}, "Hyperparameters"), el("pre", {}, JSON.stringify(card.hyperparameters, null, 2)))
      : null,
  );
  const draws = [hasCurve ? () => drawCurve(curveDiv, card) : null, ...grids.map((g) => g.draw)].filter(Boolean);
  return { node, draw: draws.length ? () => Promise.all(draws.map((d) => d())) : null };
}

async function drawBleuByLength(div, list, set) {
  const Plotly = await plotlyReady();
  const traces = list
    .filter((card) => card.bleu_by_length && Array.isArray(card.bleu_by_length[set]))
    .map((card) => {
      const rows = card.bleu_by_length[set];
      return {
        type: "scatter",
        mode: "lines+markers",
        name: name(card),
        x: rows.map((r) => plotlyText(r.bucket)),
        y: rows.map((r) => r.bleu),
        customdata: rows.map((r) => r.sentences),
        hovertemplate: `${name(card)}: %{y:.1f} BLEU (%{customdata} sentences)<extra></extra>`,
        ...lineOf(card),
      };
    });
  await Plotly.newPlot(div, traces, {
    ...BASE_LAYOUT,
    ...legendRoom(div, traces.length),
    margin: { ...BASE_LAYOUT.margin, b: 48 },
    showlegend: true,
    xaxis: { title: { text: "source length (words)", standoff: 6 }, type: "category" },
    yaxis: { title: { text: `BLEU (${BLEU_KIND})` }, rangemode: "tozero", gridcolor: "#eef2f7", ...roundAxis(traces) },
  }, PLOT_CONFIG);
}

async function drawValBleu(div, list) {
  const Plotly = await plotlyReady();
  const traces = list
    .filter((card) => Array.isArray(card.curve) && card.curve.some((p) => typeof p.val_bleu === "number"))
    .map((card) => ({
      type: "scatter",
      mode: "lines+markers",
      name: name(card),
      x: card.curve.map((p) => p.epoch ?? p.step),
      y: card.curve.map((p) => p.val_bleu ?? null),
      ...lineOf(card),
      hovertemplate: `${name(card)}: %{y:.1f}<extra></extra>`,
    }));
  await Plotly.newPlot(div, traces, {
    ...BASE_LAYOUT,
    ...legendRoom(div, traces.length),
    margin: { ...BASE_LAYOUT.margin, b: 48 },
    showlegend: true,
    xaxis: { title: { text: "epoch", standoff: 6 }, ...epochAxis(traces.flatMap((t) => t.x)) },
    yaxis: { title: { text: `validation BLEU (${BLEU_KIND})` }, rangemode: "tozero", gridcolor: "#eef2f7", ...roundAxis(traces) },
  }, PLOT_CONFIG);
}

let explainCatalog = []; // GET /api/explain-methods

function pairSection(pair, list) {
  const draws = [];
  const sets = [...new Set(list.flatMap((c) => Object.keys(c.bleu_by_length || {})))].map((s) => [s]).sort(bySet).map(([s]) => s);
  const lengthDiv = el("div", { class: "chart", dataset: { chart: "bleu-by-length" } });
  const valDiv = el("div", { class: "chart", dataset: { chart: "val-bleu" } });
  const hasVal = list.some((c) => Array.isArray(c.curve) && c.curve.some((p) => typeof p.val_bleu === "number"));
  const onlyImported = list.every((c) => c.origin); // imports have no BLEU or curves of ours: no empty boxes
  let setPicker = null;
  if (sets.length) {
    const initial = sets.includes("test2016") ? "test2016" : sets[0];
    setPicker = el("select", { "aria-label": "Test set", onchange: (e) => drawBleuByLength(lengthDiv, list, e.target.value) },
      sets.map((s) => el("option", { value: s }, SETS[s] || s)));
    setPicker.value = initial;
    draws.push(() => drawBleuByLength(lengthDiv, list, initial));
  }
  if (hasVal) draws.push(() => drawValBleu(valDiv, list));
  const cardsOut = list.map(modelCard);
  for (const c of cardsOut) if (c.draw) draws.push(c.draw);
  const section = el(
    "section",
    { class: "pair-section", "aria-label": pair },
    el("h2", {}, pair),
    el(
      "div",
      { class: "pair-charts" },
      onlyImported && !sets.length ? null : el("div", { class: "card chart-card", dataset: { box: "bleu-by-length" } },
        el("div", { class: "grid-head" }, el("h3", {}, "BLEU by sentence length"), setPicker),
        sets.length ? lengthDiv : el("p", { class: "hint" }, "No model of this pair has BLEU by sentence length in its card yet.")),
      onlyImported && !hasVal ? null : el("div", { class: "card chart-card", dataset: { box: "val-bleu" } },
        el("h3", {}, "Validation BLEU during training"),
        hasVal ? valDiv : el("p", { class: "hint" }, "No model of this pair has a learning curve in its card yet.")),
    ),
    explanationTable(list, explainCatalog),
    el("div", { class: "model-cards" }, cardsOut.map((c) => c.node)),
  );
  return { section, draws };
}

async function init() {
  showHealth();
  // Rendered while the server loaded its models, this page lacks their cards: once they are
  // loaded (the header says "loading N of M models" meanwhile), draw it again with them.
  if ((await whenReady()).waited) return location.reload();
  await loadCatalog(); // the labels of architectures and score functions
  explainCatalog = await explainMethods().catch(() => []); // the explanation methods' labels
  const pairs = new Map();
  for (const card of cards) {
    if (!pairs.has(pairKey(card))) pairs.set(pairKey(card), []);
    pairs.get(pairKey(card)).push(card);
  }
  document.getElementById("no-models").hidden = cards.length > 0;
  const sections = [...pairs.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([pair, list]) => pairSection(pair, list));
  setChildren(document.getElementById("pairs"), sections.map((s) => s.section));
  try {
    await Promise.all(sections.flatMap((s) => s.draws.map((draw) => draw())));
  } catch (err) {
    showError(document.getElementById("error"), `Could not draw the plots: ${err.message}`);
  }
  document.body.dataset.ready = "true";
}

init();
