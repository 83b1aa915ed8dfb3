// The attention explorer: controls, the large heatmap (and the teacher-forced one beside it),
// the layer × head small multiples with per-head entropy. Markup: templates/_explorer.html.
import { download, el, fillSelect, role, setChildren } from "./dom.js";
import { ensureLayer, ensureView, isOnDemand, withPlaceholders } from "./attention-client.js";
import { DEFAULT_SORT, renderHeadGrid } from "./explorer-grid.js";
import { cardOf, f1Of, headFacts } from "./head-facts.js";
import { drawHeatmap, exportImage, matrixCsv, purge } from "./heatmap.js";
import { attachNavigator } from "./heatmap-navigator.js";
import { KIND_HELP, KIND_LABELS, kindsOf, bestCell, maxOf, meanEntropy, shapeOf, viewOf } from "./matrix.js";
import { fillTable } from "./table.js";

export { viewFromParams, viewToParams } from "./view-params.js";

export const DEFAULT_VIEW = { kind: "cross", layer: null, head: 0, avg: false, merge: false, hideEos: false, stretch: false };

export class Explorer {
  /** options: {onChange(state), onRender(explorer) after each redraw, onRowClick(row index),
   *  name: used in file names} */
  constructor(root, { onChange = () => {}, onRender = () => {}, onRowClick = null, name = "attnscope" } = {}) {
    this.root = root;
    this.onChange = onChange;
    this.onRender = onRender;
    this.onRowClick = onRowClick;
    this.name = name;
    this.views = {}; // which -> the view drawn there (for export, the table and other panels)
    this.response = null;
    this.aligned = null;
    this.model = null;
    this.state = { ...DEFAULT_VIEW };
    this.headSort = { ...DEFAULT_SORT }; // the head table's order (explorer-grid.js)
    this.transform = (response) => response; // what the large heatmap draws (explain-view.js swaps in a method)
    this.panels = []; // addPanel: the views that follow this explorer
    this.c = Object.fromEntries(
      ["kind", "layer", "head", "avg", "merge", "eos", "stretch", "png", "json", "note", "empty", "grid",
        "head-table", "heads-note", "count-hint", "plot-main", "plot-aligned", "aligned-card", "caption-main", "caption-aligned",
        "empty-aligned", "grid-section", "uniform-keys", "uniform-bits", "png-aligned", "axes-main", "axes-aligned",
        "svg", "csv", "svg-aligned", "csv-aligned", "table-main", "table-aligned", "window-main", "window-aligned",
        "nav-main", "nav-aligned"].map((r) => [r, role(root, r)]),
    );
    this.c.layer.addEventListener("change", () => this.update({ layer: Number(this.c.layer.value) }));
    this.c.head.addEventListener("change", () => this.update({ head: Number(this.c.head.value) }));
    this.c.avg.addEventListener("change", () => this.update({ avg: this.c.avg.checked }));
    this.c.merge.addEventListener("change", () => this.update({ merge: this.c.merge.checked }));
    this.c.eos.addEventListener("change", () => this.update({ hideEos: this.c.eos.checked }));
    this.c.stretch.addEventListener("change", () => this.update({ stretch: this.c.stretch.checked }));
    for (const which of ["main", "aligned"]) {
      const suffix = which === "main" ? "" : "-aligned";
      for (const format of ["png", "svg", "csv"]) {
        this.c[`${format}${suffix}`]?.addEventListener("click", () => this.exportFigure(which, format));
      }
      const table = this.c[`table-${which}`];
      table?.addEventListener("toggle", () => this.renderTable(which));
    }
    this.c.json.addEventListener("click", async () => {
      // on demand: every matrix is fetched first, so the file is the answer as an inline one holds it
      const whole = async (answer) => {
        if (!answer || !isOnDemand(answer)) return answer;
        for (const [kind, layers] of Object.entries(answer.attention)) {
          for (let layer = 0; layer < layers.length; layer++) await ensureLayer(answer, kind, layer);
        }
        const { averages, ...rest } = answer; // the page's own cache of head averages
        return rest;
      };
      try {
        const translation = await whole(this.response);
        const data = this.aligned ? { translation, aligned: await whole(this.aligned) } : translation;
        download(`${this.name}-${this.response.model}.json`, data);
      } catch (err) {
        this.showEmpty(err.message);
      }
    });
  }

  filename() {
    const s = this.state;
    const head = s.avg ? "avg" : `h${s.head + 1}`;
    return `${this.name}-${this.response.model}-${s.kind}-l${s.layer + 1}-${head}`;
  }

