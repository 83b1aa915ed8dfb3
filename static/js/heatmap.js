// Drawing: the large Plotly heatmap and the small canvas thumbnails, on one colour scale.
import { plotlyReady } from "./dom.js";

// A light-to-deep blue scale; index 0 is the colour of zero weight.
export const COLORSCALE = [
  [0.0, "#f8fafc"],
  [0.1, "#dbe8f6"],
  [0.3, "#9cc3e6"],
  [0.55, "#4f8fcf"],
  [0.8, "#1f5ba8"],
  [1.0, "#0b2f6b"],
];

const STOPS = COLORSCALE.map(([t, hex]) => [t, [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16))]);

/** RGB of a weight in [0, 1] on COLORSCALE. */
export function colorOf(value) {
  const t = Math.min(1, Math.max(0, value));
  for (let i = 1; i < STOPS.length; i++) {
    const [t1, c1] = STOPS[i];
    if (t <= t1) {
      const [t0, c0] = STOPS[i - 1];
      const f = (t - t0) / (t1 - t0 || 1);
      return c0.map((c, j) => Math.round(c + f * (c1[j] - c)));
    }
  }
  return STOPS[STOPS.length - 1][1];
}

/** Plotly reads labels as its own small HTML subset: escape them so tokens show as typed. */
export function plotlyText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function labelWidth(labels, px) {
  const longest = labels.reduce((max, label) => Math.max(max, [...String(label)].length), 0);
  return Math.min(260, Math.max(36, 10 + longest * px));
}

/**
 * Draw `view` (from matrix.viewOf) into `gd`, sized so every tick label stays legible: cells
 * keep a minimum size and the surrounding .plot-scroll scrolls when the matrix is large.
 * options: {where: text for the hover box ("layer 2 · head 3"), zmax, filename, fitWidth}.
 */
export async function drawHeatmap(gd, view, { where = "", zmax = 1, filename = "attention", fitWidth = 640 } = {}) {
  const Plotly = await plotlyReady();
  const rows = view.z.length;
  const cols = rows ? view.z[0].length : 0;
  const cell = Math.max(16, Math.min(40, Math.floor(fitWidth / Math.max(cols, rows * 0.8, 1))));
  const fontSize = cell >= 22 ? 12 : 11;
  const left = labelWidth(view.rowLabels, fontSize * 0.62) + 12;
  const top = labelWidth(view.colLabels, fontSize * 0.62 * 0.85) + 14;
  const colorbar = 70;
  const width = left + cols * cell + colorbar + 10;
  const height = top + rows * cell + 16;
  const indices = (n) => Array.from({ length: n }, (_, i) => i);
  const customdata = view.z.map((row, i) =>
    row.map((_, j) => [plotlyText(view.rowPieces[i]), plotlyText(view.colPieces[j]), i + 1, j + 1]),
  );
  const trace = {
    type: "heatmap",
    z: view.z,
    x: indices(cols),
    y: indices(rows),
    zmin: 0,
    zmax,
    colorscale: COLORSCALE,
    xgap: cols > 60 ? 0 : 1,
    ygap: rows > 60 ? 0 : 1,
    customdata,
    hovertemplate:
      `<b>%{z:.4f}</b><br>${plotlyText(view.rowTitle)}: <b>%{customdata[0]}</b> (row %{customdata[2]})` +
      `<br>${plotlyText(view.colTitle)}: <b>%{customdata[1]}</b> (column %{customdata[3]})` +
      `<br>${plotlyText(where)}<extra></extra>`,
    colorbar: { thickness: 12, len: Math.min(1, 260 / Math.max(rows * cell, 1)), yanchor: "top", y: 1, outlinewidth: 0, tickfont: { size: 10 } },
  };
  const axis = { tickfont: { size: fontSize }, ticks: "", showgrid: false, zeroline: false, fixedrange: false, automargin: false };
  const layout = {
    width,
    height,
    margin: { l: left, t: top, r: colorbar, b: 10 },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "#ffffff",
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", color: "#1e293b" },
    xaxis: {
      ...axis,
      side: "top",
      tickangle: cols > 3 ? -55 : 0,
      tickvals: indices(cols),
      ticktext: view.colLabels.map(plotlyText),
      range: [-0.5, cols - 0.5],
    },
    yaxis: {
      ...axis,
      tickvals: indices(rows),
      ticktext: view.rowLabels.map(plotlyText),
      range: [rows - 0.5, -0.5],
    },
    hoverlabel: { bgcolor: "#0f172a", bordercolor: "#0f172a", font: { color: "#f8fafc", size: 12 } },
  };
  // No mode bar: it would sit on the token labels; the page has its own PNG button (Plotly's
  // export) and the plot scrolls instead of zooming.
  const config = { displayModeBar: false, responsive: false, toImageButtonOptions: { format: "png", filename, scale: 2 } };
  gd.dataset.rows = String(rows);
  gd.dataset.cols = String(cols);
  await Plotly.react(gd, [trace], layout, config);
  return gd;
}

export async function purge(gd) {
  if (window.Plotly) window.Plotly.purge(gd);
  delete gd.dataset.rows;
  delete gd.dataset.cols;
}

/** Plotly's own PNG export of a drawn heatmap. */
export async function downloadPng(gd, filename) {
  const Plotly = await plotlyReady();
  await Plotly.downloadImage(gd, { format: "png", filename, scale: 2 });
}

/** Paint a matrix into a canvas, one pixel per cell (CSS scales it up, pixelated). */
export function drawThumbnail(canvas, z, zmax = 1) {
  const rows = z.length;
  const cols = rows ? z[0].length : 0;
  canvas.width = Math.max(cols, 1);
  canvas.height = Math.max(rows, 1);
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(canvas.width, canvas.height);
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      const [r, g, b] = colorOf(z[i][j] / (zmax || 1));
      const p = 4 * (i * cols + j);
      image.data[p] = r;
      image.data[p + 1] = g;
      image.data[p + 2] = b;
      image.data[p + 3] = 255;
    }
  }
  ctx.putImageData(image, 0, 0);
}
