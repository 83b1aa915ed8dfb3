// Drawing: the large Plotly heatmap and the small canvas thumbnails, on one colour scale.
import { plotlyReady } from "./dom.js";
import { afterPaint, paintRaster } from "./heatmap-raster.js";

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
 * Draw `view` (from matrix.viewOf) into `gd`, sized so every tick label stays legible: cells keep
 * a minimum size, and a matrix larger than the box shows a window of it with Plotly's own axes,
 * so the token labels and the colour bar never scroll out of sight (drag the plot, or use the
 * wheel or the arrow keys, to move the window).
 * options: {where: text for the hover box ("layer 2 · head 3"), zmax, filename,
 *           boxWidth, boxHeight: the room the plot may take (px),
 *           xTitle, yTitle: axis names such as "source (en)"}.
 * Returns {rows, cols, visibleRows, visibleCols}.
 */
export async function drawHeatmap(
  gd,
  view,
  { where = "", zmax = 1, filename = "attention", boxWidth = 800, boxHeight = 640, xTitle = "", yTitle: yTitleAsked = "" } = {},
) {
  const rows = view.z.length;
  const cols = rows ? view.z[0].length : 0;
  // A phone-sized box: the colour bar goes below the matrix (horizontal), the y axis's name goes
  // (the caption names the rows), labels and cells get smaller, so a 20-odd-word sentence shows
  // every column at 390 px instead of a window of a few.
  const narrow = boxWidth < 560;
  // On a phone a long label would take the width from the cells: cut to 9 characters (the hover
  // box and the table view show it whole).
  const cut = (label) => ([...String(label)].length > 9 ? `${[...String(label)].slice(0, 8).join("")}…` : label);
  if (narrow) view = { ...view, rowLabels: view.rowLabels.map(cut), colLabels: view.colLabels.map(cut) };
  const yTitle = narrow ? "" : yTitleAsked;
  const minCell = narrow ? 10 : 16;
  const colorbar = narrow ? 0 : 70;
  const roomW = Math.max(120, boxWidth - colorbar - 10);
  const probe = Math.max(minCell, Math.min(40, Math.floor((roomW - 120) / Math.max(cols, rows * 0.8, 1))));
  const fontSize = narrow ? (probe >= 16 ? 11 : 9) : probe >= 22 ? 12 : 11;
  const title = 28;
  const left = labelWidth(view.rowLabels, fontSize * 0.62) + (narrow ? 6 : 12) + (yTitle ? title : 0);
  const top = labelWidth(view.colLabels, fontSize * 0.62 * 0.85) + 14 + (xTitle ? title : 0);
  // (a narrow box sizes cells by the columns alone: it is the width that is short; rows scroll)
  const cell = Math.max(minCell, Math.min(40, Math.floor((roomW - left) / Math.max(cols, narrow ? 1 : rows * 0.8, 1))));
  const visibleCols = Math.max(1, Math.min(cols, Math.floor((roomW - left) / cell)));
  const visibleRows = Math.max(1, Math.min(rows, Math.floor((Math.max(boxHeight, 240) - top - 16) / cell)));
  const width = left + visibleCols * cell + colorbar + 10;
  // A matrix of few rows still leaves room below for the (rotated) name of its y axis; a narrow
  // one, for its horizontal colour bar.
  const bottom = narrow ? 44 : yTitle ? Math.max(10, 100 - visibleRows * cell) : 10;
  const height = top + visibleRows * cell + bottom + 6;
  const windowed = visibleCols < cols || visibleRows < rows;
  const layout = heatmapLayout(view, { cell, fontSize, left, top, colorbar, width, height, xTitle, yTitle, bottom });
  layout.xaxis.range = [-0.5, visibleCols - 0.5];
  layout.yaxis.range = [visibleRows - 0.5, -0.5];
  layout.xaxis.minallowed = layout.yaxis.minallowed = -0.5;
  layout.xaxis.maxallowed = cols - 0.5;
  layout.yaxis.maxallowed = rows - 0.5;
  layout.dragmode = windowed ? "pan" : false;
  // No mode bar: it would sit on the token labels; the page has its own export buttons.
  const config = { displayModeBar: false, responsive: false, scrollZoom: false, doubleClick: false };
  gd.dataset.rows = String(rows);
  gd.dataset.cols = String(cols);
  gd.dataset.windowed = windowed ? "true" : "false";
  gd.dataset.cell = String(cell);
  gd.tabIndex = windowed ? 0 : -1;
  const trace = heatmapTrace(view, { where, zmax, rows, cell });
  if (narrow) {
    trace.colorbar = { ...trace.colorbar, orientation: "h", len: 1, x: 0, xanchor: "left", y: -8 / (visibleRows * cell), yanchor: "top", thickness: 10 };
  }
  gd.dataset.narrow = narrow ? "true" : "false";
  // The first paint: the window's cells and labels on a canvas now (heatmap-raster.js), Plotly's
  // interactive heatmap in its place once it has laid out every label.
  const geometry = { left, top, bottom, cell, width, height, visibleRows, visibleCols, fontSize, zmax, xTitle, yTitle };
  // data-drawing: set while a draw is under way (the first paint shown, Plotly's not yet), so a
  // page or a test can wait for the heatmap to settle
  gd.drawings = (gd.drawings || 0) + 1;
  gd.dataset.drawing = "true";
  const raster = paintRaster(gd, view, { ...geometry, colorbar, gap: trace.xgap ? 1 : 0, scale: trace.colorscale });
  try {
    if (raster) await afterPaint();
    const Plotly = await plotlyReady();
    await Plotly.react(gd, [trace], layout, config);
  } finally {
    raster?.remove();
    gd.drawings -= 1;
    if (!gd.drawings) delete gd.dataset.drawing;
  }
  if (!gd.dataset.scrollable) {
    gd.dataset.scrollable = "true";
    gd.addEventListener("wheel", (event) => scrollWindow(gd, event), { passive: false });
    gd.addEventListener("keydown", (event) => keyWindow(gd, event));
  }
  return { rows, cols, visibleRows, visibleCols };
}

