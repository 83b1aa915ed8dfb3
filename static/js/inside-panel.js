// "Inside the layers" on the Translate page: the logit lens (a point × target table of top-1
// words), direct logit attribution (a layer × head heatmap) and activation patching between the
// sentence and a minimally different one (docs/inside.md). Reads the page's model and text boxes.
import { postJSON } from "./api.js";
import { $, el, role, setBusy, setChildren, showError } from "./dom.js";
import { readablePieces } from "./pieces.js";

const PAIRS = [
  { label: "gender", clean: "The man is reading.", corrupted: "The woman is reading." },
  { label: "number", clean: "The man is playing.", corrupted: "The men are playing." },
  { label: "word sense", clean: "He sits on the bank.", corrupted: "He works at the bank." },
  { label: "negation", clean: "A man is riding a bike.", corrupted: "No man is riding a bike." },
];
// "Swap this word": the other member of a minimal pair, or the word selected for typing.
const SWAPS = { man: "woman", woman: "man", men: "women", women: "men", boy: "girl", girl: "boy",
  is: "are", are: "is", a: "the", the: "a", dog: "cat", cat: "dog", he: "she", she: "he" };

const card = $("#inside-card");
const words = (pieces) => readablePieces(pieces);
// the page's beam, so the lens reads the translation shown above
const beam = () => Math.max(1, Number($("#beam").value) || 1);

/** A signed value as a red (negative) / blue (positive) background, scaled by `max`. */
function signed(value, max) {
  const t = Math.min(1, Math.abs(value) / (max || 1));
  const [r, g, b] = value < 0 ? [214, 69, 65] : [31, 91, 168];
  return `rgba(${r}, ${g}, ${b}, ${(0.08 + 0.82 * t).toFixed(2)})`;
}

/** A table heatmap: rows × cols of numbers, labelled, each cell with its value as a tooltip;
 * columns in `span` ([start, end)) get a marked header (an LLM prompt's source). */
function grid(caption, rowLabels, colLabels, values, name, span = null) {
  const max = Math.max(1e-9, ...values.flat().map(Math.abs));
  const inSpan = (j) => span && j >= span[0] && j < span[1];
  const head = el("tr", {}, el("th", { scope: "col" }, ""), colLabels.map((c, j) => el("th", inSpan(j)
    ? { scope: "col", class: "inside-source", title: "a token of the source sentence" } : { scope: "col" }, c)));
  const rows = values.map((row, i) => el("tr", {}, el("th", { scope: "row" }, rowLabels[i]),
    row.map((v, j) => el("td", { class: "inside-cell", style: { background: signed(v, max) },
      title: `${rowLabels[i]}, ${colLabels[j]}: ${v.toFixed(4)}` }, v.toFixed(2)))));
  return el("div", {}, el("p", { class: "inside-caption" }, caption), el("div", { class: "inside-scroll" },
    el("table", { class: "inside-grid", "data-role": name, "aria-label": caption }, el("thead", {}, head), el("tbody", {}, rows))));
}

function lensTable(out) {
  const target = words(out.target_tokens);
  const head = el("tr", {}, el("th", { scope: "col" }, "point"), target.map((t) => el("th", { scope: "col" }, t)));
  const rows = out.points.map((point, p) => el("tr", {}, el("th", { scope: "row" }, point),
    out.top_tokens[p].map((tops, t) => {
      const rank = out.rank[p][t];
      return el("td", { class: rank === 0 ? "inside-cell hit" : "inside-cell",
        title: `top: ${tops.join(" ")} — “${target[t]}” has rank ${rank + 1}, p = ${out.prob[p][t].toFixed(3)}` },
      words([tops[0]])[0], el("small", {}, ` #${rank + 1}`));
    })));
  const emerge = el("tr", {}, el("th", { scope: "row" }, "emerges"), out.emergence.map((e) => el("td", {}, e ?? "—")));
  const caption = "Logit lens: the top-1 word at each point (the written word's rank after #; blue where it is on top)";
  return el("div", {}, el("p", { class: "inside-caption" }, caption), el("div", { class: "inside-scroll" },
    el("table", { class: "inside-grid", "data-role": "lens-table", "aria-label": caption },
      el("thead", {}, head), el("tbody", {}, rows, emerge))));
}

function attribution(out, position) {
  const dla = out.attribution;
  if (!dla) return el("p", { class: "hint" }, "No direct logit attribution for this model (docs/inside.md).");
  const layers = dla.self_heads.map((_, i) => `layer ${i + 1}`);
  const heads = dla.self_heads[0].map((_, h) => `head ${h}`);
  const at = (g) => g.map((layer) => layer.map((head) => head[position]));
  const word = words(out.target_tokens)[position];
  const normBias = dla.norm_bias ? ` · sublayer-norm biases ${dla.norm_bias.map((b) => b[position].toFixed(2)).join(" / ")}` : "";
  const other = `feed-forward ${dla.feed_forward.map((f) => f[position].toFixed(2)).join(" / ")} · embeddings ` +
    `${dla.embeddings[position].toFixed(2)} · final-norm bias ${dla.final_bias[position].toFixed(2)}${normBias} · logit ${dla.logit[position].toFixed(2)}`;
  const cross = dla.cross_heads.length  // a decoder-only LLM has no cross-attention
    ? grid(`What each cross-attention head writes towards “${word}” (logit units; ${dla.norm})`, layers, heads, at(dla.cross_heads), "dla-cross")
    : null;
  const selfCaption = cross ? `Decoder self-attention heads towards “${word}”` : `What each attention head writes towards “${word}” (logit units; ${dla.norm})`;
  return el("div", {}, cross, grid(selfCaption, layers, heads, at(dla.self_heads), "dla-self"), el("p", { class: "hint" }, other));
}

