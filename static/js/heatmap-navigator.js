// Finding one's way in a long heatmap (hundreds to a thousand tokens a side), drawn by heatmap.js
// as a window of legible cells: an overview, a small image of the whole matrix with the window
// drawn on it (click anywhere on it to move the window there), and a word search that brings a
// token's row or column into the window and outlines it. Markup: a box the explorer gives
// (templates/_explorer.html, data-role "nav-main"); nothing is shown for a matrix that fits.
import { el, setChildren } from "./dom.js";
import { colorOf } from "./heatmap.js";

export const OVERVIEW_PX = 160; // the overview's longer side, in canvas pixels (one per cell or fewer)

/** The matrix `z` ([rows][cols]) shrunk to at most `size` × `size` cells: each cell of the result
 *  is the largest weight of the block it covers, so a sharp weight (an alignment) is not averaged
 *  away into its neighbours. Returns {z, rows, cols, rowStep, colStep}. */
export function downsample(z, size = OVERVIEW_PX) {
  const rows = z.length;
  const cols = rows ? z[0].length : 0;
  const rowStep = Math.max(1, rows / size);
  const colStep = Math.max(1, cols / size);
  const outRows = Math.max(1, Math.ceil(rows / rowStep));
  const outCols = Math.max(1, Math.ceil(cols / colStep));
  const out = Array.from({ length: outRows }, () => new Array(outCols).fill(0));
  for (let i = 0; i < rows; i++) {
    const oi = Math.min(outRows - 1, Math.floor(i / rowStep));
    const row = z[i];
    const target = out[oi];
    for (let j = 0; j < cols; j++) {
      const oj = Math.min(outCols - 1, Math.floor(j / colStep));
      if (row[j] > target[oj]) target[oj] = row[j];
    }
  }
  return { z: out, rows: outRows, cols: outCols, rowStep, colStep };
}

/** A label as a person would type it: no sentencepiece word mark, lower case. */
const plain = (label) => String(label).replace(/^[▁Ġ]+/u, "").toLowerCase();

/** Where `word` is among the labels: the rows, then the columns, whose label equals it (after
 *  `plain`), or when none does, whose label contains it. [{axis: "row"|"column", index}]. */
export function findWord(view, word) {
  const wanted = plain(word.trim());
  if (!wanted) return [];
  const search = (labels, axis, test) => labels.flatMap((label, index) => (test(plain(label)) ? [{ axis, index }] : []));
  for (const test of [(l) => l === wanted, (l) => l.includes(wanted)]) {
    const found = [...search(view.rowLabels, "row", test), ...search(view.colLabels, "column", test)];
    if (found.length) return found;
  }
  return [];
}

/** The x and y ranges that put cell (row, col) in the middle of the window now shown (either may
 *  be null: that axis stays), clamped to the matrix. */
function centred(gd, row, col) {
  const full = gd._fullLayout;
  const rows = Number(gd.dataset.rows);
  const cols = Number(gd.dataset.cols);
  const place = (range, at, total) => {
    const span = Math.abs(range[1] - range[0]);
    const lo = Math.min(Math.max(-0.5, at - span / 2), Math.max(-0.5, total - 0.5 - span));
    return [lo, lo + span];
  };
  const update = {};
  if (col !== null) update["xaxis.range"] = place(full.xaxis.range, col, cols);
  if (row !== null) {
    const [lo, hi] = place(full.yaxis.range, row, rows);
    update["yaxis.range"] = [hi, lo]; // y is reversed: the first row on top
  }
  return update;
}

/** Fill `box` with the overview and the word search of the heatmap drawn in `gd` (heatmap.js's
 *  drawHeatmap of `view`), or hide it when the whole matrix is on screen. */
