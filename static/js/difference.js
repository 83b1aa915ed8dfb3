// The difference of two attention views drawn on identical tokens (Compare: both models aligned
// on the same target, or the same translation): A − B on a diverging scale, red where A looks
// more, blue where B does.
import { role } from "./dom.js";
import { drawHeatmap, purge } from "./heatmap.js";

export const DIVERGING = [
  [0.0, "#1d4ed8"],
  [0.25, "#93c5fd"],
  [0.5, "#f8fafc"],
  [0.75, "#fca5a5"],
  [1.0, "#b91c1c"],
];

const same = (x, y) => x.length === y.length && x.every((v, i) => v === y[i]);

/** Fill `card` with A − B of the two explorers' drawn views, or explain why there is none. */
export async function drawDifference(card, a, b) {
  const va = a.views.main;
  const vb = b.views.main;
  const gd = role(card, "diff-plot");
  const empty = role(card, "diff-empty");
  const caption = role(card, "diff-caption");
  if (!a.response || !b.response) {
    card.hidden = true;
    return;
  }
  card.hidden = false;
  const comparable = va && vb && a.state.kind === b.state.kind && same(va.rowLabels, vb.rowLabels) && same(va.colLabels, vb.colLabels);
  if (!comparable) {
    purge(gd);
    gd.hidden = true;
    empty.hidden = false;
    empty.textContent =
      va && vb && a.state.kind === b.state.kind
        ? "The two models' tokens differ, so their matrices cannot be subtracted. Give both the same target above (and models that share a tokenizer) to see the difference."
        : "Pick an attention kind both models have to see their difference.";
    caption.textContent = "";
    return;
  }
  gd.hidden = false;
  empty.hidden = true;
  const z = va.z.map((row, i) => row.map((v, j) => v - vb.z[i][j]));
  let largest = 0;
  for (const row of z) for (const v of row) largest = Math.max(largest, Math.abs(v));
  caption.textContent = `${a.where(a.state.layer, a.head())} of A minus ${b.where(b.state.layer, b.head())} of B · red: A attends more, blue: B attends more · largest gap ${largest.toFixed(2)}`;
  const view = { ...va, z, zmin: -1, colorscale: DIVERGING, rowTitle: va.rowTitle, colTitle: va.colTitle };
  const shown = await drawHeatmap(gd, view, {
    where: "A − B",
    zmax: 1,
    boxWidth: Math.max(240, (card.clientWidth || 900) - 40),
    boxHeight: Math.round(Math.max(320, window.innerHeight * 0.7)),
    xTitle: a.axisName(va.colTitle),
    yTitle: a.axisName(va.rowTitle),
  });
  const hint = role(card, "diff-window");
  hint.hidden = shown.visibleRows >= shown.rows && shown.visibleCols >= shown.cols;
  hint.textContent = hint.hidden ? "" : "Drag the plot, scroll over it or use the arrow keys to see the rest.";
}
