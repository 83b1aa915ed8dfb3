// Confidence and coverage of the model's own translation: every output token coloured by the
// probability the model gave it, and every source token by the total attention it received
// (so a clause the model dropped shows as a run of cold source words). <unk> pieces, which the
// model could not represent, are marked on both sides.
import { el, setChildren } from "./dom.js";
import { meanOfAllHeads } from "./matrix.js";
import { readablePieces } from "./pieces.js";

export const UNK = "<unk>";

const isUnk = (token) => token === UNK || token === `\u2581${UNK}`;

function unkBadge(token) {
  return isUnk(token) ? el("span", { class: "unk-badge", title: "unknown token: the tokenizer had no piece for this text" }, "unk") : null;
}

/**
 * Output tokens as chips coloured by probability. `onPick(index, chip)`, when given, makes each
 * chip a button (the what-if view opens from it).
 */
export function renderConfidence(box, response, { onPick = null } = {}) {
  const labels = readablePieces(response.target_tokens); // byte pieces as characters
  const chips = response.target_tokens.map((token, i) => {
    const lp = response.target_logprobs[i];
    const p = Math.exp(lp);
    const attrs = {
      class: `prob${isUnk(token) ? " is-unk" : ""}${i < (response.forced_tokens || 0) ? " forced" : ""}`,
      title: `${token}: p = ${p.toFixed(4)} (log p = ${lp.toFixed(3)})${onPick ? " · click for the model's alternatives" : ""}`,
      style: { "--p": p.toFixed(3) },
      dataset: { index: String(i), p: p.toFixed(6) },
    };
    const children = [
      el("span", { class: "prob-token" }, labels[i]),
      el("span", { class: "prob-value" }, p >= 0.995 ? "1.00" : p.toFixed(2)),
      unkBadge(token),
    ];
    if (!onPick) return el("span", attrs, children);
    return el("button", { ...attrs, type: "button", onclick: (event) => onPick(i, event.currentTarget) }, children);
  });
  setChildren(box, chips);
}

/**
 * Attention received by each source token: column sums of the cross-attention averaged over
 * every layer and head (one head can look away from a word another head covers: a
 * previous-token head would mark correct translations as dropping words), with the words merged
 * and </s> hidden as `state` says. Returns the totals.
 */
export function renderCoverage(box, response, state) {
  const attention = response.attention || {};
  if (!attention.cross) {
    setChildren(box, el("span", { class: "muted" }, "no cross-attention in this model: nothing to measure"));
    return null;
  }
  const layers = attention.cross.length;
  const heads = attention.cross[0].length;
  const view = meanOfAllHeads(response, "cross", { merge: state.merge, hideEos: state.hideEos });
  const totals = view.colLabels.map((_, j) => view.z.reduce((sum, row) => sum + row[j], 0));
  const fair = view.z.length / Math.max(view.colLabels.length, 1); // what each key gets if spread evenly
  setChildren(
    box,
    view.colLabels.map((label, j) => {
      const heat = Math.min(1, totals[j] / Math.max(2 * fair, 1e-9));
      const cold = totals[j] < 0.25 * fair;
      return el(
        "span",
        {
          class: `cover${cold ? " cold" : ""}${isUnk(label) ? " is-unk" : ""}`,
          style: { "--heat": heat.toFixed(3) },
          title: `${label}: received ${totals[j].toFixed(2)} of ${view.z.length} rows' attention${cold ? " — barely looked at" : ""}`,
          dataset: { total: totals[j].toFixed(6) },
        },
        el("span", { class: "prob-token" }, label),
        el("span", { class: "prob-value" }, totals[j].toFixed(2)),
        unkBadge(label),
      );
    }),
  );
  const count = layers * heads;
  const where = count > 1 ? `averaged over all ${count} heads${layers > 1 ? ` of ${layers} layers` : ""}` : "";
  return { totals, labels: view.colLabels, where, fair };
}
