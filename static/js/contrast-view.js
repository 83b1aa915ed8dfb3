// Contrastive attribution in the Heads card (Yin & Neubig 2022): "why did the model write X
// rather than Y here?" The what-if panel (whatif.js) offers a "why not?" next to each alternative
// and fires `attnscope:contrast` ({position, token: the foil}); this asks POST /api/attribution
// with `contrast` for the sentence on screen and draws, per source token, its integrated-gradients
// share of log p(X) − log p(Y).
import { postJSON } from "./api.js";
import { el, setChildren, showError } from "./dom.js";

const share = (v) => `${(100 * v).toFixed(1)}%`;

/** The bars of one contrastive answer `c` over `sourceTokens`. */
export function contrastBars(c, sourceTokens) {
  const top = Math.max(...c.integrated_gradients, 1e-9);
  return el(
    "table",
    { class: "anatomy-table", dataset: { role: "contrast-bars" } },
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "source"), el("th", { scope: "col" }, "share of the difference"), el("th", { scope: "col" }, ""))),
    el("tbody", {}, sourceTokens.map((token, i) => {
      const v = c.integrated_gradients[i];
      return el(
        "tr",
        { dataset: { share: String(v) } },
        el("th", { scope: "row", class: "tok" }, token),
        el("td", { class: "num" }, share(v)),
        el("td", { class: "bar-cell" }, el("span", { class: "bar moved", style: { width: `${(100 * v) / top}%` } })),
      );
    })),
  );
}

/** Ask for and draw the contrast `detail` ({position, token}) of the request `base` into `out`. */
export async function runContrast(out, status, base, detail, steps = 16) {
  const request = { ...base, steps, contrast: { position: detail.position, token: detail.token } };
  status.textContent = `computing why the model did not write «${detail.token}» (${steps} steps)…`;
  out.closest("section")?.scrollIntoView({ behavior: "smooth", block: "nearest" });
  let r;
  try {
    r = await postJSON("/api/attribution", request);
  } catch (err) {
    status.textContent = "";
    showError(out, err.message);
    return null;
  }
  const c = r.contrastive;
  status.textContent = "";
  setChildren(
    out,
    el("h3", { dataset: { role: "contrast-title" } }, `Why «${c.token}» rather than «${c.foil}» (token ${c.position + 1})?`),
    el("p", { class: "hint" },
      `log p(«${c.token}») − log p(«${c.foil}») = ${c.difference.toFixed(3)}. Each source token's share of that difference by integrated gradients (${steps} steps, completeness gap ${c.completeness_gap.toFixed(3)}): the tokens that made the model prefer its word (Yin & Neubig 2022).`),
    el("div", { class: "table-scroll" }, contrastBars(c, r.source_tokens)),
  );
  return r;
}
