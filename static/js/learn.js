// The Learn page: nine stops that follow the lectures, each figure drawn from a live answer of
// the loaded models on the student's sentence. A stop whose model is not loaded says so and
// uses what is there. Each figure's `data-state` is loading, ready, unavailable or error.
import { getJSON, postJSON } from "./api.js";
import { FORMULAS, renderAnatomy } from "./anatomy.js";
import { ensureAverages, ensureLayer, ensureView, withPlaceholders } from "./attention-client.js";
import { drawBeamTree } from "./beamtree.js";
import { el, fillSelect, plotlyReady, setChildren, showError } from "./dom.js";
import { drawHeatmap } from "./heatmap.js";
import { Player } from "./learn-player.js";
import { viewOf } from "./matrix.js";
import { describeArchitecture, loadModels, pageCards, showHealth } from "./models-api.js";
import { readablePieces } from "./pieces.js";

const textBox = document.getElementById("learn-text");
const errorBox = document.getElementById("learn-error");
const stops = new Map([...document.querySelectorAll(".stop")].map((s) => [s.dataset.stop, s]));
let models = [];
const player = { instance: null };

const figureOf = (name) => stops.get(name).querySelector('[data-role="figure"]');
const widthOf = (node) => Math.max(260, Math.min(node.clientWidth || 360, 820));
// Every stop asks for its attention on demand (docs/api.md) and fetches the heads it draws.
const translate = (model, text, extra = {}) =>
  postJSON("/api/translate", { model, text, beam_size: 1, attention: "on_demand", ...extra }).then((a) => withPlaceholders(a));
const plotConfig = { displayModeBar: false, responsive: true };

function pick(...tests) {
  for (const test of tests) {
    const found = models.find(test);
    if (found) return found;
  }
  return null;
}
const isTransformer = (m) => m.architecture === "transformer";
const isAttnRnn = (m) => m.architecture === "rnn" && m.score !== "none";
const hasCross = (m) => m.attention.includes("cross");

function setLink(name, path, params) {
  const link = stops.get(name).querySelector('[data-role="full"]');
  link.href = `${path}?${new URLSearchParams(params)}`;
}

function state(figure, value, ...children) {
  figure.dataset.state = value;
  if (children.length) setChildren(figure, children);
}

const note = (text) => el("p", { class: "figure-note" }, text);
const modelName = (m) => `${describeArchitecture(m)} (${m.id})`;

async function heat(box, response, kind, { layer = 0, head = 0, title = "" } = {}) {
  const plot = el("div", { class: "learn-plot" });
  box.append(el("figure", { class: "learn-heat" }, title ? el("figcaption", {}, title) : null, plot));
  const axis = { cross: ["source", "target"], encoder_self: ["source key", "source query"], decoder_self: ["decoder input", "target"] }[kind];
  // On demand: the head drawn, or for a mean every head of the layer (averaged here, as inline).
  await (head === "avg" ? ensureLayer(response, kind, layer) : ensureView(response, kind, layer, head));
  const drawn = await drawHeatmap(plot, viewOf(response, kind, { layer, head }), {
    where: `${kind} · layer ${layer + 1} · ${head === "avg" ? "mean of heads" : `head ${head + 1}`}`,
    boxWidth: widthOf(box),
    boxHeight: 380,
    xTitle: axis[0],
    yTitle: axis[1],
  });
  // A long sentence is drawn as a window of the matrix: say so, and how to see the rest.
  const { rows, cols, visibleRows, visibleCols } = drawn;
  if (visibleRows < rows || visibleCols < cols) {
    const parts = [visibleRows < rows ? `${visibleRows} of ${rows} rows` : null, visibleCols < cols ? `${visibleCols} of ${cols} columns` : null];
    plot.after(el("p", { class: "figure-note", dataset: { role: "cut" } }, `Showing ${parts.filter(Boolean).join(" and ")}: drag the plot or scroll over it for the rest (the full page's link below shows it whole).`));
  }
  return plot;
}

