// The first paint of a heatmap: its cells and token labels drawn on a canvas the moment the
// matrix is there, shown until Plotly's interactive heatmap (heatmap.js) replaces it a frame or
// more later. Plotly lays out every tick label as SVG text and measures it (a 45-word sentence's
// 100 labels were about two thirds of its draw on a 2-core CPU); a canvas draws the same window,
// labels included, in a few milliseconds, so the heatmap appears at once and becomes
// interactive (hover, pan) when Plotly is done. The canvas follows Plotly's geometry (margins,
// cell size, the visible window) so nothing moves when Plotly takes over. docs/api.md,
// "The first heatmap".

/** "#rrggbb" -> [r, g, b], or null for a colour this module cannot read (a named Plotly scale). */
function rgbOf(hex) {
  return /^#[0-9a-f]{6}$/i.test(hex) ? [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)) : null;
}

/** A colour scale ([[t, "#rrggbb"], ...], as Plotly takes it) -> value -> "rgb(...)"; null when
 * the scale is not one of hex stops (then there is no raster, and Plotly draws alone). */
export function scaleColour(scale, zmin, zmax) {
  if (!Array.isArray(scale)) return null;
  const stops = scale.map(([t, colour]) => [t, rgbOf(colour)]);
  if (stops.some(([, c]) => !c)) return null;
  const span = zmax - zmin || 1;
  return (value) => {
    const t = Math.min(1, Math.max(0, (value - zmin) / span));
    let i = 1;
    while (i < stops.length - 1 && t > stops[i][0]) i++;
    const [t0, c0] = stops[i - 1];
    const [t1, c1] = stops[i];
    const f = Math.min(1, Math.max(0, (t - t0) / (t1 - t0 || 1)));
    return `rgb(${c0.map((c, j) => Math.round(c + f * (c1[j] - c))).join(",")})`;
  };
}

/**
 * Paint `view`'s visible window into a canvas over `gd` (or in its place when `gd` holds no plot
 * yet) and return it, or null when the view's colour scale cannot be read here. geometry:
 * {left, top, bottom, colorbar (the margins), width, height, visibleRows, visibleCols, fontSize,
 * zmax, gap, scale, xTitle, yTitle} as drawHeatmap gives them to Plotly; the labels are those
 * Plotly draws (view.rowLabels, view.colLabels). Its dataset says where the cells are (left, top,
 * cellWidth, cellHeight, rows, cols).
 */
export function paintRaster(gd, view, geometry) {
  const { left, top, width, height, visibleRows, visibleCols, fontSize, zmax, gap, scale, colorbar = 0, xTitle = "", yTitle = "" } = geometry;
  const colour = scaleColour(scale, view.zmin ?? 0, zmax);
  if (!colour) return null;
  for (const old of gd.querySelectorAll(":scope > canvas.heatmap-raster")) old.remove();
  const ratio = window.devicePixelRatio || 1;
  const canvas = document.createElement("canvas");
  canvas.className = "heatmap-raster";
  canvas.setAttribute("aria-hidden", "true");
  canvas.width = Math.ceil(width * ratio);
  canvas.height = Math.ceil(height * ratio);
  Object.assign(canvas.style, { width: `${width}px`, height: `${height}px`, display: "block", pointerEvents: "none" });
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, width, height);
  // Plotly's plot area: what the margins leave (drawHeatmap's box adds a few px to the cells')
  const plotW = width - left - colorbar;
  const plotH = height - top - (geometry.bottom ?? 0);
  const cw = plotW / visibleCols;
  const ch = plotH / visibleRows;
  Object.assign(canvas.dataset, { left, top, cellWidth: cw, cellHeight: ch, rows: visibleRows, cols: visibleCols });
  for (let i = 0; i < visibleRows; i++) {
    const row = view.z[i];
    for (let j = 0; j < visibleCols; j++) {
      ctx.fillStyle = colour(row[j]);
      ctx.fillRect(left + j * cw + gap / 2, top + i * ch + gap / 2, cw - gap, ch - gap);
    }
  }
  const font = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  ctx.fillStyle = "#1e293b";
  ctx.font = `${fontSize}px ${font}`;
  const widest = (labels) => labels.reduce((max, label) => Math.max(max, ctx.measureText(String(label)).width), 0);
  const rowLabels = view.rowLabels.slice(0, visibleRows);
  const colLabels = view.colLabels.slice(0, visibleCols);
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  rowLabels.forEach((label, i) => ctx.fillText(String(label), left - 4, top + (i + 0.5) * ch));
  ctx.textAlign = "left";
  const angle = visibleCols > 3 ? (-55 * Math.PI) / 180 : 0;
  colLabels.forEach((label, j) => {
    ctx.save();
    ctx.translate(left + (j + 0.5) * cw, top - 4);
    ctx.rotate(angle);
    ctx.fillText(String(label), 0, 0);
    ctx.restore();
  });
  ctx.fillStyle = "#475569";
  ctx.font = `12px ${font}`;
  ctx.textAlign = "center";
  if (xTitle) ctx.fillText(xTitle, left + plotW / 2, Math.max(8, top - 12 - widest(colLabels) * Math.abs(Math.sin(angle)) - fontSize));
  if (yTitle) {
    ctx.save();
    ctx.translate(Math.max(8, left - 12 - widest(rowLabels) - 8), top + plotH / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(yTitle, 0, 0);
    ctx.restore();
  }
  if (colorbar) colourBar(ctx, { x: left + plotW + 30, top, length: Math.min(260, plotH), zmin: view.zmin ?? 0, zmax, colour });
  if (gd.querySelector(".plot-container")) {
    // over the previous plot, until the new one is drawn
    if (getComputedStyle(gd).position === "static") gd.style.position = "relative";
    Object.assign(canvas.style, { position: "absolute", left: "0", top: "0", zIndex: "2" });
  }
  gd.append(canvas);
  return canvas;
}

/** A vertical colour bar beside the plot, as Plotly draws it: zmax at the top, three ticks. */
function colourBar(ctx, { x, top, length, zmin, zmax, colour }) {
  for (let y = 0; y < length; y++) {
    ctx.fillStyle = colour(zmax - ((zmax - zmin) * y) / Math.max(length - 1, 1));
    ctx.fillRect(x, top + y, 12, 1);
  }
  ctx.fillStyle = "#1e293b";
  ctx.font = "10px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  ctx.textAlign = "left";
  for (const [f, value] of [[0, zmax], [0.5, (zmin + zmax) / 2], [1, zmin]]) {
    ctx.fillText(String(Number(value.toFixed(2))), x + 16, top + f * (length - 1));
  }
}

/** Resolves once the browser has painted what is on the page now (a frame, then a task). */
export function afterPaint() {
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}
