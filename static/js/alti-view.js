// ALTI+ with the source and the target prefix side by side (Ferrando et al. 2022): after the
// decoder layer shown, each output token's contributions from every source token (left) and from
// every token of the prefix it was written after (right), on one colour scale, since a row over
// both sums to 1. A row dark on the right and pale on the left is a token the model wrote from
// its own prefix (a copy or a hallucination), not from the source.
import { el, plotlyReady, setChildren } from "./dom.js";
import { COLORSCALE, plotlyText } from "./heatmap.js";

const CELL = 22;

/** Draw `response.explanations.alti` at decoder `layer` (0-based) into `box`; hide it without ALTI+. */
export async function drawAltiSplit(box, response, layer) {
  const alti = response?.explanations?.alti;
  const source = alti?.source?.[layer];
  const target = alti?.target?.[layer];
  box.hidden = !source || !target;
  if (box.hidden) return null;
  // numeric axes with token tick labels: Plotly would merge repeated tokens into one category
  const axis = (tokens) => ({ tickvals: tokens.map((_, i) => i), ticktext: tokens.map(plotlyText), tickmode: "array" });
  const idx = (tokens) => tokens.map((_, i) => i);
  const rows = idx(response.target_tokens);
  const zmax = Math.max(1e-9, ...source.flat(), ...target.flat());
  const hover = (side) => `${side} %{customdata[0]} → %{customdata[1]}: %{z:.3f}<extra></extra>`;
  const labels = (keys) => response.target_tokens.map((q) => keys.map((k) => [plotlyText(k), plotlyText(q)]));
  const common = { type: "heatmap", y: rows, zmin: 0, zmax, colorscale: COLORSCALE, hoverongaps: false };
  const traces = [
    { ...common, z: source, x: idx(response.source_tokens), xaxis: "x", yaxis: "y", showscale: false, customdata: labels(response.source_tokens), hovertemplate: hover("source") },
    { ...common, z: target, x: idx(response.decoder_input_tokens), xaxis: "x2", yaxis: "y", customdata: labels(response.decoder_input_tokens), hovertemplate: hover("prefix") },
  ];
  const nSrc = response.source_tokens.length;
  const nTgt = response.decoder_input_tokens.length;
  const split = nSrc / (nSrc + nTgt);
  const gap = 0.04;
  const layout = {
    height: Math.min(640, Math.max(220, 130 + CELL * rows.length)),
    margin: { l: 90, r: 10, t: 36, b: 90 },
    xaxis: { ...axis(response.source_tokens), domain: [0, Math.max(0.2, split - gap / 2)], tickangle: -60, automargin: true, title: { text: "source", standoff: 4 } },
    xaxis2: { ...axis(response.decoder_input_tokens), domain: [Math.min(0.8, split + gap / 2), 1], tickangle: -60, automargin: true, title: { text: "target prefix", standoff: 4 } },
    yaxis: { ...axis(response.target_tokens), autorange: "reversed", automargin: true },
    font: { size: 11 },
  };
  const gd = el("div", { "data-role": "alti-plot", dataset: { layer: String(layer) } });
  gd.style.width = "100%";
  setChildren(
    box,
    el("span", { class: "control-label" }, `ALTI+ after decoder layer ${layer + 1}: source | target prefix (each row sums to 1 over both)`),
    gd,
  );
  const Plotly = await plotlyReady();
  await Plotly.newPlot(gd, traces, layout, { displayModeBar: false, responsive: true });
  return gd;
}
