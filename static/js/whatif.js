// What-if: pick a target token, see the model's top alternatives at that position (from the
// API's `alternatives`), choose one or type your own, and the model re-decodes from there
// (`prefix` = the tokens before it plus the new one). The page keeps the original for contrast.
import { el, role, setChildren } from "./dom.js";
import { bytesAsText } from "./pieces.js";

/** SentencePiece pieces -> text (▁ marks a word start; byte pieces of whole characters as them). */
export function piecesToText(pieces) {
  return bytesAsText(pieces).join("").replaceAll("\u2581", " ").replace(/\s+/g, " ").trim();
}

/** The prefix text for choosing `choice` (a piece, or typed text) at `index` of `tokens`. */
export function prefixFor(tokens, index, choice, typed = false) {
  const before = piecesToText(tokens.slice(0, index));
  const next = typed ? choice.trim() : piecesToText([choice]);
  const glue = typed || choice.startsWith("\u2581") ? " " : "";
  return `${before}${glue}${next}`.trim();
}

export class WhatIf {
  /**
   * root: the panel ([data-role=whatif-title], [data-role=whatif-options], a form with an input).
   * loadAlternatives(): a promise of the answer with `alternatives`; onChoose(prefix, label).
   */
  constructor(root, { loadAlternatives, onChoose }) {
    this.root = root;
    this.loadAlternatives = loadAlternatives;
    this.onChoose = onChoose;
    this.response = null;
    this.index = null;
    const form = root.querySelector("form");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const typed = form.querySelector("input").value;
      if (typed.trim() && this.response) this.choose(prefixFor(this.response.target_tokens, this.index, typed, true), typed.trim());
    });
    role(root, "whatif-close").addEventListener("click", () => this.close());
  }

  close() {
    this.root.hidden = true;
    this.index = null;
  }

  choose(prefix, label) {
    this.close();
    this.onChoose(prefix, label);
  }

  /** Open for target position `index` of `response`. */
  async open(response, index) {
    this.response = response;
    this.index = index;
    const token = response.target_tokens[index];
    this.root.hidden = false;
    role(this.root, "whatif-title").textContent = `Instead of «${token}» (token ${index + 1}), the model could have written:`;
    const box = role(this.root, "whatif-options");
    setChildren(box, el("span", { class: "muted" }, "asking the model…"));
    this.root.querySelector("input").value = "";
    let details;
    try {
      details = await this.loadAlternatives();
    } catch (err) {
      setChildren(box, el("span", { class: "error" }, err.message));
      return;
    }
    if (this.index !== index) return;
    const options = (details.alternatives || [])[index] || [];
    setChildren(
      box,
      options.map((option) => {
        const p = Math.exp(option.logprob);
        const same = option.token === token;
        // contrastive attribution in the Heads card (contrast-view.js): why the model's token, not this one
        const why = same ? null : el("button", {
          type: "button",
          class: "btn small ghost why-not",
          title: `why «${token}» rather than «${option.token}»? (contrastive attribution, in the Heads card)`,
          dataset: { foil: option.token },
          onclick: () => this.root.dispatchEvent(new CustomEvent("attnscope:contrast", { bubbles: true, detail: { position: index, token: option.token } })),
        }, "why not?");
        return [el(
          "button",
          {
            type: "button",
            class: `chip alt${same ? " current" : ""}`,
            disabled: same,
            title: same ? "the model's own choice" : `force «${option.token}» here and let the model go on`,
            dataset: { token: option.token },
            onclick: () => this.choose(prefixFor(response.target_tokens, index, option.token), option.token),
          },
          `${option.token} `,
          el("span", { class: "muted" }, p >= 0.995 ? "1.00" : p >= 0.01 ? p.toFixed(2) : p.toPrecision(1)),
        ), why];
      }).flat(),
    );
  }
}
