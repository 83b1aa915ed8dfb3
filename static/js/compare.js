// The Compare page: one sentence through two models, each with its own explorer; the kind and
// the view options stay in step between the two. State lives in the URL.
import { postJSON } from "./api.js";
import { $, el, role, setBusy, setChildren, showError, submitOnEnter } from "./dom.js";
import { drawDifference } from "./difference.js";
import { Explorer, viewFromParams, viewToParams } from "./explorer.js";
import { KIND_LABELS } from "./matrix.js";
import { describeArchitecture, examplesFor, fillModelSelect, infoLine, loadModels, showHealth } from "./models-api.js";

const form = $("#compare-form");
const textBox = $("#text");
const beamInput = $("#beam");
const button = $("#compare-btn");
const errorBox = $("#error");
const selects = { a: $("#model-a"), b: $("#model-b") };
const targetBox = $("#compare-target");
const SHARED = ["kind", "merge", "hideEos", "stretch"];

let models = [];
let current = null;
let requestId = 0;
let syncing = false;

const panels = {};
for (const side of ["a", "b"]) {
  const root = $(`#panel-${side}`);
  panels[side] = {
    root,
    explorer: new Explorer($(`#explorer-${side}`), {
      name: `attnscope-${side}`,
      onChange: (state) => follow(side, state),
      onRender: () => afterRender(),
    }),
  };
}

/** After either panel redraws: say when one lacks the kind the other shows; redraw the difference. */
function afterRender() {
  if (syncing) return;
  const a = panels.a.explorer;
  const b = panels.b.explorer;
  for (const [side, mine, other] of [["a", a, b], ["b", b, a]]) {
    const note = role(panels[side].root, "panel-note");
    const missing = mine.response && other.response && other.state.kind && mine.state.kind !== other.state.kind;
    note.hidden = !missing;
    if (missing) {
      const has = mine.state.kind ? `showing ${KIND_LABELS[mine.state.kind]} instead` : "it has no attention at all";
      note.textContent = `This model has no ${KIND_LABELS[other.state.kind]} attention: ${has}. The two panels show different things.`;
    }
  }
  drawDifference($("#diff-card"), a, b);
}

/** Keep the other panel's kind and view options in step with the one just changed. */
function follow(side, state) {
  if (syncing) return;
  const other = panels[side === "a" ? "b" : "a"].explorer;
  const shared = Object.fromEntries(SHARED.map((key) => [key, state[key]]));
  if (other.response && SHARED.some((key) => other.state[key] !== shared[key])) {
    syncing = true;
    other.update(shared);
    syncing = false;
  }
  writeUrl();
}

const modelById = (id) => models.find((m) => m.id === id) || null;

function beamSize() {
  const beam = Math.round(Number(beamInput.value));
  return Number.isFinite(beam) ? Math.min(Number(beamInput.max), Math.max(1, beam)) : 5;
}

function writeUrl() {
  const params = new URLSearchParams();
  for (const side of ["a", "b"]) if (selects[side].value) params.set(side, selects[side].value);
  const text = current ? current.text : textBox.value;
  if (text) params.set("text", text);
  params.set("beam", String(beamSize()));
  if (targetBox.value.trim()) params.set("target", targetBox.value.trim());
  if (current) {
    viewToParams(panels.a.explorer.state, params);
    // B's own layer and head ride along as blayer/bhead (the kind and view options are shared).
    const b = new URLSearchParams();
    viewToParams(panels.b.explorer.state, b);
    for (const key of ["layer", "head"]) if (b.has(key)) params.set(`b${key}`, b.get(key));
  }
  history.replaceState(null, "", `${location.pathname}?${params}`);
}

