// The anatomy of one attention step, with the model's real numbers: for one query (a heatmap
// row) and one head, the raw score of every key, the softmax that turns them into weights, and
// the context vector they mix, with the formula of this model's score function. For the
// Transformer also q·k and the division by √d_k (`score_scale`; a model that does not scale, an
// imported T5, shows its scores as they are: q·k plus a position bias). The numbers come from the API's
// `return_scores` answer (fetched once per translation). A decoder-only model's answer
// (`llm.anatomy`, docs/llm.md) shows its own q·k after rotary and, soft-capped, cap·tanh(q·k·s/cap);
// its row here is part of a longer causal row (instruction, first token, output so far share the
// softmax), so the softmax column is exp(score − logsumexp of the whole row).
import { el, role, setChildren } from "./dom.js";
import { KIND_LABELS, axesOf } from "./matrix.js";
import { SCORE_FORMULAS } from "./models-api.js";

// name -> "score(s, h_i) = …", and the Transformer's: from GET /api/score-functions (attnscope/nn/scores.py,
// attnscope/nn/family.py), filled by models-api.js's loadCatalog() when the models load.
export const FORMULAS = SCORE_FORMULAS;

const fmt = (x, digits = 3) => (x === null || x === undefined ? "masked" : Number(x).toFixed(digits));

function formulaFor(response, kind) {
  if (response.score === null || response.score === undefined || kind !== "cross") {
    return kind === "encoder_self" && response.score ? (FORMULAS.additive || "").replace("s,", "h_t,").replace("W_s s", "W_s h_t") : FORMULAS.transformer;
  }
  return FORMULAS[response.score] || `score function: ${response.score}`;
}

/** The score column's heading for a decoder-only answer: the scale, and the soft-cap where the model caps. */
function llmScoreHead(llm, divisor) {
  const scaledDot = `q·k ÷ ${divisor.toFixed(2)}`;
  return llm.softcap ? `${llm.softcap}·tanh(${scaledDot} / ${llm.softcap}) = score` : `÷ ${divisor.toFixed(2)} = score`;
}

/**
 * Render the step `query` of `kind` at (layer, head) of `details` (a translate answer with
 * attention_scores) into `root`. Returns the weights shown (for tests and the caller).
 */
