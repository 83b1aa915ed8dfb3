// "What the heatmap shows": the raw attention weights or one of the explanation methods of
// `explain` (docs/api.md, *Beyond the weights*), drawn in the explorer's large heatmap with the
// same kind, layer and head. While a method is chosen the page's requests carry `explain` (every
// method of the model's family at once), so each answer comes with the explanations of exactly
// the tokens it shows; choosing a method on an answer without them asks for it again. The methods,
// their labels, help and how each is drawn come from GET /api/explain-methods (the registry).
import { drawAltiSplit } from "./alti-view.js";
import { explainMethods } from "./api.js";
import { el, setChildren } from "./dom.js";
import { cardOf } from "./head-facts.js";

/** The raw weights: not an explanation method, the page's own first choice. */
export const WEIGHTS = { name: "weights", label: "weights", help: "The attention weights α: which fraction of each value vector a head takes." };

/** [layer][query][key] -> [layer][head][query][key]: the same matrix under each of `heads` heads. */
const perHead = (layers, heads) => layers.map((matrix) => Array.from({ length: heads }, () => matrix));

const rowNormalised = (matrix) =>
  matrix.map((row) => {
    const total = row.reduce((a, b) => a + b, 0);
    return total > 0 ? row.map((v) => v / total) : row;
  });

/** The matrices `method` (a catalog entry of GET /api/explain-methods) gives `kind`, as
 *  [layer][head][query][key], or null where it has none. Its `draw` says where they are:
 *  explanations[field][kind] (or [field][parts[kind]]), per head or per layer, rows rescaled or not. */
export function methodMatrix(explanations, method, kind, heads) {
  const draw = method?.draw;
  if (!explanations || !draw) return null;
  const found = explanations[draw.field];
  const part = draw.parts ? found?.[draw.parts[kind]] : found?.[kind];
  if (!part) return null;
  const layers = draw.normalise ? part.map((layer) => (draw.per === "head" ? layer.map(rowNormalised) : rowNormalised(layer))) : part;
  return draw.per === "head" ? layers : perHead(layers, heads);
}

/** `response` with its attention replaced by `method`'s matrices (kinds it lacks keep the weights). */
export function shownResponse(response, method, explanations) {
  if (!method || method.name === "weights" || !explanations) return response;
  const attention = {};
  for (const [kind, weights] of Object.entries(response.attention || {})) {
    attention[kind] = methodMatrix(explanations, method, kind, weights[0]?.length || 1) || weights;
  }
  return { ...response, attention };
}

/** The catalog's methods that run on `model` (its family's entry is null; a model without
 *  attention, score "none", has nothing to explain). The API says why the others are missing. */
export function methodsFor(model, catalog) {
  if (!model || model.score === "none") return [];
  return catalog.filter((m) => m.families?.[model.architecture] === null);
}

export class ExplainView {
  /** explorer: the Explorer whose heatmap this switch drives; box: where the switch goes;
   *  redo(): the page asks the server again for what is on screen (request() then adds `explain`). */
  constructor(explorer, box, { redo }) {
    this.explorer = explorer;
    this.box = box;
    this.redo = redo;
    this.method = "weights";
    this.catalog = []; // GET /api/explain-methods, once it is in
    this.note = el("span", { class: "muted", "data-role": "explain-note" });
    this.share = el("div", { "data-role": "source-share", hidden: true });
    this.split = el("div", { "data-role": "alti-split", hidden: true });
    Object.assign(this.split.style, { width: "100%", maxWidth: "100%", overflowX: "auto" });
    explorer.transform = (response) => shownResponse(response, this.chosen(), response.explanations);
    explorer.addPanel({ onView: () => { this.render(); this.caption(); } });
    box.hidden = false;
    this.render();
    explainMethods().then((catalog) => {
      this.catalog = catalog;
      this.render();
      this.box.dataset.catalog = "ready";
    }).catch(() => { this.box.dataset.catalog = "failed"; }); // the weights alone, then
  }

  /** The catalog entry of the method shown (WEIGHTS for the weights). */
  chosen() {
    return this.catalog.find((m) => m.name === this.method) || WEIGHTS;
  }

  /** What a translate or align request for `model` adds: every method the family has, while the
   *  heatmap shows one (so switching between them needs no other request). */
  request(model) {
    const methods = methodsFor(model, this.catalog).map((m) => m.name);
    return this.method === "weights" || !methods.length ? {} : { explain: methods };
  }

