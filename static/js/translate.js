// The Translate page: text in, translation and the attention explorer out; state in the URL.
import { postJSON } from "./api.js";
import { $, el, role, setBusy, setChildren, showError, submitOnEnter } from "./dom.js";
import { ExplainView } from "./explain-view.js";
import { Explorer, viewFromParams, viewToParams } from "./explorer.js";
import { ExplorerPlayer } from "./explorer-player.js";
import { initHeadsCard } from "./heads-panel.js";
import { ensureAverages, ensureLayer } from "./attention-client.js";
import { cardOf } from "./head-facts.js";
import { HeadView } from "./headview.js";
import { renderConfidence, renderCoverage } from "./insight.js";
import { Inspector } from "./inspect.js";
import { examplesFor, fillModelSelect, infoLine, loadModels, showHealth } from "./models-api.js";
import { readablePieces } from "./pieces.js";
import { whenReady } from "./readiness.js";
import { renderTrust } from "./trust.js";
import { piecesToText } from "./whatif.js";

const form = $("#translate-form");
const textBox = $("#text");
const modelSelect = $("#model");
const beamInput = $("#beam");
const protectBox = $("#protect"); // checked: the server's default (protect where the model can)
const button = $("#translate-btn");
const errorBox = $("#error");
const warning = $("#model-warning");
const resultCard = $("#result");
const alignForm = $("#align-form");
const targetInput = $("#target");
const alignButton = $("#align-btn");
const alignClear = $("#align-clear");
const probs = $("#probs");
const insight = $("#insight");
const staleNote = $("#stale");
const copyButton = $("#copy-link");

let models = [];
let current = null; // {response, model, text, beam}
let requestId = 0;
let player = null; // the explorer's player (explorer-player.js), made after the explorer

const explorer = new Explorer($("#explorer"), {
  onChange: () => {
    writeUrl();
    player?.refresh();
  },
  onRowClick: (row) => inspector.showStep(row),
  onRender: async () => {
    if (!current) return;
    // On demand (attention-client.js): the coverage reads the cross-attention's layer averages,
    // the head view every head of the layer shown; fetched once each, then kept with the answer.
    const response = current.response;
    let kind, layer; // fetch for the view shown after the fetch: it may have moved meanwhile
    do {
      kind = explorer.state.kind;
      layer = explorer.state.layer ?? 0;
      const fetched = await Promise.all([ensureAverages(response, "cross"), ensureLayer(response, kind, layer)])
        .then(() => true, (err) => { showError(errorBox, err.message); return false; });
      if (!fetched || current?.response !== response) return;
    } while (kind !== explorer.state.kind || layer !== (explorer.state.layer ?? 0));
    renderInsight();
    renderHeadView();
  },
  name: "attnscope",
});
const headsCard = initHeadsCard(explorer); // the Heads card, and role badges on the explorer's grid
const explainView = new ExplainView(explorer, $("#explorer [data-role=explain-switch]"), {
  redo: () => translate({ view: { ...explorer.state }, prefix: current?.prefix, target: explorer.aligned ? targetInput.value : null }),
});

const headView = new HeadView($("#headview-card"));
player = new ExplorerPlayer($("#player"), $("#player-tree"), $("#player-step"), explorer, {
  request: playRequest,
  onStart: () => {
    requestId += 1; // a translation still on its way is not shown over the one playing
    showError(errorBox, "");
    // The finished translation's views, back with the answer: not shown beside the one playing.
    for (const card of [insight, $("#anatomy-card"), $("#beam-card"), $("#headview-card"), $("#trust")]) card.hidden = true;
    clearAlignment(false);
  },
  onProgress: (partial) => {
    const translation = $("#translation");
    translation.textContent = `${piecesToText(partial.target_tokens.filter((t) => t !== "</s>"))} …`;
    translation.classList.add("muted");
    const steps = partial.target_tokens.length;
    $("#result-meta").textContent = `${partial.model} · streamed from the server: ${steps} step${steps === 1 ? "" : "s"} shown so far`;
  },
  onAnswer: (answer, body, model) => showResult(answer, { model, text: body.text, beam: body.beam_size, streamed: true }),
});
const inspector = new Inspector({
  explorer,
  errorBox,
  redecode: (prefix) => translate({ prefix, view: { ...explorer.state } }),
});

function renderHeadView() {
  if (!current) return;
  const names = {
    cross: ["target", "source"],
    encoder_self: ["source", "source"],
    decoder_self: ["target", "decoder input"],
  }[explorer.state.kind] || ["queries", "keys"];
  const lang = (name) => (name === "source" ? current.model.source_lang : current.model.target_lang);
  headView.render(current.response, explorer.state, {
    rowName: `${names[0]} (${lang(names[0])})`,
    colName: `${names[1]} (${lang(names[1])})`,
  });
}

