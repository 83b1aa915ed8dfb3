// The Translate page's "Heads" card: every cross-attention head of the chosen model with its
// word-alignment F1 from the card (sortable), click to switch heads off and translate again with
// `disable_heads`, and attention beside gradient attribution (POST /api/attribution) with the
// rank correlation of each head. Reads the text, model and beam from the page's form.
import { postJSON } from "./api.js";
import { el, plotlyReady, role, setChildren, showError } from "./dom.js";
import { plotlyText } from "./heatmap.js";
import { headFacts } from "./head-facts.js";
import { loadModels, pageCards } from "./models-api.js";

const card = document.getElementById("heads-card");
const list = role(card, "heads-list");
const out = role(card, "heads-out");
const status = role(card, "heads-status");
const sortBy = role(card, "heads-sort");
const off = new Set(); // "layer:head" keys switched off
let models = [];

const cards = new Map(pageCards().map((c) => [c.id, c]));
const model = () => models.find((m) => m.id === document.getElementById("model").value);
// The card's F1 grid, with a head trained on reading rows given its F1 on those (head-facts.js).
const f1Of = (m) => headFacts(cards.get(m.id), "cross", m.layers, m.heads).f1;

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
  if (!m || !m.attention.includes("cross")) {
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
      title: off.has(key) ? "switched off: click to switch on" : "click to switch this head off",
      onclick: () => { off.has(key) ? off.delete(key) : off.add(key); render(); },
    }, `L${l}H${h}${f1 == null ? "" : ` · F1 ${f1.toFixed(2)}`}`);
  }));
}

function body() {
  const m = model();
  return { model: m.id, text: document.getElementById("text").value, beam_size: Number(document.getElementById("beam").value) || 5 };
}

async function runAblation() {
  const m = model();
  if (!m) return;
  const disable = [...off].map((k) => { const [layer, head] = k.split(":").map(Number); return { kind: "cross", layer, head }; });
  status.textContent = "translating…";
  try {
    const [base, ablated] = await Promise.all([postJSON("/api/translate", body()), postJSON("/api/translate", { ...body(), disable_heads: disable })]);
    status.textContent = "";
    setChildren(out, el("dl", { class: "facts" },
      el("dt", {}, "All heads on"), el("dd", { dataset: { role: "heads-base" } }, base.translation),
      el("dt", {}, `${disable.length} head${disable.length === 1 ? "" : "s"} off`), el("dd", { dataset: { role: "heads-ablated" } }, ablated.translation),
      el("dt", {}, "Log-probability"), el("dd", {}, `${base.logprob.toFixed(2)} → ${ablated.logprob.toFixed(2)}`)));
  } catch (err) {
    status.textContent = "";
    showError(out, err.message);
  }
}

async function runAttribution() {
  if (!model()) return;
  status.textContent = "computing gradients…";
  try {
    const r = await postJSON("/api/attribution", body());
    status.textContent = `Integrated gradients, completeness gap ${r.completeness_gap.toFixed(4)}; ρ = Spearman rank correlation of each head's attention rows with the attribution rows.`;
    const mean = r.cross_attention
      ? r.cross_attention[0][0].map((row, t) => row.map((_, s) => r.cross_attention.flat().reduce((acc, head) => acc + head[t][s], 0) / r.cross_attention.flat().length))
      : null;
    const rho = r.correlation ? r.correlation.integrated_gradients : null;
    const table = rho ? el("table", { class: "bleu-table", dataset: { role: "heads-correlation" } },
      el("thead", {}, el("tr", {}, el("th", { class: "no-caps", title: "Spearman's rank correlation" }, "ρ"), ...rho[0].map((_, h) => el("th", {}, `H${h}`)))),
      el("tbody", {}, rho.map((row, l) => el("tr", {}, el("th", {}, `L${l}`), ...row.map((v) => el("td", {}, v == null ? "–" : v.toFixed(2))))))) : null;
    const left = el("div", { class: "chart", dataset: { chart: "attribution" } });
    const right = el("div", { class: "chart", dataset: { chart: "attention-mean" } });
    setChildren(out, el("div", { class: "pair-charts" }, left, right), table);
    const Plotly = await plotlyReady();
    const draw = (div, z, title) => Plotly.newPlot(div, [{ type: "heatmap", z, x: r.source_tokens.map(plotlyText), y: r.target_tokens.map(plotlyText), colorscale: "Blues", reversescale: true, zmin: 0, zmax: 1, showscale: false }],
      { title: { text: title, font: { size: 13 } }, height: 320, margin: { l: 90, r: 10, t: 30, b: 80 }, yaxis: { autorange: "reversed" }, paper_bgcolor: "rgba(0,0,0,0)" },
      { displaylogo: false, responsive: true, displayModeBar: false });
    await draw(left, r.integrated_gradients, "Integrated gradients");
    if (mean) await draw(right, mean, "Attention (mean of heads)");
  } catch (err) {
    status.textContent = "";
    showError(out, err.message);
  }
}

async function init() {
  models = await loadModels();
  document.getElementById("model").addEventListener("change", () => { off.clear(); render(); });
  sortBy.addEventListener("change", render);
  role(card, "heads-run").addEventListener("click", runAblation);
  role(card, "heads-attribution").addEventListener("click", runAttribution);
  // The page fills and sets the model select itself: follow it (it may change without an event).
  new MutationObserver(render).observe(document.getElementById("model"), { childList: true, subtree: true });
  document.getElementById("translate-form").addEventListener("submit", () => setTimeout(render, 0));
  render();
  card.dataset.ready = "true";
}

init();