  /** The source sentence, as words (the API returns tokens; the page may not know the text). */
  sentence(response = this.response) {
    const eos = response.eos_token || "</s>";
    return (response.source_words || []).map((w) => w.text).filter((w) => w !== eos).join(" ");
  }

  /** "source (en)", "target (de)": the axis names of a view. */
  axisName(title) {
    const lang = title.startsWith("source") ? this.model?.source_lang : this.model?.target_lang;
    return lang ? `${title} (${lang})` : title;
  }

  /** Download the figure drawn in `which` ("main" or "aligned") as png, svg or csv. */
  async exportFigure(which, format) {
    const view = this.views[which];
    if (!view) return null;
    const name = which === "main" ? this.filename() : `${this.filename()}-target`;
    if (format === "csv") {
      download(`${name}.csv`, matrixCsv(view), "text/csv");
      return null;
    }
    const response = which === "main" ? this.response : this.aligned;
    const s = this.state;
    const arch = this.model ? [this.model.architecture, this.model.score].filter(Boolean).join(", ") : "";
    const meta = {
      title: [`${KIND_LABELS[s.kind]} attention`, ...this.where(s.layer, this.head()).split(" · ").slice(1)].join(" — "),
      subtitle: [
        `model ${response.model}${arch ? ` (${arch})` : ""}${which === "aligned" ? " · teacher-forced on your target" : ""}`,
        `source: ${this.sentence(response)}`,
        `${which === "main" ? "translation" : "target"}: ${response.translation}`,
      ],
      xTitle: this.axisName(view.colTitle),
      yTitle: this.axisName(view.rowTitle),
      zmax: s.stretch ? Math.max(maxOf(view.z), 1e-6) : 1,
      where: this.where(s.layer, this.head()),
    };
    return exportImage(view, meta, format, name);
  }

  renderTable(which) {
    const details = this.c[`table-${which}`];
    const view = this.views[which];
    if (!details || !details.open || !view) return;
    fillTable(details.querySelector("[data-role=table-body]") || details, view, {
      caption: `${this.where(this.state.layer, this.head())}: rows ${this.axisName(view.rowTitle)}, columns ${this.axisName(view.colTitle)}`,
    });
  }
  /** The panel contract: a panel is an object with any of `onAnswer(explorer)`, called when a new
   *  answer is shown (explorer.response, explorer.model), and `onView(explorer)`, called after each
   *  redraw of a finished answer (a new answer, or the view changed: kind, layer, head, the head
   *  grid), and `onGrid(explorer)`, after each redraw of the head grid's thumbnails. Panels
   *  register here instead of watching the explorer's DOM. Returns the panel. */
  addPanel(panel) {
    this.panels.push(panel);
    if (this.response && !this.playing) panel.onView?.(this);
    return panel;
  }

  /** Tell every panel that the view was redrawn (the head grid included). */
  viewChanged() {
    for (const panel of this.panels) panel.onView?.(this);
  }

  /** Show a new translation (drops any teacher-forced result). */
  async setResponse(response, model) {
    const done = this.show(response, model, false);
    for (const panel of this.panels) panel.onAnswer?.(this);
    return done;
  }

  /** Show a translation still being made (the player, explorer-player.js): an answer-shaped
   *  object of the rows so far, drawn in the large heatmap alone (no grid, no onRender, no
   *  teacher-forced view) until setResponse shows an answer again. */
  showPartial(response, model) {
    return this.show(response, model, true);
  }

  show(response, model, playing) {
    this.playing = playing;
    this.response = withPlaceholders(response);
    this.model = model;
    this.aligned = null;
    this.root.hidden = false;
    // A head the page picked (the default view) is picked again for this one (another model
    // has another best head); a head the user chose stays.
    if (this.defaultHead) this.state.layer = null;
    return this.update({});
  }

  /** Show (or with null, remove) a teacher-forced result beside the model's own. */
  setAligned(response) {
    this.aligned = response && withPlaceholders(response);
    return this.update({});
  }

  /** Change the view (partial state) and redraw. */
  update(partial) {
    if (["layer", "head", "avg"].some((key) => key in partial)) this.defaultHead = false;
    Object.assign(this.state, partial);
    if (!this.response) return Promise.resolve();
    this.normalise();
    const done = this.render();
    this.onChange({ ...this.state });
    return done;
  }