/** Confidence of each output token and coverage of each source token, for the view shown. */
function renderInsight() {
  if (!current) return;
  insight.hidden = false;
  renderConfidence(role(insight, "confidence"), current.response, { onPick: (i) => inspector.pickToken(i) });
  const coverage = renderCoverage(role(insight, "coverage"), current.response, explorer.state);
  role(insight, "insight-hint").textContent = coverage
    ? `Coverage: the cross-attention each source token received over the ${current.response.target_tokens.length} output tokens${coverage.where ? `, ${coverage.where}` : ""}; dashed: under a quarter of an even share, a word the model may have dropped.`
    : "";
}

function modelById(id) {
  return models.find((m) => m.id === id) || null;
}

function beamSize() {
  const beam = Math.round(Number(beamInput.value));
  return Number.isFinite(beam) ? Math.min(Number(beamInput.max), Math.max(1, beam)) : 5;
}

function writeUrl() {
  const params = new URLSearchParams();
  // The link names the model of the result shown; a newly picked model joins it once translated.
  const model = current ? current.model.id : modelSelect.value;
  if (model) params.set("model", model);
  const text = current ? current.text : textBox.value;
  if (text) params.set("text", text);
  params.set("beam", String(current ? current.beam : beamSize()));
  if (explorer.aligned && targetInput.value) params.set("target", targetInput.value);
  if (current && current.prefix) params.set("prefix", current.prefix);
  if (!protectBox.checked) params.set("protect", "0");
  if (current) viewToParams(explorer.state, params);
  history.replaceState(null, "", `${location.pathname}?${params}`);
}

function renderExamples() {
  const model = modelById(modelSelect.value);
  const sentences = examplesFor(model ? model.source_lang : "en");
  setChildren(
    $("#examples"),
    sentences.map((sentence) =>
      el("button", { type: "button", class: "chip", onclick: () => { textBox.value = sentence; translate(); } }, sentence),
    ),
  );
}

function renderModelInfo() {
  const model = modelById(modelSelect.value);
  $("#model-info").textContent = model ? infoLine(model) : "";
}

/** The fields every translate request of the form sends (the player's stream too): sentence,
 *  model, beam and the explorer's explanation method (`explain`, so that an answer the stream
 *  ends with draws the method shown, as a normal translate's does). */
function formFields(model, text, beam) {
  return { model: model.id, text, beam_size: beam, ...explainView.request(model) };
}

/** What the player streams: the form's fields (nothing kept as written: the stream shows the
 *  search itself), with the scores for the anatomy of each step, on demand (the steps carry no
 *  rows; the player fetches the head shown, step by step). */
function playRequest() {
  const text = textBox.value.trim();
  const model = modelById(modelSelect.value);
  if (!model || !text) {
    showError(errorBox, model ? "Type a sentence to translate first." : "Choose a model first.");
    return null;
  }
  const beam = beamSize();
  beamInput.value = String(beam);
  const body = { ...formFields(model, text, beam), return_beam: beam > 1, return_scores: true, protect: false, attention: "on_demand" };
  return { body, model };
}

/** Put an answer on the page (a translation, or the answer a played stream ended with). */
async function showResult(response, { model, text, beam, prefix = null, original = null, streamed = false, view = null }) {
  current = { response, model, text, beam, prefix, original, streamed };
  // The Heads card (heads-panel.js) switches heads off and attributes this sentence, not the box's.
  const detail = { model: model.id, text, beam, translation: response.translation };
  document.dispatchEvent(new CustomEvent("attnscope:translated", { detail }));
  markStale(false);
  renderResult();
  await explorer.setResponse(response, model);
  if (view) await explorer.update(view);
}

/** Translate the text box; `prefix` forces the output's beginning (a what-if: the result without
 *  one stays on screen as the original). */
async function translate({ view = null, target = null, prefix = null } = {}) {
  const text = textBox.value.trim();
  const model = modelById(modelSelect.value);
  if (!model) {
    const loading = !document.body.dataset.ready;
    return showError(errorBox, loading ? "The models are still loading: the page translates once they are ready." : "Choose a model first (no models were found on the server?).");
  }
  if (!text) return showError(errorBox, "Type a sentence to translate first.");
  const beam = beamSize();
  beamInput.value = String(beam);
  const id = ++requestId;
  showError(errorBox, "");
  setBusy(button, true);
  button.querySelector(".btn-label").textContent = "Translating…";
  try {
    // The matrices stay on the server until a view draws them (docs/api.md, "Attention on demand").
    const body = { ...formFields(model, text, beam), return_beam: true, attention: "on_demand" };
    if (prefix) body.prefix = prefix;
    if (!protectBox.checked) body.protect = false;
    const response = await postJSON("/api/translate", body);
    if (id !== requestId) return;
    const sameInput = current && current.text === text && current.model.id === model.id && current.beam === beam;
    const original = prefix && sameInput ? current.original || (current.prefix ? null : current.response) : null;
    player.reset();
    await showResult(response, { model, text, beam, prefix, original, view });
    if (target) {
      targetInput.value = target;
      await align();
    }
    writeUrl();
  } catch (err) {
    if (id === requestId) showError(errorBox, err.message);
  } finally {
    if (id === requestId) {
      setBusy(button, false);
      button.querySelector(".btn-label").textContent = "Translate";
    }
  }
}

