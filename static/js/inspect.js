// The deeper views of one translation on the Translate page: the anatomy of one attention step
// (click a heatmap row), the what-if (click an output token), and the beam search tree (click a
// node for the attention of that partial hypothesis, or continue from it; compare two beam sizes).
// The raw scores and alternatives are fetched once per translation, only when first needed.
import { postJSON } from "./api.js";
import { $, role, setBusy, showError } from "./dom.js";
import { renderAnatomy } from "./anatomy.js";
import { drawBeamTree } from "./beamtree.js";
import { drawHeatmap, purge } from "./heatmap.js";
import { viewOf } from "./matrix.js";
import { WhatIf, piecesToText } from "./whatif.js";

const ALTERNATIVES = 8;

export class Inspector {
  /** explorer: the page's Explorer; redecode(prefix): translate again forcing `prefix`. */
  constructor({ explorer, redecode, errorBox }) {
    this.explorer = explorer;
    this.redecode = redecode;
    this.errorBox = errorBox;
    this.current = null;
    this.detailsPromise = null;
    this.anatomyCard = $("#anatomy-card");
    this.beamCard = $("#beam-card");
    this.selected = null; // {ids, tree: "main" | "other"}
    this.whatIf = new WhatIf($("#whatif"), {
      loadAlternatives: () => this.details(),
      onChoose: (prefix) => this.redecode(prefix),
    });
    role(this.beamCard, "beam-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.compareBeams();
    });
    role(this.beamCard, "beam-continue").addEventListener("click", () => {
      if (this.selected) this.redecode(this.selected.prefix);
    });
    role($("#whatif-original"), "original-back").addEventListener("click", () => this.redecode(null));
  }

  /** A new result on the page: current = {response, model, text, beam, prefix, original}. */
  setResult(current) {
    this.current = current;
    this.detailsPromise = null;
    this.selected = null;
    this.whatIf.close();
    this.anatomyCard.hidden = false;
    role(this.anatomyCard, "anatomy-title").textContent = "";
    const body = role(this.anatomyCard, "anatomy-body");
    body.replaceChildren();
    const hint = document.createElement("p");
    hint.className = "empty";
    hint.textContent = current.response.attention && Object.keys(current.response.attention).length
      ? "No row chosen yet: click a row of the heatmap."
      : "This model has no attention, so there is no step to take apart.";
    body.append(hint);
    const original = $("#whatif-original");
    original.hidden = !current.original;
    if (current.original) role(original, "original-text").textContent = current.original.translation;
    role(this.beamCard, "beam-detail").hidden = true;
    role(this.beamCard, "tree-other").hidden = true;
    role(this.beamCard, "trees").classList.remove("two");
    this.drawTree("main", current.response.beam, current.beam);
  }

  drawTree(which, beam, size) {
    const box = role(this.beamCard, `tree-${which}`);
    this.beamCard.hidden = !beam && which === "main";
    if (!beam) return;
    box.hidden = false;
    box.dataset.beam = String(size);
    drawBeamTree(box, beam, {
      title: `Beam ${size}${size === 1 ? " (greedy)" : ""}`,
      selected: this.selected && this.selected.which === which ? this.selected.ids.at(-1) : null,
      onPick: (ids) => this.pickNode(which, beam, size, ids),
    });
  }

  /** The raw scores and alternatives of the current translation (one request, cached). */
  details() {
    if (!this.detailsPromise) {
      const { model, text, beam, prefix } = this.current;
      const body = { model: model.id, text, beam_size: beam, return_scores: true, alternatives: ALTERNATIVES, explain: ["norm"] };
      if (prefix) body.prefix = prefix;
      this.detailsPromise = postJSON("/api/translate", body).catch((err) => {
        this.detailsPromise = null;
        throw err;
      });
    }
    return this.detailsPromise;
  }

  /** A heatmap row was clicked: take that step apart for the kind, layer and head shown. */
  async showStep(query) {
    if (!this.current) return;
    const s = this.explorer.state;
    let details;
    try {
      details = await this.details();
    } catch (err) {
      showError(this.errorBox, err.message);
      return;
    }
    const same = details.target_tokens.join("\u0001") === this.current.response.target_tokens.join("\u0001");
    if (!same) {
      showError(this.errorBox, "The scores came back for a different output; translate again.");
      return;
    }
    const head = s.avg ? 0 : s.head;
    renderAnatomy(this.anatomyCard, details, {
      kind: s.kind,
      layer: s.layer,
      head,
      query,
      sourceLang: this.current.model.source_lang,
      targetLang: this.current.model.target_lang,
    });
    if (s.avg) {
      const note = document.createElement("p");
      note.className = "hint";
      note.textContent = `An average of heads has no scores of its own: this is head ${head + 1}; pick a head above to see another.`;
      role(this.anatomyCard, "anatomy-body").prepend(note);
    }
    this.anatomyCard.scrollIntoView({ behavior: "smooth", block: "nearest" });
  }

  /** An output token was clicked: offer the model's alternatives there. */
  pickToken(index) {
    if (this.current) this.whatIf.open(this.current.response, index);
  }

  /** A beam node was clicked: teacher-force its partial hypothesis and draw its cross-attention. */
  async pickNode(which, beam, size, ids) {
    const byId = new Map(beam.nodes.map((n) => [n.id, n]));
    const path = ids.slice(1).map((id) => byId.get(id));
    const eos = this.current.response.eos_token || "</s>";
    const pieces = path.map((n) => n.token).filter((t) => t !== eos);
    const prefix = piecesToText(pieces);
    this.selected = { which, ids, prefix };
    this.drawTree(which, beam, size);
    const detail = role(this.beamCard, "beam-detail");
    detail.hidden = false;
    const last = path.at(-1);
    role(this.beamCard, "beam-path").textContent = path.length
      ? `Partial hypothesis: ${pieces.join(" ") || "(empty)"} · path log-prob ${last.score.toFixed(2)}`
      : "The root: nothing written yet";
    const cont = role(this.beamCard, "beam-continue");
    cont.disabled = !pieces.length || Boolean(last?.finished);
    const gd = role(this.beamCard, "beam-plot");
    const empty = role(this.beamCard, "beam-empty");
    const caption = role(this.beamCard, "beam-caption");
    if (!pieces.length || !this.current.response.attention?.cross) {
      purge(gd);
      gd.hidden = true;
      empty.hidden = false;
      empty.textContent = pieces.length ? "This model has no cross-attention." : "Click a node after the root.";
      return;
    }
    const { model, text } = this.current;
    let aligned;
    try {
      aligned = await postJSON("/api/align", { model: model.id, text, target: prefix });
    } catch (err) {
      empty.hidden = false;
      empty.textContent = err.message;
      return;
    }
    if (this.selected?.ids !== ids) return; // another node was picked meanwhile
    // The align call scores the path plus </s>; an unfinished path shows only its own rows.
    const rows = last.finished ? aligned.target_tokens.length : Math.max(1, aligned.target_tokens.length - 1);
    const s = this.explorer.state;
    const layers = aligned.attention.cross.length;
    const layer = Math.min(s.kind === "cross" ? s.layer : layers - 1, layers - 1);
    const head = s.kind === "cross" && !s.avg ? s.head : aligned.attention.cross[0].length > 1 ? "avg" : 0;
    const readRows = this.explorer.readsRows(layer, head); // a reading-row head: rows by the word read
    const full = viewOf(aligned, "cross", { layer, head, merge: false, hideEos: false, readRows });
    const view = { ...full, z: full.z.slice(0, rows), rowLabels: full.rowLabels.slice(0, rows), rowPieces: full.rowPieces.slice(0, rows) };
    gd.hidden = false;
    empty.hidden = true;
    // Teacher-forced on the path's text: a path that ends inside a character (a lone byte piece)
    // or whose text the tokenizer splits otherwise is not its own pieces again; said, not hidden.
    const same = pieces.every((p, i) => aligned.target_tokens[i] === p);
    caption.textContent = `Cross-attention of this partial translation (teacher-forced), ${head === "avg" ? "average of heads" : `head ${head + 1}`}${layers > 1 ? `, layer ${layer + 1}` : ""}${readRows ? "; rows labelled by the word each step reads" : ""}.${same ? "" : " Its text tokenises into other pieces than the path's (it ends inside a character, or its pieces merge): the rows are that text's."}`;
    await drawHeatmap(gd, view, {
      where: `partial hypothesis · ${head === "avg" ? "average of heads" : `head ${head + 1}`}`,
      boxWidth: Math.max(240, (detail.clientWidth || 800) - 10),
      boxHeight: 420,
      xTitle: `source (${model.source_lang})`,
      yTitle: `target (${model.target_lang})`,
    });
    gd.dataset.path = prefix;
  }

  /** Draw a second tree with another beam size beside the first. */
  async compareBeams() {
    if (!this.current) return;
    const input = role(this.beamCard, "beam-other");
    const size = Math.min(Number(input.max), Math.max(1, Math.round(Number(input.value)) || 1));
    input.value = String(size);
    const button = role(this.beamCard, "beam-compare");
    setBusy(button, true);
    try {
      const { model, text, prefix } = this.current;
      const body = { model: model.id, text, beam_size: size, return_beam: true };
      if (prefix) body.prefix = prefix;
      const other = await postJSON("/api/translate", body);
      role(this.beamCard, "trees").classList.add("two");
      this.drawTree("other", other.beam, size);
      const box = role(this.beamCard, "tree-other");
      const same = other.translation === this.current.response.translation;
      const note = document.createElement("p");
      note.className = "hint";
      note.textContent = same ? "Both beams chose the same translation." : `Beam ${size} chose: ${other.translation}`;
      box.append(note);
    } catch (err) {
      showError(this.errorBox, err.message);
    } finally {
      setBusy(button, false);
    }
  }
}
