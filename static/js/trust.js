// What the result says about how far to trust it, one line each (docs/decoding.md, "Trust"):
// a rescored output (protect: the text shown was put together from a translation with
// placeholders and scored afterwards, so its log-probability and heatmaps are the model's reading
// of it, not its search), source words that should come back as written and did not (a dropped
// name or number), and the low-confidence / out-of-domain flag from the model's own probabilities.
import { el, setChildren } from "./dom.js";

/** The trust lines of `response` into `box` (hidden when there is nothing to say). */
export function renderTrust(box, response) {
  const lines = [];
  if (response.rescored) {
    lines.push(
      el(
        "p",
        { class: "trust-line rescored", dataset: { role: "rescored" } },
        el("strong", {}, "Rescored: "),
        "the model translated the sentence with numbers and names replaced by placeholders, they were put back, and this text was then scored by the model; its log-probability and heatmaps are the model reading this text, not the output its search chose. Untick “Keep as written” to see the model's own output.",
      ),
    );
  }
  const missing = response.missing_words || [];
  if (missing.length) {
    lines.push(
      el(
        "p",
        { class: "trust-line missing", dataset: { role: "missing-words", words: JSON.stringify(missing.map((w) => w.text)) } },
        el("strong", {}, `Not in the output as written (${missing.length}): `),
        missing.map((w) => w.text).join(", "),
        el("span", { class: "muted" }, " — numbers, names and kept spans of the source that the translation dropped (or, for a word like a weekday, translated)."),
      ),
    );
  }
  const confidence = response.confidence;
  if (confidence && confidence.low) {
    lines.push(
      el(
        "p",
        { class: "trust-line low-confidence", dataset: { role: "low-confidence" } },
        el("strong", {}, "Low confidence, probably out of domain: "),
        confidence.explanation,
        confidence.calibrated ? "." : " (threshold not calibrated for this model: the shipped en-de Transformer's).",
      ),
    );
  }
  setChildren(box, lines);
  box.hidden = !lines.length;
}
