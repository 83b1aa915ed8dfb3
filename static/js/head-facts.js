// What a model's card says about each attention head, for the explorer: word-alignment F1 of the
// cross-attention heads (card.alignment, from `attnscope evaluate --alignment --update-card`) and
// test BLEU with each head switched off (card.ablation, from `attnscope evaluate --ablate
// --update-card`: {split, beam_size, baseline, bleu_without_head: {kind: [layer][head]}}).
// The card's grids count layers and heads from 0, as the API does; the explorer counts from 1.
import { pageCards } from "./models-api.js";

let cards = null;

/** The card the server rendered into the page for model `id` (null when there is none). */
export function cardOf(id) {
  cards ??= new Map(pageCards().map((card) => [card.id, card]));
  return cards.get(id) || null;
}

const number = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

/** A [layer][head] grid of numbers (null where a cell is not a number), or null if its shape is
 *  not layers × heads: a card written for another configuration must not be read as this one. */
function gridOf(grid, layers, heads) {
  if (!Array.isArray(grid) || grid.length !== layers) return null;
  if (!grid.every((row) => Array.isArray(row) && row.length === heads)) return null;
  return grid.map((row) => row.map(number));
}

const shapeText = (grid) => `${grid.length} × ${Array.isArray(grid[0]) ? grid[0].length : 0}`;

/**
 * The card's numbers for the heads of one attention kind, shaped like the model's attention.
 * Returns {f1: [layer][head] | null, layerF1: [layer] | null (the layer's average of heads),
 *          split, f1Note, delta: [layer][head] BLEU change with the head off | null,
 *          reading: {layer, head} of a head that aligns on reading rows | null,
 *          ablation: {split, beam, baseline} | null, ablationNote}.
 * A note says why a number is missing ("not measured", wrong shape, not a cross kind).
 */
export function headFacts(card, kind, layers, heads) {
  const facts = { f1: null, layerF1: null, split: null, f1Note: "", delta: null, ablation: null, ablationNote: "", reading: null };
  const alignment = card?.alignment;
  if (kind !== "cross") {
    facts.f1Note = "Word-alignment F1 is measured for cross-attention heads only.";
  } else if (!alignment || !Array.isArray(alignment.f1)) {
    facts.f1Note = "F1: not measured — this model's card has no alignment result (attnscope evaluate MODEL --alignment --update-card).";
  } else if (!(facts.f1 = gridOf(alignment.f1, layers, heads))) {
    facts.f1Note = `F1: not shown — the card's alignment grid is ${shapeText(alignment.f1)} but the model has ${layers} × ${heads} heads.`;
  } else {
    facts.split = typeof alignment.split === "string" ? alignment.split : "test";
    const perLayer = Array.isArray(alignment.per_layer) ? alignment.per_layer : [];
    facts.layerF1 = perLayer.length === layers ? perLayer.map((p) => number(p?.f1)) : null;
    readingHead(card, facts, layers, heads);
  }
  const ablation = card?.ablation;
  const grid = ablation?.bleu_without_head?.[kind];
  const baseline = number(ablation?.baseline);
  if (!grid || baseline === null) {
    facts.ablationNote = "BLEU with a head off: not measured (attnscope evaluate MODEL --ablate --update-card).";
  } else {
    const bleu = gridOf(grid, layers, heads);
    if (!bleu) {
      facts.ablationNote = `BLEU with a head off: not shown — the card's grid is ${shapeText(grid)} but the model has ${layers} × ${heads} heads.`;
    } else {
      facts.delta = bleu.map((row) => row.map((v) => (v === null ? null : v - baseline)));
      facts.ablation = { split: ablation.split || "test", beam: ablation.beam_size ?? null, baseline };
    }
  }
  return facts;
}

/** A head trained to align on the row of the step that *reads* each word (the card's
 *  training.alignment_supervision.rows is "reads"): its F1 is the one measured that way
 *  (card.alignment_reads), the convention it aligns by, and a note says so. */
function readingHead(card, facts, layers, heads) {
  const sup = card?.training?.alignment_supervision;
  const reads = gridOf(card?.alignment_reads?.f1, layers, heads);
  if (!sup || sup.rows !== "reads" || !reads) return;
  const { layer, head } = sup;
  if (!(layer >= 0 && layer < layers && head >= 0 && head < heads) || reads[layer][head] === null) return;
  facts.f1 = facts.f1.map((row) => row.slice());
  facts.f1[layer][head] = reads[layer][head];
  facts.reading = { layer, head };
  facts.f1Note = `Layer ${layer + 1}, head ${head + 1} was trained to align on the step that reads each word: its F1 is measured on those rows, the other heads' on the step that writes the word; the explorer labels its rows by the word each step reads.`;
}

/** The F1 of one view: a head, or the layer's average of heads ("avg"); null if not measured. */
export function f1Of(facts, layer, head) {
  if (!facts.f1) return null;
  if (head === "avg") return facts.layerF1 ? facts.layerF1[layer] : null;
  return facts.f1[layer][head];
}

/** "+0.42" / "−1.30": a signed BLEU change with a real minus sign. */
export function signed(v, digits = 2) {
  if (v === null || v === undefined) return "–";
  const text = Math.abs(v).toFixed(digits);
  if (Number(text) === 0) return text;
  return `${v < 0 ? "−" : "+"}${text}`;
}