/** The source words the translation barely attended to: a word's cross-attention, summed over
 * its pieces and every output row and averaged over every layer's heads (the mean of each
 * layer's head average, fetched in one request on demand), under a quarter of an even share
 * (output rows / source words, </s> left out); [] without cross-attention. */
async function droppedWords(answer) {
  if (!answer.attention?.cross) return [];
  await ensureAverages(answer, "cross");
  const heads = answer.averages?.cross || answer.attention.cross.flat();
  const rows = answer.target_tokens.length;
  const total = answer.source_tokens.map((_, k) => heads.reduce((sum, h) => sum + h.reduce((s, row) => s + row[k], 0), 0) / heads.length);
  const words = answer.source_words.filter((w) => w.text !== "</s>");
  const fair = rows / Math.max(words.length, 1);
  return words.filter((w) => w.tokens.reduce((sum, t) => sum + total[t], 0) < 0.25 * fair).map((w) => w.text);
}

// 1 · the forgetting baseline ------------------------------------------------------------------
async function forgetting(text) {
  const figure = figureOf("forgetting");
  const plain = pick((m) => m.score === "none");
  const attn = pick(isAttnRnn, isTransformer, hasCross);
  const shown = [plain, attn].filter(Boolean);
  if (!shown.length) return state(figure, "unavailable", note("No model is loaded."));
  const answers = await Promise.all(shown.map((m) => translate(m.id, text, m === plain ? { attention: [] } : {})));
  const outputs = el("div", { class: "side-by-side" }, shown.map((m, i) =>
    el("div", { class: "output" }, el("h3", {}, m === plain ? "Without attention" : "With attention"), el("p", { class: "model" }, m.id),
      el("p", { class: "learn-out", lang: m.target_lang }, answers[i].translation || "(empty)"))));
  const chart = el("div", { class: "learn-chart" });
  // Greedy decoding can leave part of a long sentence out: a coverage lesson, said where it happens.
  const dropped = attn ? await droppedWords(answers[shown.indexOf(attn)]) : [];
  const coverage = dropped.length
    ? el("p", { class: "figure-note coverage-note", dataset: { role: "dropped" } },
      `The translation with attention (greedy) barely looks at ${dropped.length} source word${dropped.length === 1 ? "" : "s"}: ${dropped.join(", ")}: it has probably left ${dropped.length === 1 ? "it" : "them"} out. `
      + "Attention alone does not make a model cover every word; beam search with a coverage penalty (stop 7, or Translate with beam 5) often brings them back.")
    : null;
  setChildren(figure, outputs, coverage, plain ? null : note("No no-attention model is loaded: only the attention model is shown."), chart);
  const cards = new Map(pageCards().map((c) => [c.id, c]));
  const traces = shown.map((m) => {
    const rows = cards.get(m.id)?.bleu_by_length?.test2016 || [];
    return { type: "scatter", mode: "lines+markers", name: m === plain ? "no attention" : "attention", x: rows.map((r) => r.bucket), y: rows.map((r) => r.bleu) };
  }).filter((t) => t.x.length);
  if (traces.length) {
    const Plotly = await plotlyReady();
    await Plotly.react(chart, traces, {
      width: widthOf(figure), height: 300, margin: { l: 50, r: 10, t: 30, b: 50 },
      title: { text: "BLEU by source length (test2016, from the cards)", font: { size: 13 } },
      xaxis: { title: { text: "source words" } }, yaxis: { title: { text: "BLEU" } }, legend: { orientation: "h", y: -0.3 },
    }, plotConfig);
  } else {
    chart.replaceWith(note("The cards have no BLEU by length yet (attnscope evaluate writes it)."));
  }
  if (plain && attn) setLink("forgetting", "/compare", { a: plain.id, b: attn.id, text, beam: "1" });
  state(figure, "ready");
}