// Past this many cells (a long input: hundreds of tokens a side) the hover box names the row and
// column by number, not by token: four labels a cell took seconds and hundreds of MB for 1,000².
const LABELLED_HOVER_CELLS = 90_000;

function heatmapTrace(view, { where, zmax, rows, cell }) {
  const cols = rows ? view.z[0].length : 0;
  const indices = (n) => Array.from({ length: n }, (_, i) => i);
  if (rows * cols > LABELLED_HOVER_CELLS) {
    return {
      type: "heatmap", z: view.z, x: indices(cols), y: indices(rows), zmin: view.zmin ?? 0, zmax,
      colorscale: view.colorscale || COLORSCALE, xgap: 0, ygap: 0,
      hovertemplate: `<b>%{z:.4f}</b><br>${plotlyText(view.rowTitle)} row %{y} · ${plotlyText(view.colTitle)} column %{x} (from 0)<br>${plotlyText(where)}<extra></extra>`,
      colorbar: { thickness: 12, len: Math.min(1, 260 / Math.max(rows * cell, 1)), yanchor: "top", y: 1, outlinewidth: 0, tickfont: { size: 10 } },
    };
  }
  const customdata = view.z.map((row, i) =>
    row.map((_, j) => [plotlyText(view.rowPieces[i]), plotlyText(view.colPieces[j]), i + 1, j + 1]),
  );
  return {
    type: "heatmap",
    z: view.z,
    x: indices(cols),
    y: indices(rows),
    zmin: view.zmin ?? 0,
    zmax,
    colorscale: view.colorscale || COLORSCALE,
    xgap: cols > 60 ? 0 : 1,
    ygap: rows > 60 ? 0 : 1,
    customdata,
    hovertemplate:
      `<b>%{z:.4f}</b><br>${plotlyText(view.rowTitle)}: <b>%{customdata[0]}</b> (row %{customdata[2]})` +
      `<br>${plotlyText(view.colTitle)}: <b>%{customdata[1]}</b> (column %{customdata[3]})` +
      `<br>${plotlyText(where)}<extra></extra>`,
    colorbar: { thickness: 12, len: Math.min(1, 260 / Math.max(rows * cell, 1)), yanchor: "top", y: 1, outlinewidth: 0, tickfont: { size: 10 } },
  };
}

