// "Score functions compared" on the Models page: per language pair, one row per RNN alignment
// score function (rows built by the server from the model cards, see attnscope/score_table.py) and
// BLEU by source length of all of them on one plot, the no-attention baseline as the floor.
import { el, formatDuration, plotlyReady, setChildren, showError } from "./dom.js";
import { plotlyText } from "./heatmap.js";
import { SCORES, loadCatalog } from "./models-api.js";

// The same colours as the Models page's plots for the scores it fixes (additive, general, none).
const COLORS = {
  additive: "#e07a1f", dot: "#1f5ba8", scaled_dot: "#2b8fb8", general: "#a3468c", query_key: "#0f8a6a",
  concat: "#c0392b", cosine: "#8a6d1f", location: "#6d28d9", none: "#5b6b7f",
};
const SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "star", "cross", "triangle-down", "hexagon"];
const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };

const num = (x, digits = 1) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(digits) : "–");
const signed = (x) => (typeof x === "number" && Number.isFinite(x) ? `${x >= 0 ? "+" : "−"}${Math.abs(x).toFixed(1)}` : null);
const label = (score) => SCORES[score] || score;

function readRows() {
  const node = document.getElementById("score-rows-data");
  try {
    const rows = JSON.parse(node?.textContent || "[]");
    return Array.isArray(rows) ? rows : [];
  } catch {
    return [];
  }
}

/** A number with its difference to the floor underneath ("+12.6 over none"). */
function withDelta(value, delta, isFloor, label) {
  return el("td", { class: "num", dataset: { label } },
    el("span", {}, num(value)),
    !isFloor && signed(delta) ? el("small", { class: "delta", title: "difference to the no-attention baseline" }, signed(delta)) : null);
}

function scoreRow(row) {
  const params = typeof row.score_parameters === "number" ? row.score_parameters.toLocaleString("en") : "–";
  const entropyTitle = typeof row.entropy_normalized === "number"
    ? `normalised by log(source length): ${row.entropy_normalized.toFixed(2)} (0 one-hot, 1 uniform)` : "";
  const time = typeof row.train_time_s === "number"
    ? `${formatDuration(row.train_time_s)}${row.epochs ? ` · ${row.epochs} ep.` : ""}` : "–";
  return el(
    "tr",
    { class: row.floor ? "floor" : null, dataset: { score: row.score } },
    el("th", { scope: "row" },
      el("span", { class: "swatch", style: { background: COLORS[row.score] || "#94a3b8" }, "aria-hidden": "true" }),
      el("a", { href: `#model-${row.model}`, title: row.model }, label(row.score))),
    el("td", { class: "formula" }, row.formula),
    // data-label: the column's name, shown beside each number where a phone reflows the table
    el("td", { class: "num", title: row.parameters_formula, dataset: { label: "Params" } }, params),
    withDelta(row.bleu, row.delta_bleu, row.floor, "BLEU"),
    withDelta(row.chrf, row.delta_chrf, row.floor, "chrF"),
    withDelta(row.bleu_long, row.delta_long, row.floor, "BLEU 21+"),
    el("td", { class: "num", title: entropyTitle, dataset: { label: "Entropy" } }, num(row.entropy, 2)),
    el("td", { class: "num", dataset: { label: "Training" } }, time),
    el("td", { class: "num", title: "word-alignment F1 of the attention (card key 'alignment')", dataset: { label: "Align F1" } }, num(row.alignment_f1, 2)),
    el("td", { class: "reading" }, row.reading,
      row.note ? el("details", { class: "row-note" }, el("summary", {}, "⚠ Note on this run"), el("p", {}, row.note)) : null),
  );
}

function table(rows) {
  const long = rows.find((r) => typeof r.long_sentences === "number")?.long_sentences;
  const head = [
    ["Score", ""], ["score(s, hᵢ)", "s: decoder state (query), hᵢ: encoder state (key)"],
    ["Params", "parameters of the score function itself"], ["BLEU", "test2016, beam 5, lowercased 13a; below: difference to no attention"],
    ["chrF", "test2016, the same translations: sacreBLEU chrF2 (character 6-grams, cased), which credits partly right words; below: difference to no attention"],
    ["BLEU 21+", `test2016 sentences of 21 or more words${long ? ` (${long} sentences)` : ""}`],
    ["Entropy", "mean entropy of the attention rows in nats (teacher-forced on test2016): low is peaked, log(source length) is uniform"],
    ["Training", "training time and epochs"], ["Align F1", "word-alignment F1 against reference links, when measured"],
    ["What the numbers show", ""],
  ];
  return el("div", { class: "score-table-scroll" },
    el("table", { class: "score-table" },
      el("thead", {}, el("tr", {}, head.map(([text, title]) => el("th", { scope: "col", title: title || null }, text)))),
      el("tbody", {}, rows.map(scoreRow))));
}

async function drawLengths(div, rows) {
  const Plotly = await plotlyReady();
  const traces = rows
    .filter((r) => Array.isArray(r.bleu_by_length))
    .map((r, i) => ({
      type: "scatter",
      mode: "lines+markers",
      name: plotlyText(label(r.score)),
      x: r.bleu_by_length.map((b) => plotlyText(b.bucket)),
      y: r.bleu_by_length.map((b) => b.bleu),
      customdata: r.bleu_by_length.map((b) => b.sentences),
      hovertemplate: `${plotlyText(label(r.score))}: %{y:.1f} BLEU (%{customdata} sentences)<extra></extra>`,
      line: { color: COLORS[r.score] || "#94a3b8", width: r.floor ? 3 : 2, dash: r.floor ? "dash" : "solid" },
      marker: { size: 7, symbol: SYMBOLS[i % SYMBOLS.length] },
    }));
  await Plotly.newPlot(div, traces, {
    height: 360,
    margin: { l: 52, r: 16, t: 10, b: 56 },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "#ffffff",
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 12, color: "#1e293b" },
    legend: { orientation: "h", y: -0.3, x: 0, yanchor: "top" },
    hovermode: "x unified",
    showlegend: true,
    xaxis: { title: { text: "source length (words), test2016", standoff: 6 }, type: "category" },
    yaxis: { title: { text: "BLEU (lowercased)" }, rangemode: "tozero", gridcolor: "#eef2f7", dtick: 10 },
  }, PLOT_CONFIG);
}

async function init() {
  const section = document.getElementById("score-functions");
  if (!section) return;
  await loadCatalog(); // the labels
  const rows = readRows();
  const pairs = new Map();
  for (const row of rows) {
    if (!pairs.has(row.pair)) pairs.set(row.pair, []);
    pairs.get(row.pair).push(row);
  }
  const draws = [];
  const blocks = [...pairs.entries()].map(([pair, list]) => {
    const plot = el("div", { class: "chart", dataset: { chart: "score-bleu-by-length" } });
    const title = `${list[0].source_lang} → ${list[0].target_lang}`;
    draws.push(() => drawLengths(plot, list));
    return el("div", { class: "score-pair", dataset: { pair } },
      el("h3", {}, `${title}: ${list.length} score function${list.length === 1 ? "" : "s"}`),
      table(list),
      el("h4", {}, `BLEU by source length, ${title}`),
      plot);
  });
  setChildren(section.querySelector("[data-role=score-pairs]"),
    blocks.length ? blocks : el("p", { class: "hint" }, "No RNN encoder–decoder with an alignment score function is served."));
  try {
    await Promise.all(draws.map((draw) => draw()));
  } catch (err) {
    showError(section.querySelector("[data-role=score-error]"), `Could not draw the plot: ${err.message}`);
  }
  section.dataset.ready = "true";
}

init();