// 2 · one decoder step ---------------------------------------------------------------------------
async function oneStep(text) {
  const figure = figureOf("step");
  const model = pick(isAttnRnn, isTransformer, hasCross);
  if (!model) return state(figure, "unavailable", note("No model with cross-attention is loaded."));
  const answer = await translate(model.id, text, { return_scores: true });
  const layer = answer.attention.cross.length - 1;
  await ensureView(answer, "cross", layer, 0); // the head the anatomy shows
  const slider = el("input", { type: "range", min: "0", max: String(answer.target_tokens.length - 1), value: "0", id: "step-query" });
  const anatomy = el("div", { class: "anatomy learn-anatomy" }, el("h3", { dataset: { role: "anatomy-title" } }), el("div", { dataset: { role: "anatomy-body" } }));
  const show = () => renderAnatomy(anatomy, answer, { kind: "cross", layer, head: 0, query: Number(slider.value), sourceLang: model.source_lang, targetLang: model.target_lang });
  slider.addEventListener("input", show);
  setChildren(figure, note(`${modelName(model)}${isTransformer(model) ? `, layer ${layer + 1}, head 1` : ""}.`),
    el("label", { for: "step-query", class: "slider" }, "Output step ", slider), anatomy);
  show();
  setLink("step", "/", { model: model.id, text, beam: "1", kind: "cross" });
  state(figure, "ready");
}