function heatmapLayout(view, { fontSize, left, top, colorbar, width, height, xTitle, yTitle, bottom = 10 }) {
  const rows = view.z.length;
  const cols = rows ? view.z[0].length : 0;
  const indices = (n) => Array.from({ length: n }, (_, i) => i);
  const axis = { tickfont: { size: fontSize }, ticks: "", showgrid: false, zeroline: false, automargin: false };
  const axisTitle = (text) => (text ? { text: plotlyText(text), font: { size: 12, color: "#475569" }, standoff: 4 } : undefined);
  return {
    width,
    height,
    margin: { l: left, t: top, r: colorbar, b: bottom },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "#ffffff",
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", color: "#1e293b" },
    xaxis: {
      ...axis,
      side: "top",
      title: axisTitle(xTitle),
      tickangle: cols > 3 ? -55 : 0,
      tickvals: indices(cols),
      ticktext: view.colLabels.map(plotlyText),
      range: [-0.5, cols - 0.5],
    },
    yaxis: {
      ...axis,
      title: axisTitle(yTitle),
      tickvals: indices(rows),
      ticktext: view.rowLabels.map(plotlyText),
      range: [rows - 0.5, -0.5],
    },
    hoverlabel: { bgcolor: "#0f172a", bordercolor: "#0f172a", font: { color: "#f8fafc", size: 12 } },
  };
}

/** Move a windowed heatmap by (dRows, dCols) cells; false when it is already at that edge. */
function moveWindow(gd, dRows, dCols) {
  const Plotly = window.Plotly;
  const full = gd._fullLayout;
  if (!Plotly || !full || gd.dataset.windowed !== "true") return false;
  const clamp = (range, delta, total) => {
    const span = range[1] - range[0];
    const lo = Math.min(Math.max(-0.5, range[0] + delta), Math.max(-0.5, total - 0.5 - span));
    return [lo, lo + span];
  };
  const xr = full.xaxis.range.slice();
  const yr = full.yaxis.range.slice().reverse(); // y is reversed: [top row, bottom row]
  const nx = clamp(xr, dCols, Number(gd.dataset.cols));
  const ny = clamp(yr, dRows, Number(gd.dataset.rows));
  if (Math.abs(nx[0] - xr[0]) < 1e-9 && Math.abs(ny[0] - yr[0]) < 1e-9) return false;
  Plotly.relayout(gd, { "xaxis.range": nx, "yaxis.range": [ny[1], ny[0]] });
  return true;
}

function scrollWindow(gd, event) {
  const cell = Number(gd.dataset.cell) || 20;
  let dx = event.deltaX;
  let dy = event.deltaY;
  if (event.shiftKey && !dx) [dx, dy] = [dy, 0];
  const scale = event.deltaMode === 1 ? 1 : 1 / cell; // lines or pixels
  const moved = moveWindow(gd, Math.round(dy * scale) || Math.sign(dy), Math.round(dx * scale) || Math.sign(dx));
  if (moved) event.preventDefault(); // at an edge the page scrolls as usual
}

