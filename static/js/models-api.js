// The model list from /api/models: names, grouping by language pair, the model picker.
import { getJSON } from "./api.js";
import { el, formatCount, setChildren } from "./dom.js";
import { whenReady } from "./readiness.js";

// Labels and formulas come from GET /api/score-functions (the registries of attnscope/nn/scores.py and
// attnscope/nn/family.py), filled in place by loadCatalog() before anything is labelled; until then (or
// if it fails) a name stands for its label.
export const ARCHITECTURES = {};
export const SCORES = {};
export const SCORE_FORMULAS = {}; // "score(s, h_i) = …" per score function with a module, and per family that fixes one
let catalog = null;

/** Fill ARCHITECTURES, SCORES and SCORE_FORMULAS from the server (once; later calls share it). */
export function loadCatalog() {
  catalog ??= getJSON("/api/score-functions").then((data) => {
    for (const f of data.families || []) {
      ARCHITECTURES[f.architecture] = f.label;
      if (f.formula) SCORE_FORMULAS[f.architecture] = f.formula;
    }
    for (const s of data.score_functions || []) {
      SCORES[s.name] = s.label;
      if (s.module) SCORE_FORMULAS[s.name] = `score(${s.arguments}) = ${s.formula}`;
    }
  }).catch(() => { catalog = null; });
  return catalog;
}

export const pairOf = (m) => `${m.source_lang} → ${m.target_lang}`;

// One BLEU everywhere a person reads it: sacreBLEU lowercased 13a, as the Models page's tables and
// plots, training's validation BLEU and the README show it (cased is in each model's card table).
export const BLEU_KIND = "lowercased";

/** The BLEU of one set's scores: lowercased where the card has it, else cased (then so labelled). */
function scoreOf(scores, set) {
  if (typeof scores === "number") return { value: scores, set, kind: "" };
  if (scores && typeof scores.lowercase_13a === "number") return { value: scores.lowercase_13a, set, kind: BLEU_KIND };
  if (scores && typeof scores.cased === "number") return { value: scores.cased, set, kind: "cased" };
  return null;
}

/** A BLEU object of a card ({test2016: {lowercase_13a, ...}, ...}): test2016 first, else the first set. */
function headlineOf(bleu) {
  if (!bleu || typeof bleu !== "object") return null;
  const flat = scoreOf(bleu, "");
  if (flat) return flat;
  const sets = Object.keys(bleu).sort((a, b) => (b === "test2016") - (a === "test2016"));
  for (const set of sets) {
    const score = scoreOf(bleu[set], set);
    if (score) return score;
  }
  return null;
}

/** A model's headline BLEU (lowercased where known), from the API or else the page's cards. */
export function bleuOf(model) {
  if (!model) return null;
  return scoreOf(typeof model.bleu === "number" ? model.bleu : null, "") || headlineOf(model.bleu) || headlineOf(model.card_bleu);
}

export function describeArchitecture(model) {
  const arch = ARCHITECTURES[model.architecture] || model.architecture;
  if (model.score === "none") return `${arch}, no attention`;
  return model.score ? `${arch}, ${SCORES[model.score] || model.score} attention` : arch;
}

/** The card's chrF on the set a headline BLEU came from (" · chrF 58.4"), or "" without one. */
export function chrfBeside(model, bleu) {
  const score = bleu ? model?.chrf?.[bleu.set]?.score : undefined;
  return typeof score === "number" ? ` · chrF ${score.toFixed(1)}` : "";
}

export function optionLabel(model) {
  const bleu = bleuOf(model);
  return `${describeArchitecture(model)} · ${bleu ? `${bleu.kind ? `${bleu.kind} ` : ""}BLEU ${bleu.value.toFixed(1)}${chrfBeside(model, bleu)}` : "no BLEU yet"} (${model.id})${stateNote(model)}`;
}

/** " · not loaded" / " · loading…" for a model the server keeps unloaded (ATTNSCOPE_MAX_LOADED_MODELS); "" when loaded. */
export function stateNote(model) {
  if (!model || !model.state || model.state === "loaded") return "";
  return model.state === "loading" ? " · loading…" : " · not loaded (loads on first use)";
}

export function infoLine(model) {
  const bleu = bleuOf(model);
  const parts = [
    describeArchitecture(model),
    model.layers > 1 || model.heads > 1 ? `${model.layers} layers × ${model.heads} heads` : null,
    `${formatCount(model.parameters)} parameters`,
    bleu ? `BLEU ${bleu.value.toFixed(1)}${bleu.set ? ` on ${bleu.set}` : ""} (sacreBLEU${bleu.kind ? `, ${bleu.kind}` : ""})` : "BLEU not measured",
    chrfBeside(model, bleu).slice(3) || null,
    model.device ? `on ${model.device}` : null,
  ];
  return parts.filter(Boolean).join(" · ");
}

/** The models' cards, as the server rendered them into the page. */
export function pageCards() {
  const node = document.getElementById("cards-data");
  return node ? JSON.parse(node.textContent) : [];
}

/** The models, once the server has loaded them all (a page opened earlier waits: readiness.js). */
export async function loadModels() {
  await whenReady();
  await loadCatalog();
  const data = await getJSON("/api/models");
  const cards = new Map(pageCards().map((card) => [card.id, card]));
  return (data.models || []).map((m) => ({ ...m, card_bleu: cards.get(m.id)?.bleu ?? null }));
}

/** Fill a <select> with the models, one <optgroup> per language pair. */
export function fillModelSelect(select, models, selected) {
  const pairs = new Map();
  for (const model of models) {
    if (!pairs.has(pairOf(model))) pairs.set(pairOf(model), []);
    pairs.get(pairOf(model)).push(model);
  }
  const order = { transformer: 0, self_attentive_rnn: 1, rnn: 2 };
  const groups = [...pairs.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([pair, list]) =>
    el(
      "optgroup",
      { label: pair },
      list
        .sort((a, b) => (order[a.architecture] ?? 9) - (order[b.architecture] ?? 9) || a.id.localeCompare(b.id))
        .map((m) => el("option", { value: m.id }, optionLabel(m))),
    ),
  );
  setChildren(select, groups);
  if (!models.length) setChildren(select, el("option", { value: "" }, "no models found"));
  if (selected && models.some((m) => m.id === selected)) select.value = selected;
}

/** The header's server status (amber "loading N of M models" while the models load). */
export { showHealth } from "./readiness.js";

/** Example sentences for a source language (from the page's JSON). */
export function examplesFor(lang) {
  const node = document.getElementById("examples-data");
  const all = node ? JSON.parse(node.textContent) : {};
  return all[lang] || all.en || [];
}
