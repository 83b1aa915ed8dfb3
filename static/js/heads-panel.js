// The Translate page's "Heads" card: every cross-attention head of the chosen model with its
// word-alignment F1 from the card (sortable), click to switch heads off and translate again with
// `disable_heads`, and attention beside gradient attribution (POST /api/attribution) with the
// rank correlation of each head. Works on the sentence the page translated last (translate.js
// announces it with an "attnscope:translated" event), else on the text box.
import { postJSON } from "./api.js";
import { runContrast } from "./contrast-view.js";
import { el, plotlyReady, role, setChildren, showError } from "./dom.js";
import { plotlyText } from "./heatmap.js";
import { headFacts } from "./head-facts.js";
import { badgeChips, rolePanel } from "./head-roles.js";
import { pageCards } from "./models-api.js";

const card = document.getElementById("heads-card");
const list = role(card, "heads-list");
const out = role(card, "heads-out");
const status = role(card, "heads-status");
const sortBy = role(card, "heads-sort");
const off = new Set(); // "layer:head" keys switched off
let models = [];

// Read when needed, not at load: a page opened while the models load gets its cards later.
const cardOf = (id) => pageCards().find((c) => c.id === id) || null;
const model = () => models.find((m) => m.id === document.getElementById("model").value);
// The card's F1 grid, with a head trained on reading rows given its F1 on those (head-facts.js).
const f1Of = (m) => headFacts(cardOf(m.id), "cross", m.layers, m.heads).f1;
// Layers and heads are counted from 1 on the page (the API and the cards count from 0).
const headName = (l, h) => `L${l + 1} · H${h + 1}`;
let translated = null; // {model, text, beam, translation}: the sentence the page translated last

function heads(m) {
  const f1 = f1Of(m);
  const all = [];
  for (let l = 0; l < m.layers; l++) for (let h = 0; h < m.heads; h++) all.push({ l, h, f1: f1 ? f1[l]?.[h] : null });
  if (sortBy.value === "f1") all.sort((a, b) => (b.f1 ?? -1) - (a.f1 ?? -1));
  return all;
}

function render() {
  const m = model();
  out.replaceChildren();
  if (!m) {
    const loading = !models.length && !document.body.dataset.ready;
    setChildren(list, el("span", { class: "hint" }, loading ? "The heads appear once the models have loaded." : "Choose a model to see its heads."));
    return;
  }
  if (!m.attention.includes("cross")) {
    setChildren(list, el("span", { class: "hint" }, "This model has no cross-attention heads."));
    return;
  }
  setChildren(list, heads(m).map(({ l, h, f1 }) => {
    const key = `${l}:${h}`;
    return el("button", {
      type: "button",
      class: `chip${off.has(key) ? " off" : ""}`,
      style: off.has(key) ? { textDecoration: "line-through", opacity: "0.55" } : {},
      "aria-pressed": String(off.has(key)),
      dataset: { head: key },
      title: `${off.has(key) ? "switched off: click to switch on" : "click to switch this head off"} (layer ${l}, head ${h} in the API and the card)`,
      onclick: () => { off.has(key) ? off.delete(key) : off.add(key); render(); },
    }, `${headName(l, h)}${f1 == null ? "" : ` · F1 ${f1.toFixed(2)}`}`);
  }));
  badgeChips(list, m.id, "cross", () => model()?.id); // each head's role, where the model has an analysis
}

/** The request for the sentence on screen: the one translated last (not whatever the text box
 *  holds now), else the text box. */
function body() {
  const m = model();
  if (translated && translated.model === m.id) return { model: m.id, text: translated.text, beam_size: translated.beam };
  return { model: m.id, text: document.getElementById("text").value, beam_size: Number(document.getElementById("beam").value) || 5 };
}

async function runAblation() {
  const m = model();
  if (!m) return;
  const disable = [...off].map((k) => { const [layer, head] = k.split(":").map(Number); return { kind: "cross", layer, head }; });
  status.textContent = "translating…";
  try {
    const request = body();
    const [base, ablated] = await Promise.all([postJSON("/api/translate", request), postJSON("/api/translate", { ...request, disable_heads: disable })]);
    status.textContent = `"${request.text}", beam ${request.beam_size}`;
    const names = disable.map(({ layer, head }) => headName(layer, head)).join(", ");
    setChildren(out, el("dl", { class: "facts" },
      el("dt", {}, "All heads on"), el("dd", { dataset: { role: "heads-base" } }, base.translation),
      el("dt", { title: names }, `${disable.length} head${disable.length === 1 ? "" : "s"} off`), el("dd", { dataset: { role: "heads-ablated" } }, ablated.translation),
      el("dt", {}, "Log-probability"), el("dd", {}, `${base.logprob.toFixed(2)} → ${ablated.logprob.toFixed(2)}`)));
  } catch (err) {
    status.textContent = "";
    showError(out, err.message);
  }
}

/** The mean of the heads of one layer, or of every head of every layer ("all"): [target][source]. */
function meanAttention(cross, layer) {
  const heads = layer === "all" ? cross.flat() : cross[layer];
  return heads[0].map((row, t) => row.map((_, s) => heads.reduce((acc, head) => acc + head[t][s], 0) / heads.length));
}

function attentionChoices(cross) {
  const layers = cross.length;
  const heads = cross[0].length;
  const options = cross.map((_, l) => el("option", { value: String(l), selected: l === layers - 1 }, `layer ${l + 1}: mean of its ${heads} heads`));
  if (layers > 1) options.push(el("option", { value: "all" }, `all ${layers} layers × ${heads} heads: mean of ${layers * heads}`));
  return el("select", { dataset: { role: "attribution-layer" }, "aria-label": "Attention shown beside the attribution" }, options);
}