/** The patching answer's grids: per head and position (Transformers), per decoder step (RNNs). */
function patchGrids(out) {
  if (out.context_steps) {
    const steps = words(out.target_tokens).map((w, t) => `step ${t}: ${w}`);
    return [el("p", { class: "hint" }, "An RNN has no heads or residual stream: each row replaces that decoder step's " +
      "attention context vector with the corrupted run's (docs/inside.md)."),
    grid("Context vector per decoder step (Δ log p of each target word)", steps, words(out.target_tokens), out.context_grid, "patch-context")];
  }
  const layers = out.self_heads.map((_, i) => `layer ${i + 1}`);
  const heads = out.self_heads[0].map((_, h) => `head ${h}`);
  return [out.cross_heads.length ? grid("Cross-attention heads (Δ log p of the target)", layers, heads, out.cross_heads, "patch-cross") : null,
    grid(out.cross_heads.length ? "Decoder self-attention heads" : "Attention heads (Δ log p of the target)", layers, heads, out.self_heads, "patch-self"),
    grid(out.source_span ? "Residual stream per prompt position (the source's tokens underlined; the rest is the template)"
      : "Encoder residual stream per source position", out.position_rows, words(out.clean_tokens), out.positions,
    "patch-positions", out.source_span)];
}

async function runLens() {
  const button = role(card, "lens-run");
  showError(role(card, "error"), "");
  setBusy(button, true);
  try {
    const out = await postJSON("/api/lens", { model: $("#model").value, text: $("#text").value, beam_size: beam() });
    const pick = el("select", { "data-role": "dla-position", "aria-label": "Target word" },
      words(out.target_tokens).map((w, t) => el("option", { value: t }, `${t}: ${w}`)));
    const holder = el("div", {}, attribution(out, 0));
    pick.addEventListener("change", () => setChildren(holder, attribution(out, Number(pick.value))));
    setChildren(role(card, "lens-out"), el("p", { class: "hint" }, `Translation: ${out.translation}`), lensTable(out),
      el("label", { class: "field" }, el("span", { class: "control-label" }, "Direct logit attribution of"), pick), holder);
  } catch (err) {
    setChildren(role(card, "lens-out"));  // no table of an earlier sentence under the message
    showError(role(card, "error"), err.message);
  } finally {
    setBusy(button, false);
  }
}

function swapChips() {
  const clean = role(card, "clean").value;
  const parts = clean.split(/(\s+)/);
  setChildren(role(card, "swaps"), parts.map((part, i) => (/^\s*$/.test(part) ? null : el("button", {
    type: "button", class: "chip", title: "Swap this word in the corrupted sentence",
    onclick: () => {
      const bare = part.replace(/[^\p{L}\p{N}]/gu, "");
      const swap = SWAPS[bare.toLowerCase()];
      const box = role(card, "corrupted");
      const before = parts.slice(0, i).join("");
      if (swap) {
        const cased = bare[0] === bare[0].toUpperCase() ? swap[0].toUpperCase() + swap.slice(1) : swap;
        box.value = before + part.replace(bare, cased) + parts.slice(i + 1).join("");
      } else {
        box.value = clean;
        box.focus();
        box.setSelectionRange(before.length, before.length + part.length);
      }
    },
  }, part))));
}

async function runPatch(event) {
  event.preventDefault();
  const button = role(card, "patch-run");
  showError(role(card, "error"), "");
  setBusy(button, true);
  try {
    const out = await postJSON("/api/patch", { model: $("#model").value, clean: role(card, "clean").value,
      corrupted: role(card, "corrupted").value, beam_size: beam() });
    setChildren(role(card, "patch-out"),
      el("p", { class: "hint", "data-role": "patch-summary" }, `Target “${out.translation}”: the corrupted source changes log p by ` +
        `${out.total_effect.toFixed(2)}. Each cell: the change when only that piece comes from the corrupted run.`),
      ...patchGrids(out));
  } catch (err) {
    setChildren(role(card, "patch-out"));  // no grids of an earlier pair under the message
    showError(role(card, "error"), err.message);
  } finally {
    setBusy(button, false);
  }
}

// Arriving from the Learn tour's stop (a link ending in #inside-card): the page's own URL updates
// drop the hash and its answer grows the page above the panel, so show the panel, and its lens,
// once the page says it is ready.
const arrivedHere = location.hash === "#inside-card";

function revealWhenReady(tries = 1200) {
  // the page's own flag (translate.js sets it after its first answer), asked every 100 ms
  if (document.body.dataset.ready !== "true") {
    if (tries > 0) setTimeout(() => revealWhenReady(tries - 1), 100);
    return;
  }
  requestAnimationFrame(() => {
    card.scrollIntoView({ block: "start" });
    runLens();
  });
}

if (card) {
  if (arrivedHere) revealWhenReady();
  role(card, "lens-run").addEventListener("click", runLens);
  role(card, "patch-form").addEventListener("submit", runPatch);
  role(card, "clean").addEventListener("input", swapChips);
  role(card, "use-text").addEventListener("click", () => {
    role(card, "clean").value = $("#text").value;
    role(card, "corrupted").value = $("#text").value;
    swapChips();
  });
  setChildren(role(card, "pairs"), PAIRS.map((pair) => el("button", { type: "button", class: "chip", onclick: () => {
    role(card, "clean").value = pair.clean;
    role(card, "corrupted").value = pair.corrupted;
    swapChips();
  } }, pair.label)));
  swapChips();
}