function keyWindow(gd, event) {
  const steps = { ArrowDown: [1, 0], ArrowUp: [-1, 0], ArrowRight: [0, 1], ArrowLeft: [0, -1], PageDown: [10, 0], PageUp: [-10, 0] };
  const step = steps[event.key];
  if (step && moveWindow(gd, ...step)) event.preventDefault();
}

export async function purge(gd) {
  if (window.Plotly) window.Plotly.purge(gd);
  delete gd.dataset.rows;
  delete gd.dataset.cols;
}

/**
 * A self-describing image of the whole matrix (not just the window on screen): a title, the
 * model, layer/head and sentence in a subtitle, axis names, on white. format: "png" or "svg".
 * meta: {title, subtitle, xTitle, yTitle, zmax, where}.
 */
export async function exportImage(view, meta, format, filename) {
  const rows = view.z.length;
  const cols = rows ? view.z[0].length : 0;
  const cell = Math.max(16, Math.min(36, Math.floor(900 / Math.max(cols, rows, 1))));
  const fontSize = cell >= 22 ? 12 : 11;
  const left = labelWidth(view.rowLabels, fontSize * 0.62) + 34;
  const colorbar = 80;
  const width = Math.max(640, left + cols * cell + colorbar + 10);
  const lines = meta.subtitle.flatMap((line) => wrap(line, Math.floor((width - 30) / 7)));
  const head = 40 + 17 * lines.length;
  const top = labelWidth(view.colLabels, fontSize * 0.62 * 0.85) + 36 + head;
  const bottom = Math.max(20, 110 - rows * cell);
  const height = top + rows * cell + bottom;
  const layout = heatmapLayout(view, { fontSize, left, top, colorbar, width, height, xTitle: meta.xTitle, yTitle: meta.yTitle, bottom });
  layout.paper_bgcolor = "#ffffff";
  layout.title = {
    text: `<b>${plotlyText(meta.title)}</b><br><span style="font-size:12px;color:#475569">${lines.map(plotlyText).join("<br>")}</span>`,
    x: 0.01,
    xanchor: "left",
    yref: "container",
    y: 1 - 24 / height,
    yanchor: "top",
    font: { size: 16 },
  };
  const trace = heatmapTrace(view, { where: meta.where || "", zmax: meta.zmax ?? 1, rows, cell });
  trace.colorbar = { ...trace.colorbar, len: Math.min(1, 300 / Math.max(rows * cell, 1)) };
  const holder = document.createElement("div");
  holder.style.cssText = "position:fixed;left:-10000px;top:0;";
  document.body.append(holder);
  try {
    await Plotly.newPlot(holder, [trace], layout, { staticPlot: true });
    const url = await Plotly.toImage(holder, { format, width, height, scale: format === "png" ? 2 : 1 });
    const a = document.createElement("a");
    a.href = url;
    a.download = `${filename}.${format}`;
    document.body.append(a);
    a.click();
    a.remove();
    return url;
  } finally {
    Plotly.purge(holder);
    holder.remove();
  }
}

/** Break `text` into lines of at most `width` characters, at spaces where it can. */
function wrap(text, width) {
  const lines = [];
  let line = "";
  for (const word of String(text).split(" ")) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line ? `${line} ${word}` : word;
    }
    while (line.length > width) {
      lines.push(line.slice(0, width));
      line = line.slice(width);
    }
  }
  if (line) lines.push(line);
  return lines;
}

/** The matrix as CSV: a header of column labels, one line per row label (RFC 4180 quoting). */
export function matrixCsv(view) {
  const quote = (s) => (/[",\n\r]/.test(String(s)) ? `"${String(s).replace(/"/g, '""')}"` : String(s));
  const head = [quote(`${view.rowTitle} \\ ${view.colTitle}`), ...view.colLabels.map(quote)].join(",");
  const lines = view.z.map((row, i) => [quote(view.rowLabels[i]), ...row.map((v) => String(Number(v.toFixed(6))))].join(","));
  return `${[head, ...lines].join("\r\n")}\r\n`;
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