  normalise() {
    const s = this.state;
    const kinds = kindsOf(this.response);
    if (!kinds.includes(s.kind)) s.kind = kinds[0] ?? null;
    if (!s.kind) return;
    const { layers, heads } = shapeOf(this.response, s.kind);
    if (s.layer === null && layers * heads > 1) {
      Object.assign(s, this.defaultView(layers, heads));
      this.defaultHead = true;
    }
    if (s.layer === null || !(s.layer >= 0 && s.layer < layers)) s.layer = layers - 1;
    if (!(s.head >= 0 && s.head < heads)) s.head = 0;
    if (heads === 1) s.avg = false;
  }

  /** First look: the cross-attention head that aligns best with words per the model's card
   *  (word-alignment F1), else the last layer's average of heads. Not the sharpest head: a sharp
   *  head is often a previous-token head, which points at the wrong words. */
  defaultView(layers, heads) {
    const facts = this.headFacts();
    const best = this.state.kind === "cross" && facts.f1 ? bestCell(facts.f1) : null;
    this.defaultWhy = best ? { f1: best.value, split: facts.split, kind: this.state.kind } : { avg: heads > 1, kind: this.state.kind };
    if (best) return { layer: best.layer, head: best.head, avg: false };
    return { layer: layers - 1, head: 0, avg: heads > 1 };
  }

  /** Why the default view is the one shown, for its caption ("" once the user picked a view). */
  defaultCaption(head) {
    const why = this.defaultHead ? this.defaultWhy : null;
    if (!why || why.kind !== this.state.kind) return ""; // another kind, same indices: not the pick
    if (why.f1 !== undefined && head !== "avg") return ` · best-aligned head per the card: F1 ${why.f1.toFixed(2)} (${why.split})`;
    if (why.avg && head === "avg") {
      return this.state.kind === "cross" ? " · shown first: the model's card has no alignment numbers to pick a head by" : " · shown first";
    }
    return "";
  }

  /** Whether a view is a head that aligns on reading rows: its rows are then labelled by the
   *  token each step reads, so that row "Fahrrad" is the step that aligns Fahrrad. */
  readsRows(layer, head) {
    if (this.state.kind !== "cross" || head === "avg") return false;
    const reading = this.headFacts().reading;
    return Boolean(reading && reading.layer === layer && reading.head === head);
  }

  head() {
    return this.state.avg ? "avg" : this.state.head;
  }

  where(layer, head) {
    const { layers, heads } = shapeOf(this.response, this.state.kind);
    const parts = [KIND_LABELS[this.state.kind]];
    if (layers > 1 || heads > 1) parts.push(`layer ${layer + 1}`);
    if (heads > 1) parts.push(head === "avg" ? `average of ${heads} heads` : `head ${head + 1}`);
    return parts.join(" · ");
  }

  async render() {
    const s = this.state;
    const kinds = kindsOf(this.response);
    this.renderKinds(kinds);
    this.renderNote();
    const has = kinds.length > 0;
    this.root.querySelector(".controls").hidden = !has;
    for (const r of ["png", "svg", "csv"]) if (this.c[r]) this.c[r].disabled = !has;
    if (!has) {
      this.showEmpty("This model has no attention: its decoder sees only the encoder's final state, so there is no matrix to show.");
      if (this.c["grid-section"]) this.c["grid-section"].hidden = true;
      return;
    }
    const { layers, heads } = shapeOf(this.response, s.kind);
    fillSelect(this.c.layer, layers, "Layer", s.layer);
    fillSelect(this.c.head, heads, "Head", s.head);
    // A 1-layer, 1-head model (the RNNs) has nothing to choose: hide those controls.
    this.c.layer.closest(".control").hidden = layers === 1;
    this.c.head.closest(".control").hidden = heads === 1;
    this.c.avg.closest(".check").hidden = heads === 1;
    this.c.head.disabled = s.avg;
    this.c.avg.checked = s.avg;
    this.c.merge.checked = s.merge;
    this.c.eos.checked = s.hideEos;
    this.c.stretch.checked = s.stretch;
    const eos = this.response.eos_token || "</s>";
    this.c.eos.disabled = !this.keyTokens().includes(eos);
    const options = { layer: s.layer, head: this.head(), merge: s.merge, hideEos: s.hideEos, readRows: this.readsRows(s.layer, this.head()) };
    await this.fetchShown(s.kind, s.layer, this.head()); // on demand: the head shown, before anything is drawn
    if (this.aligned) await this.fetchShown(s.kind, s.layer, this.head(), this.aligned);
    const jobs = [this.drawOne(this.response, "main", options)];
    const alignedCard = this.c["aligned-card"];
    if (alignedCard) {
      alignedCard.hidden = !this.aligned;
      this.root.querySelector(".plots").classList.toggle("two", Boolean(this.aligned));
      if (this.aligned) jobs.push(this.drawOne(this.aligned, "aligned", options));
      else purge(this.c["plot-aligned"]);
    }
    if (this.playing && this.c["grid-section"]) this.c["grid-section"].hidden = true;
    else jobs.push(this.fetchShown(s.kind, null, "avg").then(() => this.renderGrid())); // thumbnails: layer averages first
    if (!this.playing) this.fetchGrid(this.response, s.kind); // then every head, a layer a request, after the heatmap
    await Promise.all(jobs);
    if (!this.playing) {
      this.onRender(this);
      this.viewChanged();
    }
  }