/** Suggested pairs among the models this server has, e.g. RNN additive vs Transformer. */
function renderPresets() {
  const find = (test) => models.find(test);
  const rnnAttn = find((m) => m.architecture === "rnn" && m.score && m.score !== "none");
  const rnnNone = find((m) => m.architecture === "rnn" && m.score === "none");
  const transformer = find((m) => m.architecture === "transformer");
  const selfAttn = find((m) => m.architecture === "self_attentive_rnn");
  const presets = [
    [rnnAttn, transformer, "RNN attention vs Transformer"],
    [rnnAttn, rnnNone, "attention vs no attention"],
    [rnnAttn, selfAttn, "RNN vs self-attentive RNN"],
  ].filter(([a, b]) => a && b && a.source_lang === b.source_lang);
  setChildren(
    $("#presets"),
    presets.map(([a, b, label]) =>
      el("button", {
        type: "button",
        class: "chip",
        title: `${a.id} vs ${b.id}`,
        onclick: () => {
          selects.a.value = a.id;
          selects.b.value = b.id;
          onModelChange();
          if (textBox.value.trim()) compare();
        },
      }, label),
    ),
  );
  if (!presets.length) $("#presets").append(el("span", { class: "muted" }, "pick any two models"));
}

function renderExamples() {
  const model = modelById(selects.a.value);
  setChildren(
    $("#examples"),
    examplesFor(model ? model.source_lang : "en").map((sentence) =>
      el("button", { type: "button", class: "chip", onclick: () => { textBox.value = sentence; compare(); } }, sentence),
    ),
  );
}

function onModelChange() {
  for (const side of ["a", "b"]) {
    const model = modelById(selects[side].value);
    role(panels[side].root, "model-name").textContent = model ? describeArchitecture(model) : "";
    role(panels[side].root, "model-info").textContent = model ? `${model.id} · ${infoLine(model).split(" · ").slice(1).join(" · ")}` : "";
  }
  renderExamples();
  writeUrl();
}

async function compare({ view = null } = {}) {
  const text = textBox.value.trim();
  if (!text) return showError(errorBox, "Type a sentence to translate first.");
  const chosen = { a: modelById(selects.a.value), b: modelById(selects.b.value) };
  if (!chosen.a || !chosen.b) return showError(errorBox, "Choose two models first.");
  const beam = beamSize();
  beamInput.value = String(beam);
  const id = ++requestId;
  showError(errorBox, "");
  setBusy(button, true);
  button.querySelector(".btn-label").textContent = "Translating…";
  try {
    const target = targetBox.value.trim();
    // Each model's own translation always; with a shared target, also that target forced on
    // both (its attention is what the explorers draw, so the two can be subtracted). The
    // attention drawn stays on the server until the explorer fetches the heads it shows
    // (docs/api.md, "Attention on demand"); an own translation not drawn asks for none.
    const attention = target ? [] : "on_demand";
    const translate = (side) => postJSON("/api/translate", { model: chosen[side].id, text, beam_size: beam, attention });
    const align = (side) => postJSON("/api/align", { model: chosen[side].id, text, target, attention: "on_demand" });
    const [own, forced] = await Promise.all([
      Promise.allSettled(["a", "b"].map(translate)),
      target ? Promise.allSettled(["a", "b"].map(align)) : null,
    ]);
    const results = ["a", "b"].map((_, i) => ({ own: own[i], forced: forced ? forced[i] : null }));
    if (id !== requestId) return;
    current = { text, beam };
    $("#compare-grid").hidden = false;
    syncing = true;
    try {
      await Promise.all(
        ["a", "b"].map((side, i) => showPanel(side, chosen[side], results[i], view && (side === "a" ? view : view.b))),
      );
    } finally {
      syncing = false;
    }
    afterRender();
    writeUrl();
  } finally {
    if (id === requestId) {
      setBusy(button, false);
      button.querySelector(".btn-label").textContent = "Compare";
    }
  }
}