  render() {
    const available = ["weights", ...methodsFor(this.explorer.model, this.catalog).map((m) => m.name)];
    if (!available.includes(this.method)) this.method = "weights";
    this.box.dataset.method = this.method;
    const buttons = [WEIGHTS, ...this.catalog].map(({ name: method, label, help }) =>
      el(
        "button",
        {
          type: "button",
          role: "radio",
          class: "seg",
          "aria-checked": method === this.method ? "true" : "false",
          disabled: !available.includes(method),
          title: available.includes(method) ? help : `${help} Not defined for this model's family.`,
          dataset: { method },
          onclick: () => this.choose(method),
        },
        label,
      ),
    );
    const segmented = el("div", { class: "segmented", role: "radiogroup", "aria-label": "What the heatmap shows" }, ...buttons);
    segmented.style.flexWrap = "wrap"; // five choices: on a phone they wrap rather than widen the page
    this.box.style.maxWidth = "100%";
    setChildren(this.box, el("span", { class: "control-label" }, "Heatmap shows"), segmented, this.note, this.share);
    // the side-by-side ALTI+ view goes below the heatmaps, so it never pushes the first one down
    const plots = this.box.closest("[id]")?.querySelector(".plots");
    if (plots && this.split.previousElementSibling !== plots) plots.after(this.split);
    else if (!plots && !this.split.isConnected) this.box.append(this.split);
  }

  /** Say in the plots' captions what they show, when it is not the weights. */
  caption() {
    const why = this.explorer.response?.explanations?.unavailable?.[this.method];
    this.note.textContent = why ? `Not for this model: ${why}.` : "";
    this.renderShare();
    const layer = this.explorer.state.kind === "encoder_self" ? -1 : this.explorer.state.layer;
    drawAltiSplit(this.split, this.method === "alti" ? this.explorer.response : null, layer);
    if (this.method === "weights") return;
    const f1 = this.methodF1();
    for (const role of ["caption-main", "caption-aligned"]) {
      const caption = this.explorer.c[role];
      if (!caption || !caption.textContent) continue;
      // the card's F1 the explorer shows is the weights'; say the method's own where the card has it
      const text = caption.textContent.replace(/ · alignment F1 [^·]*/, "");
      caption.textContent = `${text} · showing ${this.chosen().label}${f1}`;
    }
  }

  /** " · alignment F1 0.70 (test2016, 100 sentences)" of the method at the layer (and head) shown,
   *  from the card's `explanations` (attnscope evaluate --explain), or "". */
  methodF1() {
    const { kind, layer, head, avg } = this.explorer.state;
    const response = this.explorer.response;
    const found = kind === "cross" && response ? cardOf(response.model)?.explanations : null;
    const scores = found?.methods?.[this.method];
    if (!scores || (scores.per === "head" && avg)) return "";
    const value = scores.alignment?.f1?.[layer]?.[scores.per === "head" ? head : 0];
    return typeof value === "number" ? ` · alignment F1 ${value.toFixed(2)} (${found.split}, ${found.sentences} sentences, from the card)` : "";
  }

  /** With ALTI+: the source share of each output token as a row of bars (near 0: the token came
   *  from the target prefix alone, as a copy or a hallucination does). */
  renderShare() {
    const response = this.explorer.response;
    const shares = this.method === "alti" ? response?.explanations?.alti?.source_share : null;
    this.share.hidden = !shares;
    if (!shares) return;
    const chips = shares.map((share, i) => {
      const bar = el("span", { class: "share-bar" });
      Object.assign(bar.style, { display: "block", height: "4px", width: `${Math.round(share * 100)}%`, background: "var(--cross, #2563eb)" });
      const chip = el(
        "span",
        { class: "chip", title: `${response.target_tokens[i]}: ${(share * 100).toFixed(1)}% from the source`, dataset: { share: String(share) } },
        `${response.target_tokens[i]} ${Math.round(share * 100)}%`,
        bar,
      );
      chip.style.display = "inline-block";
      return chip;
    });
    setChildren(this.share, el("span", { class: "control-label" }, "ALTI+ source share per output token"), ...chips);
  }

  /** Show `method`, keeping kind, layer and head; the answers on screen are asked for again
   *  (with their explanations) when they came without. */
  async choose(method) {
    const explorer = this.explorer;
    this.method = method;
    const answers = [explorer.response, explorer.aligned].filter(Boolean);
    if (method !== "weights" && answers.some((answer) => !answer.explanations)) {
      this.render();
      return this.redo();
    }
    return explorer.update({});
  }
}