function renderResult() {
  const { response, model, beam } = current;
  resultCard.hidden = false;
  $("#explorer-card").hidden = false;
  const translation = $("#translation");
  translation.textContent = response.translation || "(empty translation)";
  translation.lang = model.target_lang || "";
  translation.classList.toggle("muted", !response.translation);
  const parts = [
    `${response.model}`,
    beam === 1 ? "greedy" : `beam ${beam}`,
    current.streamed ? "played as it was made (nothing kept as written)" : null,
    typeof response.logprob === "number" ? `log-probability ${response.logprob.toFixed(2)}${response.rescored ? " (rescored)" : ""}` : null,
    `${response.source_tokens.length} source → ${response.target_tokens.length} target tokens`,
    response.finished === false ? "cut off at the length limit (no </s>)" : null,
    response.protected && response.protected.length ? `kept as written: ${response.protected.map((p) => p.text).join("; ")}` : null,
    response.forced_tokens ? `first ${response.forced_tokens} token${response.forced_tokens === 1 ? "" : "s"} forced (what-if)` : null,
    response.attention_cost && Object.keys(response.attention_cost).length
      ? `attention weights computed: ${Object.entries(response.attention_cost).map(([kind, n]) => `${kind.replace("_", " ")} ${n.toLocaleString("en")}`).join(", ")}`
      : null,
    typeof response.timing_ms === "number" ? `${Math.round(response.timing_ms)} ms` : null,
  ];
  $("#result-meta").textContent = parts.filter(Boolean).join(" · ");
  const longer = longerThanTrained(response);
  const warning = $("#length-warning");
  warning.hidden = !longer;
  warning.textContent = longer || "";
  renderTrust($("#trust"), response);
  targetInput.placeholder = response.translation ? `e.g. ${response.translation}` : "a reference translation";
  clearAlignment(false);
  inspector.setResult(current);
}

/** Whether the input is longer than anything the model was trained on, per its card's
 *  training cap (`hyperparameters.training.max_train_tokens`: longer pairs were dropped); the
 *  sentence saying so, or "" (a card without the number says nothing). */
function longerThanTrained(response) {
  const cap = cardOf(response.model)?.hyperparameters?.training?.max_train_tokens;
  const tokens = response.source_tokens.length - 1; // without </s>
  if (typeof cap !== "number" || tokens <= cap) return "";
  return `This input is ${tokens} tokens long; ${response.model} was never trained on inputs over ${cap} tokens (its card), so expect its translation and attention to be less reliable here.`;
}

function clearAlignment(redraw = true) {
  probs.hidden = true;
  alignClear.hidden = true;
  if (redraw && explorer.aligned) explorer.setAligned(null);
}

function probabilityChips(tokens, logprobs) {
  const labels = readablePieces(tokens); // byte pieces as characters
  return tokens.map((token, i) => {
    const lp = logprobs[i];
    const p = Math.exp(lp);
    return el(
      "span",
      { class: "prob", title: `${token}: p = ${p.toFixed(4)}, log p = ${lp.toFixed(3)}`, style: { "--p": p.toFixed(3) } },
      el("span", { class: "prob-token" }, labels[i]),
      el("span", { class: "prob-value" }, p >= 0.995 ? "1.00" : p.toFixed(2)),
    );
  });
}