  /** On demand (attention-client.js), fetch what a view draws; a failed fetch (an evicted id)
   *  is said where the heatmap would be. Nothing to do for an answer that holds its matrices. */
  async fetchShown(kind, layer, head, response = this.response) {
    try {
      await ensureView(response, kind, layer, head);
    } catch (err) {
      this.showEmpty(err.message);
    }
  }

  /** On demand: the grid's heads, one layer at a time, once the view shown is drawn; the grid
   *  is redrawn when they are all here (if the page still shows this answer and kind). */
  async fetchGrid(response, kind) {
    if (!isOnDemand(response) || !response.attention[kind] || this.gridFetch?.has(`${kind}`)) return;
    if (this.gridFetch?.response !== response) this.gridFetch = Object.assign(new Set(), { response });
    this.gridFetch.add(kind);
    try {
      for (let layer = 0; layer < response.attention[kind].length; layer++) await ensureLayer(response, kind, layer);
    } catch {
      return; // the thumbnails keep their "…"; the view shown says what went wrong when it fetches
    }
    if (this.response === response && this.state.kind === kind && !this.playing) this.renderGrid();
  }

  keyTokens() {
    const s = this.state;
    if (s.kind === "decoder_self") return this.response.decoder_input_tokens || [];
    return this.response.source_tokens;
  }

  renderKinds(kinds) {
    const box = this.c.kind;
    setChildren(
      box,
      kinds.map((kind) =>
        el(
          "button",
          {
            type: "button",
            role: "radio",
            class: `seg kind-${kind}`,
            "aria-checked": kind === this.state.kind ? "true" : "false",
            title: KIND_HELP[kind],
            dataset: { kind },
            onclick: () => this.update({ kind }),
          },
          KIND_LABELS[kind],
        ),
      ),
    );
    if (!kinds.length) box.append(el("span", { class: "muted" }, "none"));
  }

  renderNote() {
    const score = this.response.score ?? this.model?.score;
    const note = this.c.note;
    if (score === "concat" && this.state.kind === "cross") {
      note.textContent =
        "This model scores with concat attention, which is linear in [decoder state; source state]: the decoder state's term is the same for every source position and cancels in the softmax, so every target row has the same weights.";
      note.hidden = false;
    } else if (score === "location" && this.state.kind === "cross") {
      note.textContent = "Location attention predicts weights over source positions from the decoder state alone, without looking at the source tokens' content.";
      note.hidden = false;
    } else {
      note.hidden = true;
    }
  }

  showEmpty(message) {
    purge(this.c["plot-main"]);
    this.c["plot-main"].hidden = true;
    this.c.empty.textContent = message;
    this.c.empty.hidden = false;
    this.c["caption-main"].textContent = "Model translation";
    this.c["axes-main"].textContent = ""; // not the previous model's token counts
    if (this.c["window-main"]) this.c["window-main"].hidden = true;
    if (this.c["nav-main"]) this.c["nav-main"].hidden = true;
    if (this.c["table-main"]) this.c["table-main"].hidden = true;
    delete this.views.main;
    if (this.c["aligned-card"]) this.c["aligned-card"].hidden = true;
    this.root.querySelector(".plots").classList.remove("two");
  }

  /** " · alignment F1 0.82 (test2016)" for a cross-attention view, from the model's card. */
  f1Caption({ layer, head }) {
    if (this.state.kind !== "cross") return "";
    const facts = this.headFacts();
    const f1 = f1Of(facts, layer, head);
    if (f1 !== null) return ` · alignment F1 ${f1.toFixed(2)} (${facts.split}, from the card)`;
    return facts.f1 ? "" : " · alignment F1 not measured";
  }

