// The anatomy of the step a player stands on: which step it is and the token it wrote, the
// decoder's likeliest next tokens there, and for one head the attention row that step computed:
// the raw scores, the softmax, the weights (anatomy.js, from the stream's final answer, asked with
// `return_scores`; until that answer is in, the step's own weights alone).
import { renderAnatomy } from "./anatomy.js";
import { el, role, setChildren } from "./dom.js";
import { KIND_LABELS, axesOf } from "./matrix.js";

/** The likeliest next tokens of one row at a step, as bars: the choice the decoder made, in numbers. */
export function topBars(top) {
  return top.map((t) =>
    el("div", { class: "top-row" }, el("span", { class: "top-token" }, t.token),
      el("span", { class: "top-bar-track" }, el("span", { class: "top-bar", style: { width: `${Math.round(100 * t.p)}%` } })),
      el("span", { class: "top-p" }, t.p.toFixed(3))));
}

/** The empty box a player fills with renderStepAnatomy. */
export function stepAnatomyBox() {
  return el(
    "section",
    { class: "step-anatomy", dataset: { role: "step-anatomy" }, "aria-label": "The current step", hidden: true },
    el("h3", { class: "step-title", dataset: { role: "step-title" } }),
    el(
      "div",
      { class: "step-parts" },
      el("div", { class: "step-top" }, el("h4", {}, "The likeliest next tokens"), el("div", { class: "player-top", dataset: { role: "step-top" } })),
      el("div", { class: "step-row anatomy" }, el("h4", { dataset: { role: "anatomy-title" } }), el("div", { dataset: { role: "anatomy-body" } })),
    ),
  );
}

/** The kind whose row a step has: encoder self-attention is computed once, before step 1. */
function stepKind(partial, kind) {
  if (kind !== "encoder_self") return kind;
  return partial.attention.cross ? "cross" : "decoder_self";
}

/** Whether `answer` holds the scores of the rows drawn so far: the same tokens up to `count`. */
function answerCovers(answer, partial, kind, count) {
  if (!answer?.attention_scores?.[kind]) return false;
  const tokens = partial.target_tokens;
  return answer.target_tokens.length >= count && tokens.slice(0, count).every((t, i) => answer.target_tokens[i] === t);
}

/** Weights only (no scores yet): key, α and a bar per key. */
function weightsTable(root, partial, { kind, layer, head, query }) {
  const weights = partial.attention[kind][layer][head][query];
  const keys = axesOf(partial, kind).cols;
  const rows = keys.map((key, i) =>
    el("tr", { dataset: { key: String(i), weight: String(weights[i]) } },
      el("th", { scope: "row", class: "tok" }, key),
      el("td", { class: "num" }, weights[i].toFixed(4)),
      el("td", { class: "bar-cell" }, el("span", { class: "bar weight", style: { width: `${100 * weights[i]}%` } }))));
  setChildren(role(root, "anatomy-body"),
    el("p", { class: "hint" }, "The raw scores before the softmax come with the answer, at the end of the stream: these are the step's weights α."),
    el("div", { class: "table-scroll" }, el("table", { class: "anatomy-table" },
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, kind === "cross" ? "source" : "decoder input"), el("th", { scope: "col", colspan: 2 }, "weight α"))),
      el("tbody", {}, rows))));
}

/**
 * Show step `count` (1-based) of `partial` (player.js partialAnswer) in `root` (stepAnatomyBox):
 * options {top: that row's top tokens, total: steps in all when known, beam, kind, layer, head
 * (index or "avg"), answer: the final answer when in, sourceLang, targetLang}.
 */
export function renderStepAnatomy(root, partial, count, { top, total = null, beam = false, kind, layer, head, answer = null, sourceLang = "", targetLang = "" }) {
  root.hidden = false;
  const query = count - 1;
  const token = partial.target_tokens[query];
  const p = Math.exp(partial.target_logprobs[query]);
  const who = beam ? "the leading hypothesis wrote" : "wrote";
  role(root, "step-title").textContent = `Step ${count}${total ? ` of ${total}` : ""}: ${who} «${token}» (p = ${p.toFixed(3)})`;
  root.dataset.step = String(count);
  setChildren(role(root, "step-top"), topBars(top));
  const rowKind = stepKind(partial, kind);
  const body = role(root, "anatomy-body");
  if (!partial.attention[rowKind]) {
    role(root, "anatomy-title").textContent = "";
    setChildren(body, el("p", { class: "empty" }, "This model has no attention: the step reads only the encoder's final state."));
    return;
  }
  const single = head === "avg" ? 0 : head;
  const where = { kind: rowKind, layer, head: single, query };
  const heads = partial.attention[rowKind][layer].length;
  const label = `${KIND_LABELS[rowKind]}${heads > 1 || partial.attention[rowKind].length > 1 ? ` · layer ${layer + 1} · head ${single + 1}` : ""}`;
  if (answerCovers(answer, partial, rowKind, count)) {
    renderAnatomy(root, answer, { ...where, sourceLang, targetLang });
    root.dataset.scores = "true";
  } else {
    role(root, "anatomy-title").textContent = `Step ${count}: writing «${token}» — ${label}`;
    weightsTable(root, partial, where);
    root.dataset.scores = "false";
  }
  const notes = [];
  if (head === "avg") notes.push(`An average of heads has no scores of its own: this is head ${single + 1}.`);
  if (rowKind !== kind) notes.push(`Encoder self-attention is computed once, before step 1: this is the step's ${KIND_LABELS[rowKind].toLowerCase()} attention.`);
  if (notes.length) body.prepend(el("p", { class: "hint" }, notes.join(" ")));
}
