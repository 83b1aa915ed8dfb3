// Attention matrices as the API sends them, [layer][head][query][key], and the views the
// explorer derives from them: one head or the average of heads, subwords merged into words,
// the end-of-sentence key hidden and the rows renormalised, per-head entropy.

import { readablePieces } from "./pieces.js";

export const KIND_ORDER = ["cross", "encoder_self", "decoder_self"];
export const KIND_LABELS = { cross: "Cross", encoder_self: "Encoder self", decoder_self: "Decoder self" };
export const KIND_HELP = {
  cross: "Cross attention: rows are target (output) tokens, columns the source tokens the decoder looked at while writing each one.",
  encoder_self: "Encoder self-attention: rows and columns are source tokens; each row shows what that token's representation mixes in.",
  decoder_self: "Decoder self-attention: rows are output tokens, columns the decoder inputs (<s> and the tokens already written).",
};

/** The kinds present in a response, in display order. */
export function kindsOf(response) {
  const attention = response.attention || {};
  return KIND_ORDER.filter((kind) => Array.isArray(attention[kind]) && attention[kind].length > 0);
}

/** Number of layers and heads of one kind. */
export function shapeOf(response, kind) {
  const layers = response.attention[kind];
  return { layers: layers.length, heads: layers[0].length };
}

/** Decoder inputs are <s> then target[:-1]: shift the target's word groups by one. */
function shiftedWords(targetWords, count) {
  const words = [{ text: "<s>", tokens: [0] }];
  for (const word of targetWords) {
    const tokens = word.tokens.map((i) => i + 1).filter((i) => i < count);
    if (tokens.length) words.push({ text: word.text, tokens });
  }
  return words;
}

function singletons(tokens) {
  return tokens.map((token, i) => ({ text: token, tokens: [i] }));
}

/** Query and key tokens (and their word groups) of one kind. `readRows`: label the cross
 *  attention's rows by the token each step *reads* (its decoder input: <s>, then the target
 *  shifted by one), for a head that aligns a word on the step after the one that writes it. */
export function axesOf(response, kind, readRows = false) {
  const source = response.source_tokens;
  const target = response.target_tokens;
  const sourceWords = response.source_words || singletons(source);
  const targetWords = response.target_words || singletons(target);
  const inputs = response.decoder_input_tokens || ["<s>", ...target.slice(0, -1)];
  if (kind === "cross" && readRows) {
    const rowWords = shiftedWords(targetWords, inputs.length);
    return { rows: inputs, cols: source, rowWords, colWords: sourceWords, rowTitle: "target read", colTitle: "source" };
  }
  if (kind === "cross") {
    return { rows: target, cols: source, rowWords: targetWords, colWords: sourceWords, rowTitle: "target", colTitle: "source" };
  }
  if (kind === "encoder_self") {
    return { rows: source, cols: source, rowWords: sourceWords, colWords: sourceWords, rowTitle: "source query", colTitle: "source key" };
  }
  return { rows: target, cols: inputs, rowWords: targetWords, colWords: shiftedWords(targetWords, inputs.length), rowTitle: "target", colTitle: "decoder input" };
}

/** One head's matrix, or the mean over the layer's heads when `head` is "avg". */
export function headMatrix(response, kind, layer, head) {
  const heads = response.attention[kind][layer];
  if (head !== "avg") return heads[head];
  if (response.averages?.[kind]) return response.averages[kind][layer]; // on demand: the server's means
  const rows = heads[0].length;
  const cols = rows ? heads[0][0].length : 0;
  const mean = Array.from({ length: rows }, () => new Array(cols).fill(0));
  for (const matrix of heads) {
    for (let q = 0; q < rows; q++) for (let k = 0; k < cols; k++) mean[q][k] += matrix[q][k] / heads.length;
  }
  return mean;
}

/**
 * The matrix to draw, with its labels.
 * options: {layer, head (index or "avg"), merge, hideEos, readRows (see axesOf)}.
 * Merging sums over the merged keys and averages over the merged queries, so rows still sum to one;
 * hiding </s> drops that key and rescales each row over the keys that remain.
 * Throws an Error naming the mismatch if the matrix does not fit the tokens.
 */