  async drawOne(response, which, options) {
    const gd = this.c[`plot-${which}`];
    const empty = this.c[which === "main" ? "empty" : "empty-aligned"];
    const caption = this.c[`caption-${which}`];
    // mainTitle: a page drawing a teacher-forced answer as the main view says so (Compare).
    const title = which === "main" ? this.mainTitle || "Model translation" : "Your target (teacher-forced)";
    let view;
    try {
      view = viewOf(this.playing ? response : this.transform(response), this.state.kind, options);
    } catch (err) {
      purge(gd);
      gd.hidden = true;
      empty.textContent = err.message;
      empty.hidden = false;
      return;
    }
    gd.hidden = false;
    empty.hidden = true;
    this.views[which] = view;
    const entropy = meanEntropy(view.z);
    const why = this.defaultCaption(options.head);
    const reads = options.readRows ? " · rows labelled by the word each step reads (this head aligns a word on the step after it is written)" : "";
    const f1 = why.includes("F1") ? "" : this.f1Caption(options);
    caption.textContent = `${title} — ${this.where(options.layer, options.head)}${why}${f1}${reads} · mean entropy ${entropy.toFixed(2)} bits`;
    this.c[`axes-${which}`].textContent =
      `rows: ${view.rowTitle} ${options.merge ? "words" : "tokens"} (${view.z.length}) · columns: ${view.colTitle} ${options.merge ? "words" : "tokens"} (${view.colLabels.length})` +
      (view.hiddenEos ? " · </s> hidden, rows renormalised" : "");
    // Side by side or stacked (a narrow screen stacks the two): the column's own width, read
    // from the grid's columns, not half the box whatever the layout.
    const plots = this.root.querySelector(".plots");
    const columns = getComputedStyle(plots).gridTemplateColumns.split(" ").filter(Boolean).length || 1;
    const gap = parseFloat(getComputedStyle(plots).columnGap) || 0;
    const boxWidth = Math.max(240, ((plots.clientWidth || 900) - gap * (columns - 1)) / columns - 28);
    gd.dataset.kind = this.state.kind;
    const shown = await drawHeatmap(gd, view, {
      where: this.where(options.layer, options.head),
      zmax: this.state.stretch ? Math.max(maxOf(view.z), 1e-6) : 1,
      boxWidth,
      boxHeight: Math.round(Math.max(320, window.innerHeight * 0.78)),
      xTitle: this.axisName(view.colTitle),
      yTitle: this.axisName(view.rowTitle),
    });
    this.drawn = { ...this.drawn, [which]: shown }; // what fitted (a player keeps its newest row in sight)
    const windowHint = this.c[`window-${which}`];
    if (windowHint) {
      const big = shown.visibleRows < shown.rows || shown.visibleCols < shown.cols;
      windowHint.hidden = !big;
      windowHint.textContent = big
        ? `Showing ${shown.visibleRows} of ${shown.rows} rows and ${shown.visibleCols} of ${shown.cols} columns: drag the plot, scroll over it or use the arrow keys to see the rest; exports hold the whole matrix.`
        : "";
    }
    // A long matrix: an overview of all of it and a word search (not while a player grows it).
    const nav = this.c[`nav-${which}`];
    if (this.playing && nav) nav.hidden = true;
    else attachNavigator(nav, gd, view);
    if (this.c[`table-${which}`]) this.c[`table-${which}`].hidden = false;
    this.renderTable(which);
    if (which === "main" && this.onRowClick && !gd.dataset.clicks) {
      gd.dataset.clicks = "true";
      gd.on("plotly_click", (event) => {
        const point = event.points && event.points[0];
        if (point && !this.state.merge && !this.playing) this.onRowClick(point.y, this);
      });
    }
  }

  /** (Re)draw the head grid's thumbnails, then tell the panels that decorate them (`onGrid`):
   *  on demand the grid is redrawn as each layer's heads arrive, after the view's `onView`. */
  renderGrid() {
    renderHeadGrid(this);
    for (const panel of this.panels) panel.onGrid?.(this);
  }

  /** The model's card's numbers for the heads of the kind shown (see head-facts.js). */
  headFacts() {
    const { layers, heads } = shapeOf(this.response, this.state.kind);
    return headFacts(cardOf(this.response.model), this.state.kind, layers, heads);
  }

  /** Open one thumbnail large. */
  open(layer, head) {
    const done = this.update(head === "avg" ? { layer, avg: true } : { layer, head, avg: false });
    this.c["plot-main"].closest(".plot-card").scrollIntoView({ behavior: "smooth", block: "nearest" });
    return done;
  }
}