// 3 · score functions ---------------------------------------------------------------------------
async function scoreFunctions(text) {
  const figure = figureOf("scores");
  const seen = new Set();
  const order = ["additive", "query_key", "transformer", "dot", "general", "scaled_dot", "concat", "cosine", "location"];
  const rank = (m) => order.indexOf(m.score || "transformer") * 2 + (m.architecture === "self_attentive_rnn" ? 1 : 0);
  const chosen = models.filter(hasCross).sort((a, b) => rank(a) - rank(b)).filter((m) => {
    const key = m.architecture === "transformer" ? "transformer" : `${m.architecture}:${m.score}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  }).slice(0, 4);
  if (!chosen.length) return state(figure, "unavailable", note("No model with cross-attention is loaded."));
  setChildren(figure);
  const grid = el("div", { class: "heat-grid" });
  figure.append(grid);
  for (const m of chosen) {
    const answer = await translate(m.id, text);
    const layer = answer.attention.cross.length - 1;
    const formula = FORMULAS[m.score || "transformer"] || m.score;
    await heat(grid, answer, "cross", { layer, head: m.heads > 1 ? "avg" : 0, title: `${describeArchitecture(m)}: ${formula}` });
  }
  const missing = Object.keys(FORMULAS).filter((s) => s !== "transformer" && !models.some((m) => m.score === s));
  if (missing.length) figure.append(note(`Not loaded here: ${missing.join(", ")}. Their formulas are on the Models page.`));
  if (chosen.length > 1) setLink("scores", "/compare", { a: chosen[0].id, b: chosen[1].id, text, beam: "1" });
  else setLink("scores", "/", { model: chosen[0].id, text, beam: "1" });
  state(figure, "ready");
}

// 4 · the m·t cost -------------------------------------------------------------------------------
async function cost(text) {
  const figure = figureOf("cost");
  const model = pick(isTransformer, hasCross);
  if (!model) return state(figure, "unavailable", note("No model with cross-attention is loaded."));
  const words = text.trim().split(/\s+/);
  const counts = [...new Set([0.2, 0.4, 0.6, 0.8, 1].map((f) => Math.max(1, Math.round(f * words.length))))];
  const points = [];
  for (const n of counts) {
    const answer = await translate(model.id, words.slice(0, n).join(" ")); // attention_cost alone: nothing fetched
    points.push({ m: answer.source_tokens.length, t: answer.target_tokens.length, cost: answer.attention_cost.cross });
  }
  const chart = el("div", { class: "learn-chart" });
  const rows = points.map((p) => el("tr", {}, el("td", {}, String(p.m)), el("td", {}, String(p.t)), el("td", {}, String(p.m * p.t)), el("td", {}, String(p.cost))));
  const table = el("table", { class: "cost-table" }, el("thead", {}, el("tr", {}, ["m (source)", "t (output)", "m·t", "weights, all layers and heads"].map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows));
  setChildren(figure, note(`${modelName(model)}: ${model.layers} layer(s) × ${model.heads} head(s) of cross-attention.`), chart, el("div", { class: "table-scroll" }, table));
  const Plotly = await plotlyReady();
  await Plotly.react(chart, [
    { type: "scatter", mode: "lines+markers", name: "cross-attention weights", x: points.map((p) => p.m), y: points.map((p) => p.cost) },
  ], {
    width: widthOf(figure), height: 280, margin: { l: 60, r: 10, t: 20, b: 50 },
    xaxis: { title: { text: "source tokens m" } }, yaxis: { title: { text: "weights computed" } },
  }, plotConfig);
  setLink("cost", "/", { model: model.id, text, beam: "1" });
  state(figure, "ready");
}

// 5 · self-attention in an RNN ------------------------------------------------------------------
async function selfAttention(text) {
  const figure = figureOf("self");
  const model = pick((m) => m.architecture === "self_attentive_rnn", (m) => m.attention.includes("encoder_self"));
  if (!model) return state(figure, "unavailable", note("No model with encoder self-attention is loaded."));
  const answer = await translate(model.id, text);
  setChildren(figure, model.architecture === "self_attentive_rnn" ? null : note("No self-attentive RNN is loaded; the Transformer's encoder self-attention plays the same role."));
  await heat(figure, answer, "encoder_self", { layer: 0, head: 0, title: modelName(model) });
  setLink("self", "/", { model: model.id, text, beam: "1", kind: "encoder_self" });
  state(figure, "ready");
}

// 6 · the Transformer ----------------------------------------------------------------------------
async function transformer(text) {
  const figure = figureOf("transformer");
  const model = pick(isTransformer);
  if (!model) return state(figure, "unavailable", note("No Transformer is loaded on this server."));
  const answer = await translate(model.id, text);
  const layerSelect = el("select", { id: "tf-layer" });
  const headSelect = el("select", { id: "tf-head" });
  fillSelect(layerSelect, answer.attention.cross.length, "Layer", answer.attention.cross.length - 1);
  fillSelect(headSelect, answer.attention.cross[0].length, "Head", 0);
  const plots = el("div", { class: "heat-grid" });
  const check = note("");
  const draw = async () => {
    const layer = Number(layerSelect.value);
    const head = Number(headSelect.value);
    plots.replaceChildren();
    await heat(plots, answer, "decoder_self", { layer, head, title: "Masked (causal) decoder self-attention" });
    await heat(plots, answer, "cross", { layer, head, title: "Cross-attention: where it reads the source" });
    const z = answer.attention.decoder_self[layer][head];
    const above = z.reduce((sum, row, i) => sum + row.slice(i + 1).reduce((a, b) => a + b, 0), 0);
    check.textContent = `Weight above the diagonal (the future) in this head: ${above.toFixed(6)}: the mask lets no token see ahead.`;
    setLink("transformer", "/", { model: model.id, text, beam: "1", kind: "cross", layer: String(layer + 1), head: String(head + 1) });
    figure.dataset.state = "ready";
  };
  layerSelect.addEventListener("change", draw);
  headSelect.addEventListener("change", draw);
  setChildren(figure, el("div", { class: "controls" }, el("label", { for: "tf-layer" }, "Layer "), layerSelect, el("label", { for: "tf-head" }, "Head "), headSelect), check, plots);
  await draw();
}

// 7 · beam search, and the player ---------------------------------------------------------------
async function beam(text) {
  const figure = figureOf("beam");
  const model = pick(isTransformer, isAttnRnn, hasCross, () => true);
  if (!model) return state(figure, "unavailable", note("No model is loaded."));
  const answer = await translate(model.id, text, { beam_size: 3, return_beam: true, attention: [] });
  const tree = el("div", { class: "beam-scroll", tabindex: "0", role: "region", "aria-label": "Beam search tree (scrolls sideways)" });
  const playerBox = el("div", { class: "player", dataset: { role: "player" } });
  setChildren(figure, note(`${modelName(model)}, beam size 3: «${answer.translation}»`), tree, el("h3", {}, "Watch it being made (streamed from the server)"), playerBox);
  drawBeamTree(tree, answer.beam, { title: "beam search tree" });
  player.instance = new Player(playerBox);
  player.instance.load({ model: model.id, text, beam_size: 1, attention: "on_demand" });
  setLink("beam", "/", { model: model.id, text, beam: "3" });
  state(figure, "ready");
}

// 8 · vision ----------------------------------------------------------------------------------------
async function vision() {
  const figure = figureOf("vision");
  let found = [];
  try {
    found = (await getJSON("/api/vision/models")).models || [];
  } catch { /* no vision service */ }
  const ram = found.find((m) => m.task === "classify" && m.attention);
  if (!ram) return state(figure, "unavailable", note("No glimpse model is loaded on this server: the Vision page shows them when one is."));
  let sample;
  try {
    sample = (await getJSON(`/api/vision/samples?dataset=${ram.dataset}&n=1&seed=3`)).samples[0];
  } catch (err) {
    return state(figure, "unavailable", note(`No sample images here (${err.message}).`));
  }
  const answer = await postJSON("/api/vision/glimpses", { model: ram.id, image: sample.image });
  const size = 240;
  const canvas = el("canvas", { width: String(size), height: String(size), role: "img", "aria-label": `${answer.glimpses.length} glimpses; the model says ${answer.prediction}` });
  setChildren(figure, note(`${ram.id}: ${answer.glimpses.length} glimpses, then «${answer.prediction}» (p = ${answer.probability.toFixed(2)}; the image shows ${sample.label}).`), canvas);
  const image = new Image();
  await new Promise((resolve) => { image.onload = resolve; image.src = sample.image; });
  const ctx = canvas.getContext("2d");
  const k = size / answer.width;
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(image, 0, 0, size, size);
  // The path of glimpse centres, and each glimpse's sharpest (smallest) patch, numbered.
  ctx.strokeStyle = "rgba(255, 255, 255, 0.6)";
  ctx.beginPath();
  answer.glimpses.forEach((g, i) => (i ? ctx.lineTo(g.x * k, g.y * k) : ctx.moveTo(g.x * k, g.y * k)));
  ctx.stroke();
  answer.glimpses.forEach((g, i) => {
    const side = Math.min(...g.scales);
    ctx.strokeStyle = ctx.fillStyle = `hsl(${20 + 40 * i}, 90%, 60%)`;
    ctx.strokeRect((g.x - side / 2) * k, (g.y - side / 2) * k, side * k, side * k);
    ctx.font = "bold 12px system-ui";
    ctx.fillText(String(i + 1), (g.x - side / 2) * k + 2, (g.y - side / 2) * k + 12);
  });
  await caption(figure, found.find((m) => m.task === "caption" && m.attention));
  state(figure, "ready");
}

/** Show, Attend and Tell: a scene's caption, and one word's attention over the image grid. */
async function caption(figure, model) {
  if (!model) return;
  let sample;
  try {
    sample = (await getJSON(`/api/vision/samples?dataset=${model.dataset}&n=1&seed=3`)).samples[0];
  } catch {
    return;
  }
  const answer = await postJSON("/api/vision/caption", { model: model.id, image: sample.image, beam_size: 1 });
  const size = 240;
  const canvas = el("canvas", { width: String(size), height: String(size), role: "img", "aria-label": "the image, shaded by one word's attention" });
  const slider = el("input", { type: "range", min: "0", max: String(answer.tokens.length - 1), value: "0", id: "caption-word" });
  const word = el("span", { class: "caption-word" });
  const image = new Image();
  await new Promise((resolve) => { image.onload = resolve; image.src = sample.image; });
  const ctx = canvas.getContext("2d");
  const k = size / answer.width;
  const [rows, cols] = answer.grid;
  const draw = () => {
    const t = Number(slider.value);
    const weights = answer.attention[t];
    const top = Math.max(...weights.flat(), 1e-9);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(image, 0, 0, size, size);
    const cell = (answer.extent.size / cols) * k;
    weights.forEach((row, r) => row.forEach((w, c) => {
      ctx.fillStyle = `rgba(15, 23, 42, ${0.75 * (1 - w / top)})`;
      ctx.fillRect(answer.extent.left * k + c * cell, answer.extent.top * k + r * (answer.extent.size / rows) * k, cell, (answer.extent.size / rows) * k);
    }));
    word.textContent = `«${answer.tokens[t]}»`;
  };
  slider.addEventListener("input", draw);
  figure.append(
    note(`${model.id} captions a scene: «${answer.caption}» (reference: ${sample.label}). Bright cells are where it looks for each word.`),
    el("label", { for: "caption-word", class: "slider" }, "Word ", slider, word),
    canvas,
  );
  draw();
}

// 9 · inside the layers: the logit lens ------------------------------------------------------------
async function inside(text) {
  const figure = figureOf("inside");
  const model = pick(isTransformer);
  if (!model) return state(figure, "unavailable", note("No Transformer is loaded on this server: the lens reads a residual stream, which an RNN does not have."));
  const out = await postJSON("/api/lens", { model: model.id, text, beam_size: 1, k: 1 });
  const target = readablePieces(out.target_tokens);
  const head = el("tr", {}, el("th", { scope: "col" }, "point"), target.map((w) => el("th", { scope: "col" }, w)));
  const rows = out.points.map((point, p) => el("tr", {}, el("th", { scope: "row" }, point), out.top_tokens[p].map((tops, t) =>
    el("td", { class: out.rank[p][t] === 0 ? "lens-hit" : null, title: `“${target[t]}” has rank ${out.rank[p][t] + 1} here` },
      readablePieces([tops[0]])[0]))));
  const emerge = el("tr", {}, el("th", { scope: "row" }, "emerges at"), out.emergence.map((e) => el("td", {}, e ?? "—")));
  const table = el("table", { class: "cost-table lens-table", "aria-label": "Logit lens: the top-1 word at each point" },
    el("thead", {}, head), el("tbody", {}, rows, emerge));
  setChildren(figure, note(`${modelName(model)}: «${out.translation}». Each row reads the decoder's residual stream after one sublayer through the final norm and output layer; bold where the written word is already on top.`),
    el("div", { class: "table-scroll", tabindex: "0", role: "region", "aria-label": "Logit lens (scrolls sideways)" }, table));
  const link = stops.get("inside").querySelector('[data-role="full"]');
  link.href = `/?${new URLSearchParams({ model: model.id, text, beam: "1" })}#inside-card`;
  state(figure, "ready");
}

const STOPS = { forgetting, step: oneStep, scores: scoreFunctions, cost, self: selfAttention, transformer, beam, vision, inside };

async function runAll() {
  const text = textBox.value.trim();
  showError(errorBox, text ? "" : "Type a sentence first.");
  if (!text) return;
  for (const [name, draw] of Object.entries(STOPS)) {
    const figure = figureOf(name);
    state(figure, "loading", note("Computing…"));
    try {
      await draw(text);
    } catch (err) {
      state(figure, "error", el("p", { class: "error", role: "alert" }, err.message));
    }
  }
}

async function init() {
  showHealth();
  const params = new URLSearchParams(location.search);
  if (params.get("text")) textBox.value = params.get("text");
  try {
    models = await loadModels();
  } catch (err) {
    showError(errorBox, err.message);
    return;
  }
  document.getElementById("learn-form").addEventListener("submit", (event) => {
    event.preventDefault();
    runAll();
  });
  await runAll();
  document.body.dataset.learnReady = "true";
}

init();
