// The head view (after bertviz): query tokens on the left, key tokens on the right, a line for
// every weight of every head of one layer, one colour per head, opacity = weight. Hover (or focus)
// a token to see only its links; toggle heads with the coloured chips. Drawn as SVG by hand.
import { el, setChildren } from "./dom.js";
import { KIND_LABELS, shapeOf, viewOf } from "./matrix.js";

export const HEAD_COLORS = [
  "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd",
];
const SVG = "http://www.w3.org/2000/svg";
const ROW = 22; // px per token
const MIN_WEIGHT = 0.02; // lighter links are not drawn

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

export class HeadView {
  /** root: holds [data-role=head-toggles], [data-role=headview] (an <svg>) and [data-role=headview-caption]. */
  constructor(root) {
    this.root = root;
    this.off = new Set();
    this.toggles = root.querySelector("[data-role=head-toggles]");
    this.svg = root.querySelector("[data-role=headview]");
    this.caption = root.querySelector("[data-role=headview-caption]");
    this.args = null;
  }

  /** Draw `kind` at `state.layer` of `response` (state: the explorer's view state). */
  render(response, state, { rowName = "queries", colName = "keys" } = {}) {
    this.args = [response, state, { rowName, colName }];
    const kind = state.kind;
    if (!kind || !response.attention?.[kind]) {
      this.root.hidden = true;
      return;
    }
    const layer = state.layer ?? 0;
    if (response.attention[kind][layer]?.some((m) => m === null)) return; // on demand: not fetched yet
    this.root.hidden = false;
    const { heads } = shapeOf(response, kind);
    const options = { layer, merge: state.merge, hideEos: state.hideEos };
    const views = Array.from({ length: heads }, (_, head) => viewOf(response, kind, { ...options, head }));
    const first = views[0];
    this.renderToggles(heads);
    const rows = first.rowLabels.length;
    const cols = first.colLabels.length;
    const longest = (labels) => Math.max(...labels.map((l) => [...String(l)].length), 3);
    const leftW = Math.min(180, 14 + 7.2 * longest(first.rowLabels));
    const rightW = Math.min(180, 14 + 7.2 * longest(first.colLabels));
    const width = Math.max(280, Math.min(640, this.svg.parentElement.clientWidth || 600));
    const height = 28 + ROW * Math.max(rows, cols);
    const x0 = leftW + 6;
    const x1 = width - rightW - 6;
    const y = (i) => 30 + ROW * i + ROW / 2 - 4;
    const s = this.svg;
    s.setAttribute("viewBox", `0 0 ${width} ${height}`);
    s.setAttribute("width", String(width));
    s.setAttribute("height", String(height));
    s.setAttribute("role", "img");
    s.setAttribute("aria-label", `${KIND_LABELS[kind]} attention, layer ${layer + 1}: lines from ${rowName} to ${colName}, one colour per head`);
    s.replaceChildren();
    s.append(
      svg("text", { x: 2, y: 14, "text-anchor": "start", class: "hv-title" }, rowName),
      svg("text", { x: width - 2, y: 14, "text-anchor": "end", class: "hv-title" }, colName),
    );
    const lines = svg("g", { class: "hv-lines" });
    views.forEach((view, head) => {
      if (this.off.has(head)) return;
      view.z.forEach((row, q) =>
        row.forEach((w, k) => {
          if (w < MIN_WEIGHT) return;
          lines.append(
            svg("line", {
              x1: x0, y1: y(q), x2: x1, y2: y(k),
              stroke: HEAD_COLORS[head % HEAD_COLORS.length],
              "stroke-opacity": Math.min(1, 0.15 + 0.85 * w).toFixed(3),
              "stroke-width": (0.6 + 2.4 * w).toFixed(2),
              "data-q": q, "data-k": k, "data-head": head,
            }),
          );
        }),
      );
    });
    s.append(lines);
    const token = (label, i, side) => {
      const node = svg("text", {
        x: side === "q" ? leftW : width - rightW,
        y: y(i) + 4,
        "text-anchor": side === "q" ? "end" : "start",
        class: "hv-token",
        tabindex: 0,
        "data-side": side,
        "data-index": i,
      }, label);
      const focus = () => this.focus(side, i);
      node.addEventListener("mouseenter", focus);
      node.addEventListener("focus", focus);
      node.addEventListener("mouseleave", () => this.focus(null));
      node.addEventListener("blur", () => this.focus(null));
      return node;
    };
    first.rowLabels.forEach((label, i) => s.append(token(label, i, "q")));
    first.colLabels.forEach((label, i) => s.append(token(label, i, "k")));
    if (this.caption) {
      this.caption.textContent = `${KIND_LABELS[kind]} · layer ${layer + 1} · ${heads - this.off.size} of ${heads} head${heads === 1 ? "" : "s"} shown · ${lines.childElementCount} links above ${MIN_WEIGHT}`;
    }
  }

  renderToggles(heads) {
    if (!this.toggles) return;
    setChildren(
      this.toggles,
      heads > 1
        ? Array.from({ length: heads }, (_, head) =>
            el(
              "button",
              {
                type: "button",
                class: "chip head-chip",
                style: { "--head": HEAD_COLORS[head % HEAD_COLORS.length] },
                "aria-pressed": this.off.has(head) ? "false" : "true",
                onclick: () => {
                  if (this.off.has(head)) this.off.delete(head);
                  else this.off.add(head);
                  if (this.args) this.render(...this.args);
                },
              },
              `head ${head + 1}`,
            ),
          )
        : [],
    );
  }

  /** Show only the links of one token (side "q" or "k"), or all with side null. */
  focus(side, index) {
    const attr = side === "q" ? "data-q" : "data-k";
    for (const line of this.svg.querySelectorAll("line")) {
      const mine = side === null || line.getAttribute(attr) === String(index);
      line.classList.toggle("dim", !mine);
    }
    for (const text of this.svg.querySelectorAll(".hv-token")) {
      text.classList.toggle("active", side !== null && text.dataset.side === side && text.dataset.index === String(index));
    }
    this.root.dataset.focus = side === null ? "" : `${side}${index}`;
  }
}