/** One side's answers: its own translation, and when a target is shared, that target forced. */
async function showPanel(side, model, { own, forced }, view) {
  const { root, explorer } = panels[side];
  const errorBox_ = role(root, "panel-error");
  const resultBox = role(root, "panel-result");
  const drawn = forced || own; // the answer whose attention the explorer shows
  if (drawn.status === "rejected") {
    showError(errorBox_, drawn.reason.message);
    resultBox.hidden = true;
    explorer.root.hidden = true;
    return;
  }
  const response = drawn.value;
  showError(errorBox_, "");
  resultBox.hidden = false;
  role(root, "translation-label").textContent = forced ? `Model's own translation (beam ${current.beam})` : "Translation";
  const translation = role(root, "translation");
  translation.lang = model.target_lang || "";
  if (own.status === "fulfilled") {
    translation.textContent = own.value.translation || "(empty translation)";
    role(root, "meta").textContent = answerFacts(own.value);
  } else {
    translation.textContent = "—";
    role(root, "meta").textContent = `Could not translate: ${own.reason.message}`;
  }
  const forcedBox = role(root, "forced-box");
  forcedBox.hidden = !forced;
  if (forced) {
    const target = role(root, "forced");
    target.textContent = response.translation;
    target.lang = model.target_lang || "";
    role(root, "forced-meta").textContent = answerFacts(response);
  }
  const shared = view ? Object.fromEntries(SHARED.filter((k) => k in view).map((k) => [k, view[k]])) : {};
  const mine = view ? Object.fromEntries(["layer", "head", "avg"].filter((k) => k in view).map((k) => [k, view[k]])) : {};
  explorer.state.layer = null;
  explorer.mainTitle = forced ? "Your target (teacher-forced)" : null;
  Object.assign(explorer.state, shared, mine);
  await explorer.setResponse(response, model);
}

/** "log-probability −4.21 · 9 target tokens · 35 ms" for a translate or align answer. */
function answerFacts(response) {
  return [
    typeof response.logprob === "number" ? `log-probability ${response.logprob.toFixed(2)}` : null,
    `${response.target_tokens.length} target tokens`,
    response.finished === false ? "cut off at the length limit" : null,
    typeof response.timing_ms === "number" ? `${Math.round(response.timing_ms)} ms` : null,
  ].filter(Boolean).join(" · ");
}

const pick = (obj, keys) => Object.fromEntries(keys.filter((k) => k in obj).map((k) => [k, obj[k]]));

async function init() {
  showHealth();
  const params = new URLSearchParams(location.search);
  textBox.value = params.get("text") || "";
  if (params.get("beam")) beamInput.value = params.get("beam");
  submitOnEnter(form, textBox, compare);
  for (const side of ["a", "b"]) selects[side].addEventListener("change", onModelChange);
  try {
    models = await loadModels();
  } catch (err) {
    showError(errorBox, `Could not load the model list: ${err.message}`);
    document.body.dataset.ready = "true";
    return;
  }
  fillModelSelect(selects.a, models, params.get("a"));
  fillModelSelect(selects.b, models, params.get("b"));
  if (!params.get("a") || !params.get("b")) {
    const attn = models.find((m) => m.architecture === "rnn" && m.score !== "none") || models[0];
    const transformer = models.find((m) => m.architecture === "transformer" && m.id !== attn?.id) || models[1] || models[0];
    if (!params.get("a") && attn) selects.a.value = attn.id;
    if (!params.get("b") && transformer) selects.b.value = transformer.id;
  }
  renderPresets();
  onModelChange();
  targetBox.value = params.get("target") || "";
  if (textBox.value.trim()) {
    const view = viewFromParams(params);
    const forB = new URLSearchParams();
    for (const key of ["layer", "head"]) if (params.has(`b${key}`)) forB.set(key, params.get(`b${key}`));
    const b = viewFromParams(forB);
    view.b = { ...Object.fromEntries(SHARED.filter((k) => k in view).map((k) => [k, view[k]])), ...pick(b, ["layer", "head", "avg"]) };
    await compare({ view });
  }
  document.body.dataset.ready = "true";
}

init();