export function renderAnatomy(root, details, { kind, layer, head, query, sourceLang = "", targetLang = "" }) {
  const scores = details.attention_scores?.[kind]?.[layer]?.[head]?.[query];
  const weights = details.attention?.[kind]?.[layer]?.[head]?.[query];
  const body = role(root, "anatomy-body");
  root.hidden = false;
  if (!scores || !weights) {
    setChildren(body, el("p", { class: "empty" }, "No scores for this step."));
    return null;
  }
  const axes = axesOf(details, kind);
  const transformer = details.score === null || details.score === undefined;
  const dk = details.key_dim || 1;
  const root2 = details.score_scale ?? Math.sqrt(dk); // what q·k is divided by (1: not scaled)
  const scaled = transformer && details.score_scale !== 1; // an answer without the field: scaled, as before
  // ‖f(x_j)‖ per key (the `norm` explanation's norm_values): the size of what each key moves
  const sizes = details.explanations?.norm_values?.[kind]?.[layer]?.[head] || null;
  const maxSize = sizes ? Math.max(...sizes, 1e-9) : 1;
  const moved = sizes ? weights.map((w, i) => w * sizes[i]) : null;
  const maxMoved = moved ? Math.max(...moved, 1e-9) : 1;
  const real = scores.map((s, i) => ({ key: axes.cols[i], s, w: weights[i], i })).filter((r) => r.s !== null);
  const maxAbs = Math.max(...real.map((r) => Math.abs(r.s)), 1e-9);
  const maxExp = Math.max(...real.map((r) => r.s));
  const total = real.reduce((sum, r) => sum + Math.exp(r.s - maxExp), 0);
  // Decoder-only: the row's own normaliser and q·k (after rotary), cut like the kind
  const llm = details.llm?.anatomy || null;
  const lse = llm?.logsumexp?.[kind]?.[layer]?.[head]?.[query];
  const dots = llm?.dot?.[kind]?.[layer]?.[head]?.[query] || null;
  const softmax = (s) => (lse !== undefined && lse !== null ? Math.exp(s - lse) : Math.exp(s - maxExp) / total);
  const queryToken = axes.rows[query];
  const where = `${KIND_LABELS[kind]}${transformer ? ` · layer ${layer + 1} · head ${head + 1}` : ""}`;
  role(root, "anatomy-title").textContent = `Step ${query + 1}: ${kind === "encoder_self" ? "source token" : "writing"} «${queryToken}» — ${where}`;
  const rows = scores.map((s, i) => {
    const masked = s === null;
    const w = weights[i];
    const scoreBar = masked ? null : el("span", { class: `bar score ${s < 0 ? "neg" : "pos"}`, style: { width: `${(50 * Math.abs(s)) / maxAbs}%` } });
    return el(
      "tr",
      { class: masked ? "masked" : "", dataset: { key: String(i), score: masked ? "" : String(s), weight: String(w) } },
      el("th", { scope: "row", class: "tok" }, axes.cols[i]),
      scaled ? el("td", { class: "num" }, masked ? "–" : (dots ? dots[i] : s * root2).toFixed(2)) : null,
      el("td", { class: "num" }, fmt(s, 3)),
      el("td", { class: "bar-cell signed" }, el("span", { class: "axis" }), scoreBar),
      el("td", { class: "num" }, masked ? "–" : softmax(s).toFixed(4)),
      el("td", { class: "bar-cell" }, el("span", { class: "bar weight", style: { width: `${100 * w}%` } })),
      sizes ? el("td", { class: "num", dataset: { size: String(sizes[i]) } }, masked ? "–" : sizes[i].toFixed(2)) : null,
      sizes ? el("td", { class: "bar-cell" }, el("span", { class: "bar size", style: { width: `${(100 * sizes[i]) / maxSize}%` } })) : null,
      moved ? el("td", { class: "num", dataset: { moved: String(moved[i]) } }, masked ? "–" : moved[i].toFixed(3)) : null,
      moved ? el("td", { class: "bar-cell" }, el("span", { class: "bar moved", style: { width: `${(100 * moved[i]) / maxMoved}%` } })) : null,
    );
  });
  const keyName = kind === "decoder_self" ? "decoder input" : kind === "cross" ? `source${sourceLang ? ` (${sourceLang})` : ""}` : "source key";
  const table = el(
    "table",
    { class: "anatomy-table" },
    el(
      "thead",
      {},
      el(
        "tr",
        {},
        el("th", { scope: "col" }, keyName),
        scaled ? el("th", { scope: "col", title: "the dot product of this head's query and key" }, "q · k") : null,
        el("th", { scope: "col" }, llm ? llmScoreHead(llm, root2) : scaled ? `÷ √${dk} = score` : "score"),
        el("th", { scope: "col" }, "① raw score"),
        el("th", { scope: "col" }, "softmax"),
        el("th", { scope: "col" }, "② weight α"),
        sizes ? el("th", { scope: "col", colspan: 2, title: "‖f(xᵢ)‖: the size of the vector this key would move, the same for every query" }, "③ value norm ‖f(x)‖") : null,
        sizes ? el("th", { scope: "col", colspan: 2, title: "‖αᵢ f(xᵢ)‖ = αᵢ ‖f(xᵢ)‖: what this key actually moves to the query" }, "④ moved α‖f(x)‖") : null,
      ),
    ),
    el("tbody", {}, rows),
  );
  const steps = [
    transformer && !scaled
      ? el("li", { dataset: { unscaled: "" } }, el("strong", {}, "Score"), " every key against the query: ", el("code", {}, "score(q, kᵢ) = q · kᵢ"),
        ` (d_k = ${dk}): scores are q·k (+ position bias), not scaled by √d_k.`)
      : el("li", {}, el("strong", {}, "Score"), " every key against the query: ", el("code", {}, formulaFor(details, kind)),
        transformer ? ` (d_k = ${dk}, √d_k = ${root2.toFixed(2)})` : ""),
    el("li", {}, el("strong", {}, "Softmax"), ` turns the scores into weights that sum to one: αᵢ = exp(scoreᵢ) / Σⱼ exp(scoreⱼ)${real.length < scores.length ? "; masked keys get zero" : ""}.`),
    llm && lse !== undefined
      ? el("li", { dataset: { llmRow: "" } }, el("strong", {}, "Part of a longer row:"),
        ` in a decoder-only model this query attends to the whole prompt and the output so far; the softmax runs over all of it, so the weights shown sum to ${weights.reduce((a, w) => a + w, 0).toFixed(3)} (the rest goes to the instruction, the first token and the output).`)
      : null,
    kind === "cross"
      ? el("li", {}, el("strong", {}, "Weighted sum"), " of the ", transformer ? "values" : "encoder states", ": c = Σᵢ αᵢ ", transformer ? "vᵢ" : "hᵢ", ", the context vector below.")
      : null,
    sizes
      ? el("li", {}, el("strong", {}, "Size"), " of what each key moves: ‖f(xᵢ)‖ = ‖(xᵢ W_V + b_V) W_O‖",
        transformer ? " (this head's value and output projection)" : " (through the output layer)",
        ". A high weight on a short vector moves little: αᵢ ‖f(xᵢ)‖ is the key's real share (Kobayashi et al. 2020).")
      : null,
  ];
  const children = [el("ol", { class: "anatomy-steps" }, steps), el("div", { class: "table-scroll" }, table)];
  const contextStep = sizes ? "⑤" : "③";
  const context = details.context_vectors?.[layer]?.[head]?.[query];
  if (kind === "cross" && context) {
    const maxC = Math.max(...context.map(Math.abs), 1e-9);
    const norm = details.context_norms?.[layer]?.[head]?.[query];
    children.push(
      el("h4", {}, `${contextStep} Context vector c (${context.length} numbers, ‖c‖ = ${fmt(norm, 2)})`),
      el(
        "div",
        { class: "context-bars", role: "img", "aria-label": `context vector of ${context.length} numbers, norm ${fmt(norm, 2)}` },
        context.map((v, d) =>
          el("span", { class: "ccol", title: `dim ${d + 1}: ${v.toFixed(4)}` },
            el("span", { class: `cbar ${v < 0 ? "neg" : "pos"}`, style: { height: `${(50 * Math.abs(v)) / maxC}%` } })),
        ),
      ),
    );
  }
  if (details.score === "concat" && kind === "cross") {
    children.unshift(el("p", { class: "note warn" }, "Concat: the sᵀ term is the same for every key, so it cancels in the softmax — only w_hᵀhᵢ decides the weights, the same at every step."));
  }
  setChildren(body, children);
  root.dataset.query = String(query);
  return weights;
}