async function align() {
  if (!current) return;
  const target = targetInput.value.trim();
  if (!target) return showError(errorBox, "Type your own target translation first.");
  const { model, text, response } = current;
  const id = requestId;
  showError(errorBox, "");
  setBusy(alignButton, true);
  try {
    const own = response.translation
      ? postJSON("/api/align", { model: model.id, text, target: response.translation, attention: [] }).catch(() => null)
      : Promise.resolve(null); // its log-probabilities alone
    // The teacher-forced matrices stay on the server until the explorer draws them (on demand).
    const asked = { model: model.id, text, target, attention: "on_demand", ...explainView.request(model) };
    const [aligned, ownAligned] = await Promise.all([postJSON("/api/align", asked), own]);
    if (id !== requestId) return;
    const sum = (xs) => xs.reduce((a, b) => a + b, 0);
    setChildren(
      role(probs, "model-probs"),
      ownAligned ? probabilityChips(ownAligned.target_tokens, ownAligned.target_logprobs) : el("span", { class: "muted" }, "—"),
    );
    setChildren(role(probs, "target-probs"), probabilityChips(aligned.target_tokens, aligned.target_logprobs));
    role(probs, "logprob-summary").textContent =
      `model's translation ${ownAligned ? sum(ownAligned.target_logprobs).toFixed(2) : "—"}, your target ${sum(aligned.target_logprobs).toFixed(2)}`;
    probs.hidden = false;
    alignClear.hidden = false;
    await explorer.setAligned(aligned);
    writeUrl();
  } catch (err) {
    showError(errorBox, err.message);
  } finally {
    setBusy(alignButton, false);
  }
}

/** The result on screen no longer matches the chosen model: say so, and disable what would mix them. */
function markStale(stale, message = "") {
  resultCard.classList.toggle("stale", stale);
  $("#explorer-card").classList.toggle("stale", stale); // its confidence, coverage and your target too
  staleNote.hidden = !stale;
  staleNote.textContent = message;
  alignButton.disabled = stale;
  copyButton.disabled = stale;
  targetInput.disabled = stale;
}

async function onModelChange() {
  renderModelInfo();
  renderExamples();
  warning.hidden = true;
  if (!current) return writeUrl();
  const model = modelById(modelSelect.value);
  if (!model || model.id === current.model.id) {
    markStale(false);
    return writeUrl();
  }
  markStale(true, `This result is from ${current.model.id}; translating with ${model.id}…`);
  const target = explorer.aligned && targetInput.value.trim() && model.target_lang === current.model.target_lang ? targetInput.value : null;
  await translate({ view: { ...explorer.state, layer: null }, target });
  if (current.model.id !== model.id) {
    markStale(true, `This result is from ${current.model.id}, not ${model.id}: translate again to use the new model.`);
  }
}

async function copyLink() {
  writeUrl();
  const link = $("#copy-link");
  try {
    await navigator.clipboard.writeText(location.href);
    link.textContent = "Link copied";
  } catch {
    window.prompt("Copy this link:", location.href);
  }
  setTimeout(() => (link.textContent = "Copy link"), 1500);
}

async function init() {
  showHealth();
  const params = new URLSearchParams(location.search);
  textBox.value = params.get("text") || "";
  if (params.get("beam")) beamInput.value = params.get("beam");
  if (params.get("protect") === "0") protectBox.checked = false;
  submitOnEnter(form, textBox, translate);
  alignForm.addEventListener("submit", (event) => {
    event.preventDefault();
    align();
  });
  alignClear.addEventListener("click", () => {
    targetInput.value = "";
    clearAlignment();
    writeUrl();
  });
  copyButton.addEventListener("click", copyLink);
  modelSelect.addEventListener("change", onModelChange);
  whenReady((ready) => {
    // Opened while the server loads its models: say so where the models will appear.
    const text = `loading models… (${ready.loaded ?? ready.models} of ${ready.total ?? "?"})`;
    setChildren(modelSelect, el("option", { value: "" }, text));
    headsCard.refresh();
  });
  try {
    models = await loadModels();
  } catch (err) {
    setChildren(modelSelect, el("option", { value: "" }, "models unavailable"));
    headsCard.refresh();
    showError(errorBox, `Could not load the model list: ${err.message}`);
    document.body.dataset.ready = "true";
    return;
  }
  fillModelSelect(modelSelect, models, params.get("model"));
  headsCard.refresh(models);
  if (params.get("model") && !modelById(params.get("model"))) {
    // Kept on screen (not in the error box, which each request clears) until another model is picked.
    warning.textContent = `The link names a model this server does not have (${params.get("model")}); showing ${modelSelect.value || "no model"} instead.`;
    warning.hidden = false;
  }
  renderModelInfo();
  renderExamples();
  const first = !params.has("text");
  // Text typed while the model list loaded (a slow start: the server still loading its models)
  // is the visitor's: never replaced by the example, and translated when they ask.
  const typed = first && textBox.value.trim() !== "";
  if (first && !typed && modelSelect.value) textBox.value = examplesFor(modelById(modelSelect.value)?.source_lang || "en")[0] || "";
  if (!typed && textBox.value.trim() && modelSelect.value) {
    // A first visit shows a translated example at once, in the default view (the best-aligned head).
    await translate({ view: first ? null : viewFromParams(params), target: params.get("target"), prefix: params.get("prefix") });
  }
  document.body.dataset.ready = "true";
}

init();
