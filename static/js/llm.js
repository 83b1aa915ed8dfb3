// The LLM page: translate with a decoder-only model, show target × source (default), the same
// renormalised over the source, or the full causal matrix, per layer and query head.
import { getJSON, postJSON } from "./api.js";
import { fillSelect, setBusy, showError } from "./dom.js";
import { drawHeatmap } from "./heatmap.js";

const $ = (id) => document.getElementById(id);
let models = [];
let answer = null;

function viewOf(kind, layer, head) {
  const a = answer.attention;
  const [s0, s1] = answer.source_span;
  const first = answer.first_target_row;
  const outputs = answer.target_tokens;
  if (kind === "full") {
    const labels = answer.prompt_tokens.concat(outputs.slice(0, -1)).map((t, i) => (i === 0 ? `${t} (sink)` : t));
    return { z: a.full[layer][head], rowLabels: labels, colLabels: labels, rowPieces: labels, colPieces: labels,
      rowTitle: "query", colTitle: "key" };
  }
  let z = a.target_source[layer][head];
  if (kind === "renorm") z = z.map((row) => { const s = row.reduce((x, y) => x + y, 0) || 1; return row.map((v) => v / s); });
  const source = answer.prompt_tokens.slice(s0, s1);
  return { z, rowLabels: outputs, colLabels: source, rowPieces: outputs, colPieces: source,
    rowTitle: "output", colTitle: "source" };
}

async function draw() {
  if (!answer || !answer.attention) return;
  const kind = $("llm-view").value;
  const layer = Number($("llm-layer").value), head = Number($("llm-head").value);
  const view = viewOf(kind, layer, head);
  const outside = answer.attention.outside_source[layer][head];
  const mean = outside.reduce((x, y) => x + y, 0) / Math.max(outside.length, 1);
  $("llm-note").textContent = kind === "full"
    ? "Rows and columns: prompt + output (the last output token is never read). Column 0 is the first token, often an attention sink."
    : `Mean attention outside the source in this head: ${(100 * mean).toFixed(1)} % (instruction, sink, own output).`;
  await drawHeatmap($("llm-plot"), view, { where: `layer ${layer} · head ${head}`, xTitle: kind === "full" ? "key" : "source", yTitle: kind === "full" ? "query" : "output" });
}

async function translate(event) {
  event.preventDefault();
  const model = models.find((m) => m.id === $("llm-model").value);
  if (!model) return;
  const seed = $("llm-seed").value;
  const body = {
    model: model.id, text: $("llm-text").value, beam_size: Number($("llm-beam").value) || 1,
    views: ["target_source", "full"], prompt_template: $("llm-template").value || null,
  };
  if (seed !== "") Object.assign(body, { sample: true, seed: Number(seed), beam_size: 1 });
  setBusy($("llm-go"), true);
  showError($("llm-error"), "");
  try {
    answer = await postJSON("/api/llm/translate", body);
    $("llm-output").textContent = answer.text;
    // opens on the card's best-aligning head (evaluate --alignment), else the last layer's first
    const best = model.best_head;
    fillSelect($("llm-layer"), model.layers, "layer", best ? best.layer : model.layers - 1);
    fillSelect($("llm-head"), model.heads, "head", best ? best.head : 0);
    $("llm-result").hidden = false;
    await draw();
  } catch (err) {
    showError($("llm-error"), err.message);
  } finally {
    setBusy($("llm-go"), false);
  }
}

async function start() {
  const data = await getJSON("/api/llm/models");
  models = data.models || [];
  const select = $("llm-model");
  select.replaceChildren(...models.map((m) => new Option(`${m.name} (${m.source_lang}→${m.target_lang})`, m.id)));
  if (!models.length) select.replaceChildren(new Option("no decoder-only models (attnscope import one)", ""));
  const sync = () => { const m = models.find((x) => x.id === select.value); $("llm-template").value = m ? m.prompt_template : ""; };
  select.addEventListener("change", sync);
  sync();
  $("llm-form").addEventListener("submit", translate);
  for (const id of ["llm-view", "llm-layer", "llm-head"]) $(id).addEventListener("change", draw);
}

start().catch((err) => showError($("llm-error"), err.message));