async function runAttribution() {
  const m = model();
  if (!m) return;
  const stepsInput = role(card, "attribution-steps");
  const steps = Math.min(128, Math.max(1, Math.round(Number(stepsInput.value)) || 32));
  stepsInput.value = String(steps);
  status.textContent = `computing gradients (${steps} steps)…`;
  try {
    const request = { ...body(), steps };
    // The translation on screen, exactly (a forced beginning included), not a new decode of it.
    if (translated && translated.model === m.id && translated.translation) request.target = translated.translation;
    const r = await postJSON("/api/attribution", request);
    status.textContent = `"${request.text}" → "${r.translation}". Integrated gradients with ${steps} steps: completeness gap ${r.completeness_gap.toFixed(3)} (0 is exact; more steps shrink it). ρ = Spearman rank correlation of each head's attention rows with the attribution rows.`;
    status.dataset.steps = String(steps);
    const rho = r.correlation ? r.correlation.integrated_gradients : null;
    const table = rho ? el("table", { class: "bleu-table", dataset: { role: "heads-correlation" } },
      el("thead", {}, el("tr", {}, el("th", { class: "no-caps", title: "Spearman's rank correlation" }, "ρ"), ...rho[0].map((_, h) => el("th", {}, `H${h + 1}`)))),
      el("tbody", {}, rho.map((row, l) => el("tr", {}, el("th", {}, `Layer ${l + 1}`), ...row.map((v) => el("td", {}, v == null ? "–" : v.toFixed(2))))))) : null;
    const left = el("div", { class: "chart", dataset: { chart: "attribution" } });
    const right = el("div", { class: "chart", dataset: { chart: "attention-mean" } });
    const choice = r.cross_attention ? attentionChoices(r.cross_attention) : null;
    const choiceRow = choice ? el("label", { class: "hint attribution-choice" }, "Attention beside it: ", choice) : null;
    setChildren(out, choiceRow, el("div", { class: "pair-charts" }, left, right), table);
    const Plotly = await plotlyReady();
    // Indices on the axes, the tokens as tick text: every row and column labelled (a categorical
    // axis labels every other one of a long sentence, and merges tokens spelled alike).
    const ticks = (tokens) => ({ tickmode: "array", tickvals: tokens.map((_, i) => i), ticktext: tokens.map(plotlyText), tickfont: { size: 10 }, automargin: true });
    const height = Math.max(320, 110 + 16 * r.target_tokens.length);
    const draw = (div, z, title) => Plotly.react(div, [{
      type: "heatmap", z, colorscale: "Blues", reversescale: true, zmin: 0, zmax: 1,
      customdata: z.map((row, i) => row.map((_, j) => [plotlyText(r.target_tokens[i]), plotlyText(r.source_tokens[j])])),
      showscale: true, colorbar: { thickness: 10, len: 0.9, tickfont: { size: 10 }, title: { text: "weight", side: "right", font: { size: 11 } } },
      hovertemplate: "%{customdata[0]} → %{customdata[1]}: %{z:.3f}<extra></extra>",
    }],
    { title: { text: title, font: { size: 13 } }, height, margin: { l: 90, r: 10, t: 30, b: 80 }, xaxis: ticks(r.source_tokens), yaxis: { ...ticks(r.target_tokens), autorange: "reversed" }, paper_bgcolor: "rgba(0,0,0,0)" },
    { displaylogo: false, responsive: true, displayModeBar: false });
    await draw(left, r.integrated_gradients, `Integrated gradients (${steps} steps)`);
    if (choice) {
      const drawMean = () => {
        const layer = choice.value === "all" ? "all" : Number(choice.value);
        right.dataset.layer = choice.value;
        return draw(right, meanAttention(r.cross_attention, layer), layer === "all" ? "Attention (mean of every layer's heads)" : `Attention (layer ${layer + 1}, mean of its heads)`);
      };
      choice.addEventListener("change", drawMean);
      await drawMean();
    }
  } catch (err) {
    status.textContent = "";
    showError(out, err.message);
  }
}

/** Set the card up beside the page's `explorer` (translate.js calls it once). Returns
 *  {refresh(models)}: the page calls it when it fills or sets the model select itself, with the
 *  model list once it has it (the card asks for no list of its own). */
export function initHeadsCard(explorer) {
  // The explorer's layer × head grid: a role badge on each head the model's corpus analysis names.
  explorer.addPanel(rolePanel());
  // translate.js says which sentence it translated: ablation and attribution use that one.
  document.addEventListener("attnscope:translated", (event) => { translated = event.detail; });
  document.getElementById("model").addEventListener("change", () => { off.clear(); render(); });
  sortBy.addEventListener("change", render);
  role(card, "heads-run").addEventListener("click", runAblation);
  role(card, "heads-attribution").addEventListener("click", runAttribution);
  document.addEventListener("attnscope:contrast", (event) => {  // from the what-if alternatives
    const target = translated && translated.model === model()?.id ? { target: translated.translation } : {};
    runContrast(out, status, { ...body(), ...target }, event.detail);
  });
  document.getElementById("translate-form").addEventListener("submit", () => setTimeout(render, 0));
  render(); // "the heads appear once the models have loaded", not "no cross-attention heads"
  return {
    refresh(list) {
      if (list) models = list;
      render();
      if (list) card.dataset.ready = "true";
    },
  };
}
