// The Vision page: the Recurrent Attention Model's glimpse path (nested retina squares, a
// scrubber, class probabilities after each glimpse) and Show, Attend and Tell's caption with
// each word's attention over the image. All data comes from /api/vision as JSON; labels and
// captions go in as text.
import { getJSON, postJSON } from "./api.js";
import { el, plotlyReady, setChildren, showError } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const SCALE_COLOURS = ["#ffb020", "#36c5f0", "#e0457b", "#7bd88f"];
// Show, Attend and Tell's overlay: amber, its opacity proportional to the attention weight, on
// one scale for every word of a caption (0 clear, the caption's largest weight at OVERLAY_ALPHA).
// Scaled word by word instead, an even spread looked as sharp as a peak.
const OVERLAY_RGB = [255, 190, 30];
const OVERLAY_ALPHA = 200;
const $ = (id) => document.getElementById(id);
const state = { ram: null, ramImage: null, ramLabel: null, step: 0, timer: null, sat: null, satImage: null, word: 0 };

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  node.append(...children);
  return node;
}

function loadImage(url) {
  const img = new Image();
  img.src = url;
  return img.decode().then(() => img);
}

function readFile(input) {
  return new Promise((resolve, reject) => {
    const file = input.files && input.files[0];
    if (!file) return reject(new Error("no file chosen"));
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(new Error(`could not read ${file.name}`));
    reader.readAsDataURL(file);
  });
}

function fillSelect(select, models, test) {
  setChildren(select, models.map((m) => el("option", { value: m.id }, `${m.id} · ${test(m)}`)));
  if (!models.length) setChildren(select, el("option", { value: "" }, "no models found"));
}

