// A matrix as an HTML table: the accessible alternative to a heatmap (screen readers read a
// table cell by cell with its row and column headers), built only when someone opens it.
import { el, setChildren } from "./dom.js";

const MAX_CELLS = 40000; // beyond this the page would crawl; the CSV export has every cell

/** Fill `container` with a <table> of view.z: column headers are the keys, row headers the queries. */
export function fillTable(container, view, { caption = "" } = {}) {
  const rows = view.z.length;
  const cols = rows ? view.z[0].length : 0;
  if (rows * cols > MAX_CELLS) {
    setChildren(container, el("p", { class: "hint" }, `This matrix has ${rows * cols} cells: download it as CSV instead.`));
    return;
  }
  const format = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(3));
  const table = el(
    "table",
    { class: "matrix-table" },
    caption ? el("caption", {}, caption) : null,
    el(
      "thead",
      {},
      el("tr", {}, el("th", { scope: "col" }, `${view.rowTitle} \\ ${view.colTitle}`), view.colLabels.map((label) => el("th", { scope: "col" }, label))),
    ),
    el(
      "tbody",
      {},
      view.z.map((row, i) =>
        el("tr", {}, el("th", { scope: "row" }, view.rowLabels[i]), row.map((v) => el("td", {}, format(v)))),
      ),
    ),
  );
  setChildren(container, el("div", { class: "table-scroll" }, table));
}