export function viewOf(response, kind, { layer, head, merge = false, hideEos = false, readRows = false }) {
  const axes = axesOf(response, kind, readRows);
  const matrix = headMatrix(response, kind, layer, head);
  const width = matrix.length ? matrix[0].length : 0;
  if (matrix.length !== axes.rows.length || width !== axes.cols.length) {
    throw new Error(
      `${KIND_LABELS[kind]} attention is ${matrix.length}×${width}, but there are ` +
        `${axes.rows.length} query and ${axes.cols.length} key tokens.`,
    );
  }
  const eos = response.eos_token || "</s>";
  const hidden = new Set(hideEos ? axes.cols.flatMap((token, i) => (token === eos ? [i] : [])) : []);
  const group = (words, tokens) => {
    if (merge) return words.map((w) => ({ label: w.text, tokens: w.tokens }));
    const labels = readablePieces(tokens); // byte pieces as characters: "🍕 1/4"
    return tokens.map((t, i) => ({ label: labels[i], tokens: [i] }));
  };
  const rowGroups = group(axes.rowWords, axes.rows);
  const colGroups = group(axes.colWords, axes.cols)
    .map((g) => ({ ...g, tokens: g.tokens.filter((i) => !hidden.has(i)) }))
    .filter((g) => g.tokens.length > 0);
  const kept = colGroups.flatMap((g) => g.tokens);
  const rows = hidden.size
    ? matrix.map((row) => {
        const total = kept.reduce((sum, k) => sum + row[k], 0);
        return total > 0 ? row.map((v) => v / total) : row;
      })
    : matrix;
  const z = rowGroups.map((rg) =>
    colGroups.map((cg) => {
      let sum = 0;
      for (const q of rg.tokens) for (const k of cg.tokens) sum += rows[q][k];
      return sum / rg.tokens.length;
    }),
  );
  const pieces = (g, tokens) => g.tokens.map((i) => tokens[i]).join(" ");
  return {
    z,
    rowLabels: rowGroups.map((g) => g.label),
    colLabels: colGroups.map((g) => g.label),
    rowPieces: rowGroups.map((g) => pieces(g, axes.rows)),
    colPieces: colGroups.map((g) => pieces(g, axes.cols)),
    rowTitle: axes.rowTitle,
    colTitle: axes.colTitle,
    hiddenEos: hidden.size > 0,
  };
}

/** Mean entropy of the rows, in bits (0: every row puts all weight on one key). */
export function meanEntropy(z) {
  if (!z.length) return 0;
  let total = 0;
  for (const row of z) {
    const mass = row.reduce((a, b) => a + b, 0);
    if (mass <= 0) continue;
    let h = 0;
    for (const v of row) if (v > 0) h -= (v / mass) * Math.log2(v / mass);
    total += h;
  }
  return total / z.length;
}

export function maxOf(z) {
  let max = 0;
  for (const row of z) for (const v of row) if (v > max) max = v;
  return max;
}

/** The cell of a [layer][head] grid with the highest number (nulls skipped): {layer, head,
 *  value}, or null when the grid holds no number. */
export function bestCell(grid) {
  let best = null;
  grid.forEach((row, layer) =>
    row.forEach((value, head) => {
      if (value !== null && (best === null || value > best.value + 1e-12)) best = { layer, head, value };
    }),
  );
  return best;
}

/** Cross-attention averaged over every layer and head: [query][key] (the coverage's matrix). */
export function meanOfAllHeads(response, kind, options = {}) {
  const { layers } = shapeOf(response, kind);
  const views = Array.from({ length: layers }, (_, layer) => viewOf(response, kind, { ...options, layer, head: "avg" }));
  const z = views[0].z.map((row, q) => row.map((_, k) => views.reduce((sum, v) => sum + v.z[q][k], 0) / layers));
  return { ...views[0], z };
}