const pct = (x) => (x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)} %`);

// ---------------------------------------------------------------- samples
async function loadSamples(dataset, box, note, onPick) {
  try {
    const answer = await getJSON(`/api/vision/samples?dataset=${encodeURIComponent(dataset)}&n=8&seed=${Math.floor(Math.random() * 1e6)}`);
    if (note) showError(note, "");
    setChildren(box, answer.samples.map((s) => el("button", {
      type: "button", class: "thumb", title: s.label, dataset: { label: s.label },
      onclick: () => onPick(s.image, s.label),
    }, el("img", { src: s.image, alt: s.label, width: 64, height: 64 }))));
    return answer.samples;
  } catch (err) {
    setChildren(box);
    if (note) showError(note, `${err.message} Upload or draw an image instead.`);
    return [];
  }
}

// ---------------------------------------------------------------- RAM
async function runRam(image, label) {
  const model = $("ram-model").value;
  if (!model) return;
  stopPlay();
  try {
    const answer = await postJSON("/api/vision/glimpses", { model, image });
    showError($("vision-error"), "");
    state.ram = answer;
    state.ramImage = image;
    state.ramLabel = label;
    const steps = Math.max(answer.glimpses.length, 1);
    const scrub = $("glimpse-step");
    scrub.max = String(steps - 1);
    scrub.disabled = steps < 2;
    $("glimpse-play").disabled = steps < 2;
    setStep(steps - 1);
  } catch (err) {
    showError($("vision-error"), err.message);
  }
}

function setStep(step) {
  state.step = step;
  $("glimpse-step").value = String(step);
  drawGlimpses();
  drawProbs();
}

function drawGlimpses() {
  const { ram, step } = state;
  const view = $("glimpse-view");
  const w = ram.width, h = ram.height, unit = Math.max(w, h) / 60;
  view.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const nodes = [svg("image", { href: state.ramImage, x: 0, y: 0, width: w, height: h, preserveAspectRatio: "none", class: "glimpse-image" })];
  const shown = ram.glimpses.slice(0, step + 1);
  if (shown.length > 1) {
    nodes.push(svg("polyline", { class: "glimpse-path", points: shown.map((g) => `${g.x},${g.y}`).join(" "), "stroke-width": 0.6 * unit }));
  }
  const current = shown[shown.length - 1];
  if (current) {
    current.scales.forEach((side, k) => nodes.push(svg("rect", {
      class: "glimpse-square", "data-scale": k, x: current.x - side / 2, y: current.y - side / 2, width: side, height: side,
      stroke: SCALE_COLOURS[k % SCALE_COLOURS.length], "stroke-width": 0.7 * unit,
    })));
  }
  shown.forEach((g, t) => nodes.push(svg("circle", {
    class: t === shown.length - 1 ? "glimpse-dot current" : "glimpse-dot", cx: g.x, cy: g.y, r: 1.6 * unit, "stroke-width": 0.4 * unit,
  }, svg("title", {}, `glimpse ${t + 1}: (${g.x.toFixed(1)}, ${g.y.toFixed(1)})`))));
  setChildren(view, nodes);
  const total = ram.glimpses.length;
  $("glimpse-label").textContent = total ? `${step + 1} of ${total}` : "– (a full-image CNN sees everything at once)";
}

function drawProbs() {
  const { ram, step } = state;
  const row = ram.class_probs[Math.min(step, ram.class_probs.length - 1)];
  const best = row.indexOf(Math.max(...row));
  setChildren($("class-probs"), ram.classes.map((name, c) => el("div", {
    class: `bar-row${c === best ? " best" : ""}${name === state.ramLabel ? " truth" : ""}`, dataset: { cls: name },
  }, el("span", { class: "bar-label" }, name),
  el("span", { class: "bar-track" }, el("span", { class: "bar-fill", style: { width: `${(100 * row[c]).toFixed(1)}%` } })),
  el("span", { class: "bar-value" }, pct(row[c])))));
  const truth = state.ramLabel ? ` · true class: ${state.ramLabel}` : "";
  $("ram-answer").textContent = `Answer: ${ram.prediction} (${pct(ram.probability)})${truth}`;
}

function stopPlay() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
  $("glimpse-play").textContent = "▶ Play";
}

function togglePlay() {
  if (state.timer) return stopPlay();
  const last = state.ram.glimpses.length - 1;
  setStep(0);
  $("glimpse-play").textContent = "■ Stop";
  state.timer = setInterval(() => (state.step >= last ? stopPlay() : setStep(state.step + 1)), 700);
}

function setupDrawPad() {
  const pad = $("draw-pad"), ctx = pad.getContext("2d");
  const clear = () => { ctx.fillStyle = "#000"; ctx.fillRect(0, 0, pad.width, pad.height); };
  clear();
  let last = null;
  const at = (e) => { const r = pad.getBoundingClientRect(); return [(e.clientX - r.left) * pad.width / r.width, (e.clientY - r.top) * pad.height / r.height]; };
  pad.addEventListener("pointerdown", (e) => { last = at(e); pad.setPointerCapture(e.pointerId); });
  pad.addEventListener("pointermove", (e) => {
    if (!last) return;
    const next = at(e);
    Object.assign(ctx, { strokeStyle: "#fff", lineWidth: 16, lineCap: "round", lineJoin: "round" });
    ctx.beginPath(); ctx.moveTo(...last); ctx.lineTo(...next); ctx.stroke();
    last = next;
  });
  pad.addEventListener("pointerup", () => { last = null; });
  $("draw-clear").addEventListener("click", clear);
  $("draw-use").addEventListener("click", () => runRam(pad.toDataURL("image/png"), null));
}

// ---------------------------------------------------------------- Show, Attend and Tell
async function runSat(image, reference) {
  const model = $("sat-model").value;
  if (!model) return;
  const beam = Math.min(10, Math.max(1, parseInt($("sat-beam").value, 10) || 1));
  try {
    const [answer, img] = await Promise.all([
      postJSON("/api/vision/caption", { model, image, beam_size: beam }), loadImage(image)]);
    showError($("vision-error"), "");
    state.sat = answer;
    state.satImage = img;
    // The caption's one colour scale: up to its largest weight, and at least twice an even spread
    // (a captioner without attention, all even, is then drawn half-tinted, not fully).
    state.satTop = Math.max(...answer.attention.flat(2), 2 / (answer.grid[0] * answer.grid[1]));
    $("sat-reference").textContent = reference ? `Reference: ${reference}` : "";
    $("sat-result").hidden = false;
    drawCaption();
    selectWord(0);
  } catch (err) {
    showError($("vision-error"), err.message);
  }
}

/** The image (its square extent) with one token's attention grid on top, upsampled smoothly;
 *  a weight w is drawn at opacity w / state.satTop, the same for every word (drawScale). */
function drawAttention(canvas, grid, overlay) {
  const { sat, satImage } = state;
  const ctx = canvas.getContext("2d"), size = canvas.width, scale = size / sat.extent.size;
  ctx.fillStyle = "#000";
  ctx.fillRect(0, 0, size, size);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(satImage, -sat.extent.left * scale, -sat.extent.top * scale, sat.width * scale, sat.height * scale);
  if (!overlay) return;
  const [rows, cols] = sat.grid, flat = grid.flat();
  const cells = document.createElement("canvas");
  cells.width = cols; cells.height = rows;
  const pixels = cells.getContext("2d").createImageData(cols, rows);
  flat.forEach((w, i) => pixels.data.set([...OVERLAY_RGB, alphaOf(w)], 4 * i));
  cells.getContext("2d").putImageData(pixels, 0, 0);
  ctx.imageSmoothingEnabled = true;
  ctx.drawImage(cells, 0, 0, size, size);
}

const alphaOf = (w) => Math.round(OVERLAY_ALPHA * Math.min(1, Math.max(0, w / state.satTop)));

/** The colour bar under the large map: the overlay's colours over black from 0 to the caption's
 *  largest weight, with the weight of an even spread marked. */
function drawScale() {
  const { sat, satTop } = state;
  const bar = $("sat-scale-bar"), ctx = bar.getContext("2d");
  for (let x = 0; x < bar.width; x++) {
    const a = alphaOf((satTop * x) / (bar.width - 1)) / 255;
    ctx.fillStyle = `rgb(${OVERLAY_RGB.map((c) => Math.round(c * a)).join(",")})`;
    ctx.fillRect(x, 0, 1, bar.height);
  }
  const even = 1 / (sat.grid[0] * sat.grid[1]);
  $("sat-scale").dataset.top = satTop.toFixed(6);
  $("sat-scale-max").textContent = satTop.toFixed(3);
  const mark = $("sat-scale-even");
  mark.hidden = even > satTop;
  mark.style.left = `${(100 * Math.min(1, even / satTop)).toFixed(1)}%`;
  mark.title = `an even spread: ${even.toFixed(3)} on each of the ${sat.grid[0]}×${sat.grid[1]} cells`;
  const largest = Math.max(...sat.attention.flat(2));
  const why = largest >= satTop ? "the largest weight any word gives any cell" : "twice an even spread (no weight is larger)";
  $("sat-scale-caption").textContent =
    `Attention weight, one scale for every word of this caption: clear at 0, full amber at ${satTop.toFixed(3)}, ` +
    `${why}. An even spread is ${even.toFixed(3)} a cell (the blue tick): flat attention looks faint and flat.`;
}

function drawCaption() {
  const { sat } = state;
  drawScale();
  setChildren($("caption-words"), sat.tokens.map((token, i) => el("button", {
    type: "button", class: token === "</s>" ? "word end" : "word", dataset: { index: i },
    onmouseenter: () => selectWord(i), onfocus: () => selectWord(i), onclick: () => selectWord(i),
  }, token)));
  const maps = sat.tokens.map((token, i) => {
    const canvas = el("canvas", { class: "attention-map", width: 96, height: 96, dataset: { word: token, index: i, max: Math.max(...sat.attention[i].flat()).toFixed(4), top: state.satTop.toFixed(6) } });
    drawAttention(canvas, sat.attention[i], true);
    return el("figure", { class: "attention-figure", onclick: () => selectWord(i) }, canvas, el("figcaption", {}, token));
  });
  if (!sat.uses_attention) maps.unshift(el("p", { class: "note warn wide" }, "This captioner has no attention: every word sees the mean of the grid (uniform)."));
  setChildren($("attention-maps"), maps);
}

function selectWord(i) {
  state.word = i;
  document.querySelectorAll("#caption-words .word").forEach((b, k) => b.classList.toggle("selected", k === i));
  document.querySelectorAll("#attention-maps .attention-figure").forEach((f, k) => f.classList.toggle("selected", k === i));
  const large = $("sat-large");
  large.dataset.word = state.sat.tokens[i];
  drawAttention(large, state.sat.attention[i], $("sat-overlay").checked);
}

// ---------------------------------------------------------------- model cards
function testSummary(m) {
  const t = m.test || {};
  if (m.task === "caption") {
    const cell = t.attention_in_cell_reference;
    // chrF added after training scored captions decoded again, whose own BLEU the card keeps beside
    const again = t.chrf_run && typeof t.chrf_run.bleu === "number" ? ` (captions decoded again: BLEU ${t.chrf_run.bleu})` : "";
    return `BLEU ${t.bleu ?? "–"} · chrF ${t.chrf ?? "–"}${again} · exact match ${pct(t.exact_match)} · attention in the named cell ${cell === undefined || cell === null ? "–" : pct(cell)}`;
  }
  const glimpses = Array.isArray(t.by_glimpse) ? ` (after glimpse 1: ${pct(t.by_glimpse[0])})` : "";
  return `accuracy ${pct(t.accuracy)}${glimpses}`;
}

function drawModelTable(models) {
  const head = el("tr", {}, ...["model", "kind", "trained on", "parameters", "test split", "training"].map((h) => el("th", {}, h)));
  const rows = models.map((m) => {
    const tr = m.card.training || {};
    const kind = m.kind === "ram" ? `RAM, ${m.glimpses} glimpses` : m.kind === "captioner" ? (m.attention ? "Show, Attend and Tell" : "captioner, no attention") : "full-image CNN";
    const when = tr.time_s ? `${Math.round(tr.time_s)} s, ${tr.steps} steps, ${tr.hardware || tr.device || ""}` : "–";
    return el("tr", {}, el("td", {}, m.id), el("td", {}, kind), el("td", {}, m.dataset), el("td", {}, m.parameters.toLocaleString("en")),
      el("td", {}, testSummary(m), m.card.note ? el("div", { class: "hint" }, m.card.note) : null), el("td", {}, when));
  });
  setChildren($("vm-table"), el("thead", {}, head), el("tbody", {}, rows));
}

async function drawCurves(models) {
  const Plotly = await plotlyReady();
  for (const [task, key] of [["classify", "val_accuracy"], ["caption", "val_exact_match"]]) {
    const traces = models.filter((m) => m.task === task && Array.isArray(m.card.curve) && m.card.curve.length).map((m) => ({
      type: "scatter", mode: "lines+markers", name: m.id, marker: { size: 4 },
      x: m.card.curve.map((p) => p.step), y: m.card.curve.map((p) => p[key] ?? null),
    }));
    await Plotly.newPlot($(`vm-curve-${task}`), traces, {
      height: 260, margin: { l: 48, r: 12, t: 8, b: 40 }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { size: 11 }, xaxis: { title: { text: "step" }, zeroline: false },
      yaxis: { tickformat: ".0%", rangemode: "tozero", gridcolor: "#eef2f7", zeroline: false },
      legend: { orientation: "h", y: -0.25, x: 0 },
    }, { displaylogo: false, responsive: true });
  }
}

// ---------------------------------------------------------------- start
async function init() {
  setupDrawPad();
  $("glimpse-step").addEventListener("input", (e) => { stopPlay(); setStep(parseInt(e.target.value, 10)); });
  $("glimpse-play").addEventListener("click", togglePlay);
  $("sat-overlay").addEventListener("change", () => state.sat && selectWord(state.word));
  // The attention models first: the RAM (cluttered first) and the captioner with attention.
  const rank = (m) => (m.attention ? 0 : 2) + (m.dataset === "cluttered" ? 0 : 1);
  const models = (await getJSON("/api/vision/models")).models.sort((a, b) => rank(a) - rank(b) || a.id.localeCompare(b.id));
  fillSelect($("ram-model"), models.filter((m) => m.task === "classify"),
    (m) => `${m.kind === "ram" ? `RAM, ${m.glimpses} glimpses` : "full-image CNN"} · test ${pct(m.test.accuracy)}`);
  fillSelect($("sat-model"), models.filter((m) => m.task === "caption"),
    (m) => `${m.attention ? "attention" : "no attention"} · exact ${pct(m.test.exact_match)}`);
  drawModelTable(models);
  const curves = drawCurves(models).catch((err) => showError($("vision-error"), err.message));
  const ramModel = models.find((m) => m.id === $("ram-model").value);
  if (ramModel && ramModel.dataset !== "scenes") $("ram-dataset").value = ramModel.dataset;

  const ramSamples = () => loadSamples($("ram-dataset").value, $("ram-samples"), $("ram-samples-note"), runRam);
  const satSamples = () => loadSamples("scenes", $("sat-samples"), null, runSat);
  $("ram-more").addEventListener("click", ramSamples);
  $("ram-dataset").addEventListener("change", ramSamples);
  $("sat-more").addEventListener("click", satSamples);
  $("ram-model").addEventListener("change", () => state.ramImage && runRam(state.ramImage, state.ramLabel));
  $("sat-model").addEventListener("change", () => state.satImage && runSat(state.satImage.src, null));
  $("sat-beam").addEventListener("change", () => state.satImage && runSat(state.satImage.src, null));
  for (const [input, run] of [[$("ram-upload"), runRam], [$("sat-upload"), runSat]]) {
    input.addEventListener("change", async () => {
      try { await run(await readFile(input), null); } catch (err) { showError($("vision-error"), err.message); }
      input.value = "";
    });
  }
  const [first, scenes] = await Promise.all([ramSamples(), satSamples()]);
  await Promise.all([first[0] && runRam(first[0].image, first[0].label), scenes[0] && runSat(scenes[0].image, scenes[0].label), curves]);
  document.body.dataset.ready = "true";
}

init().catch((err) => {
  showError($("vision-error"), err.message);
  document.body.dataset.ready = "true";
});