export function attachNavigator(box, gd, view) {
  if (!box) return;
  if (gd.dataset.windowed !== "true" || !window.Plotly) {
    box.hidden = true;
    setChildren(box);
    return;
  }
  box.hidden = false;
  const small = downsample(view.z, OVERVIEW_PX);
  const canvas = el("canvas", { width: String(small.cols), height: String(small.rows), dataset: { role: "overview" }, role: "img",
    "aria-label": `the whole matrix, ${view.z.length} rows by ${view.z[0].length} columns; click a place to show it in the heatmap` });
  const scale = 160 / Math.max(small.rows, small.cols);
  canvas.style.width = `${Math.round(small.cols * scale)}px`;
  canvas.style.height = `${Math.round(small.rows * scale)}px`;
  paint(canvas, small.z, Math.max(...small.z.map((r) => Math.max(...r)), 1e-6)); // stretched: long rows hold small weights
  const frame = el("div", { class: "overview-frame", dataset: { role: "overview-window" } });
  const holder = el("div", { class: "overview" }, canvas, frame);
  canvas.addEventListener("click", (event) => {
    const rect = canvas.getBoundingClientRect();
    const row = Math.floor(((event.clientY - rect.top) / rect.height) * view.z.length);
    const col = Math.floor(((event.clientX - rect.left) / rect.width) * view.z[0].length);
    window.Plotly.relayout(gd, centred(gd, row, col));
  });
  const input = el("input", { type: "search", placeholder: "find a word", "aria-label": "Find a word's row or column", dataset: { role: "find" } });
  const status = el("span", { class: "hint", dataset: { role: "find-status" }, "aria-live": "polite" });
  const state = { matches: [], at: -1, query: "" };
  const go = (step) => {
    const query = input.value.trim();
    if (query !== state.query) Object.assign(state, { query, matches: findWord(view, query), at: -1 });
    if (!state.matches.length) {
      status.textContent = query ? `no row or column “${query}”` : "";
      window.Plotly.relayout(gd, { shapes: [] });
      return;
    }
    state.at = (state.at + step + state.matches.length) % state.matches.length;
    const { axis, index } = state.matches[state.at];
    const labels = axis === "row" ? view.rowLabels : view.colLabels;
    status.textContent = `${axis} ${index + 1}: ${plain(labels[index])} (${state.at + 1} of ${state.matches.length})`;
    box.dataset.found = `${axis}:${index}`;
    const rows = view.z.length;
    const cols = view.z[0].length;
    const line = { color: "#ea580c", width: 2 };
    const shape = axis === "row"
      ? { type: "rect", xref: "x", yref: "y", x0: -0.5, x1: cols - 0.5, y0: index - 0.5, y1: index + 0.5, line }
      : { type: "rect", xref: "x", yref: "y", x0: index - 0.5, x1: index + 0.5, y0: -0.5, y1: rows - 0.5, line };
    window.Plotly.relayout(gd, { ...centred(gd, axis === "row" ? index : null, axis === "column" ? index : null), shapes: [shape] });
  };
  input.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    go(event.shiftKey ? -1 : 1);
  });
  const next = el("button", { type: "button", class: "btn small ghost", dataset: { role: "find-next" }, onclick: () => go(1) }, "Find");
  setChildren(box, holder, el("div", { class: "find" }, input, next, status));
  delete box.dataset.found;
  const track = () => placeFrame(frame, canvas, gd);
  gd.navigatorTrack = track; // the newest navigator of this plot follows its window
  if (!gd.dataset.navigated) {
    gd.dataset.navigated = "true";
    gd.on("plotly_relayout", () => gd.navigatorTrack?.());
  }
  track();
}

/** Paint the overview, one canvas pixel per (downsampled) cell, on heatmap.js's colour scale. */
function paint(canvas, z, zmax) {
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(canvas.width, canvas.height);
  z.forEach((row, i) => row.forEach((v, j) => {
    const p = 4 * (i * canvas.width + j);
    image.data.set([...colorOf(v / zmax), 255], p);
  }));
  ctx.putImageData(image, 0, 0);
}

/** Draw the heatmap's window as a frame on the overview. */
function placeFrame(frame, canvas, gd) {
  const full = gd._fullLayout;
  if (!full || !canvas.isConnected) return;
  const rows = Number(gd.dataset.rows);
  const cols = Number(gd.dataset.cols);
  const [x0, x1] = full.xaxis.range;
  const [y1, y0] = full.yaxis.range; // reversed
  const w = parseFloat(canvas.style.width);
  const h = parseFloat(canvas.style.height);
  Object.assign(frame.style, {
    left: `${((x0 + 0.5) / cols) * w}px`,
    top: `${((y0 + 0.5) / rows) * h}px`,
    width: `${Math.max(2, ((x1 - x0) / cols) * w)}px`,
    height: `${Math.max(2, ((y1 - y0) / rows) * h)}px`,
  });
  frame.dataset.rows = `${Math.round(y0 + 0.5)}-${Math.round(y1 - 0.5)}`;
  frame.dataset.cols = `${Math.round(x0 + 0.5)}-${Math.round(x1 - 0.5)}`;
}
