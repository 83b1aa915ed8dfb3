// What the result says about how far to trust it, one short line each (docs/decoding.md, "Trust"):
// a rescored output (protect: the text shown was put together from a translation with
// placeholders and scored afterwards, so its log-probability and heatmaps are the model's reading
// of it, not its search), source words that should come back as written and did not (a dropped
// name or number), and the low-confidence / out-of-domain flag from the model's own probabilities.
// Each line's title says more.
import { el, setChildren } from "./dom.js";

const line = (role, cls, title, head, ...rest) => el("p", { class: `trust-line ${cls}`, dataset: { role }, title }, el("strong", {}, head), ...rest);

/** The trust lines of `response` into `box` (hidden when there is nothing to say). */
export function renderTrust(box, response) {
  const lines = [];
  if (response.rescored) {
    lines.push(line("rescored", "rescored",
      "The model translated the sentence with numbers and names replaced by placeholders; they were put back and this text was then scored by the model. Untick “Keep as written” to see the output the model's own search chose.",
      "Rescored: ", "kept spans were put back, then this text was scored: its log-probability and heatmaps are the model reading it, not its search's choice."));
  }
  const missing = response.missing_words || [];
  if (missing.length) {
    const words = missing.map((w) => w.text);
    const shown = line("missing-words", "missing",
      "Numbers, names (capitalised words inside the sentence) and kept spans of the source that are not in the output as written: dropped, or (a weekday, a month) translated.",
      `Not in the output as written (${missing.length}): `, words.join(", "), el("span", { class: "muted" }, " — source numbers, names, kept spans"));
    shown.dataset.words = JSON.stringify(words);
    lines.push(shown);
  }
  const confidence = response.confidence;
  if (confidence && confidence.low) {
    lines.push(line("low-confidence", "low-confidence", confidence.explanation || "",
      "Low confidence, probably out of domain: ",
      `mean log-probability per token ${confidence.mean_logprob.toFixed(2)} < ${confidence.threshold.toFixed(2)}, rare for its training-like sentences; the translation may be fluent but wrong.`));
  }
  setChildren(box, lines);
  box.hidden = !lines.length;
}
