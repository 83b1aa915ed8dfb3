// The Translate explorer's player: the translation on the form streamed from
// POST /api/translate/stream and played in the explorer as it is made: the large heatmap growing
// one row per decoder step for the kind, layer and head chosen, the beam tree growing (beam > 1),
// and the anatomy of the current step. At the end the page shows the stream's final answer,
// which is what /api/translate gives. The streaming and the controls are player.js's. On demand
// (the page's request), the explorer's partial answer fetches the head it shows into each step
// drawn (its `fetchView`, which attention-client.js's ensureView calls).
import { drawBeamTree } from "./beamtree.js";
import { el, setChildren } from "./dom.js";
import { StreamPlayer } from "./player.js";
import { leadingPath, onDemandSteps, partialAnswer, treeSoFar } from "./stream-events.js";
import { renderStepAnatomy, stepAnatomyBox } from "./step-anatomy.js";

export class ExplorerPlayer {
  /** box: the player's element; treeHost: where the beam tree grows; stepHost: where the current
   * step's anatomy goes; explorer: the
   * page's Explorer. request(): {body, model} to play, or null (the page says why); onStart();
   * onProgress(partial, model): the translation so far; onAnswer(answer, body, model). */
  constructor(box, treeHost, stepHost, explorer, { request, onStart = () => {}, onProgress = () => {}, onAnswer }) {
    this.explorer = explorer;
    this.request = request;
    this.onStart = onStart;
    this.onProgress = onProgress;
    this.onAnswerHook = onAnswer;
    this.core = new StreamPlayer(box, {
      onDraw: (count) => this.draw(count),
      onAnswer: (answer) => this.finish(answer),
      beforePlay: () => this.prepare(),
      label: "▶ Play as it is made",
      idle: "",
    });
    this.tree = el("div", { class: "player-tree", dataset: { role: "player-tree" }, hidden: true });
    this.anatomy = stepAnatomyBox();
    setChildren(box, this.core.controls, this.core.status);
    treeHost.replaceChildren(this.tree);
    stepHost.replaceChildren(this.anatomy);
  }

  /** Before Play or Step: load the form's request unless it is the one loaded (then go on, or
   * replay it from the start). */
  prepare() {
    const asked = this.request();
    if (!asked) return false;
    if (JSON.stringify(asked.body) !== JSON.stringify(this.core.body)) {
      this.reset();
      this.core.load(asked.body);
      this.model = asked.model;
    }
    return true;
  }

  /** Forget what was played (a new translation is on the page). */
  reset() {
    this.core.load(null);
    this.tree.hidden = true;
    this.tree.replaceChildren();
    this.anatomy.hidden = true;
  }

  /** Whether the explorer shows a translation being played (not an answer). */
  get playing() {
    return this.explorer.playing === true;
  }

  async draw(count) {
    const { steps, source, answer } = this.core;
    const shown = steps.slice(0, count);
    const beam = shown[0].beam;
    const partial = this.partialAt(count, shown, source);
    if (count === 1) this.onStart();
    this.onProgress(partial, this.model);
    this.status(shown, count);
    if (beam) this.drawTree(shown, count);
    this.partial = partial;
    await this.explorer.showPartial(partial, this.model);
    this.revealHeatmap();
    this.followNewestRow(count);
    await this.renderStep(count, answer);
  }

  /** The answer-shaped translation of the first `count` steps. On demand it holds the heads
   * fetched so far, and a `fetchView(kind, layer, head)` that fetches one into the steps and
   * fills it in (the explorer calls it before drawing a view, see attention-client.js). */
  partialAt(count, shown, source) {
    const extra = { model: this.model.id, score: this.model.score ?? null };
    const partial = partialAnswer(shown, source, extra);
    if (!onDemandSteps(shown)) return partial;
    const fetchView = async (kind, layer, head) => {
      await this.core.fetchRows(count, kind, layer, head);
      const filled = partialAnswer(shown, source, extra);
      partial.attention = filled.attention;
      partial.averages = filled.averages;
    };
    return Object.defineProperty(partial, "fetchView", { value: fetchView, enumerable: false });
  }

  status(shown, count) {
    const total = this.core.done ? ` of ${this.core.steps.length}` : "";
    const last = shown[count - 1];
    const beam = last.beam
      ? ` · ${last.chosen.filter(Boolean).length} hypotheses live, ${shown.reduce((n, s) => n + s.finished.length, 0)} finished; the heatmap follows the one in the lead`
      : "";
    this.core.status.textContent = `Playing step ${count}${total}${beam}.`;
  }

  drawTree(shown, count) {
    const { answer } = this.core;
    const final = this.core.isLast(count) && answer?.beam;
    const box = el("div", { class: "player-tree-box", role: "region", "aria-label": "Beam search tree so far (scrolls inside its box)" });
    this.tree.hidden = false;
    this.tree.replaceChildren(box);
    drawBeamTree(box, final ? answer.beam : leadingTree(treeSoFar(shown), shown.at(-1)), { title: final ? "beam search tree" : "beam search tree so far" });
    const scroll = box.querySelector(".beam-scroll");
    scroll.tabIndex = 0;
    scroll.scrollLeft = scroll.scrollWidth; // the newest step
  }

  /** While it plays, keep the heatmap on screen: it grows a row a step, and the tree and the
   * step's anatomy are below it. The page scrolls only as far as it must (the heatmap's card to
   * the top of the window, below the sticky header, when it does not fit otherwise). */
  revealHeatmap() {
    const card = this.explorer.c["plot-main"]?.closest(".plot-card");
    if (!card || card.hidden) return;
    const box = card.getBoundingClientRect();
    const header = document.querySelector(".topbar")?.getBoundingClientRect().bottom ?? 0;
    if (box.top < header || box.height > window.innerHeight - header) card.scrollIntoView({ block: "start" });
    else if (box.bottom > window.innerHeight) window.scrollBy(0, box.bottom - window.innerHeight + 8);
  }

  /** Keep the newest row in sight when the heatmap shows a window of a long translation. */
  followNewestRow(count) {
    const drawn = this.explorer.drawn?.main;
    const gd = this.explorer.c["plot-main"];
    if (!drawn || drawn.visibleRows >= count || !window.Plotly || gd.hidden) return;
    if (["cross", "decoder_self"].includes(this.explorer.state.kind)) {
      window.Plotly.relayout(gd, { "yaxis.range": [count - 0.5, count - drawn.visibleRows - 0.5] });
    }
  }

  /** The anatomy of step `count` for the kind, layer and head the explorer shows (on demand,
   * the row it shows fetched first: the step's own kind, one head). */
  async renderStep(count, answer = this.core.answer) {
    const partial = this.partial;
    if (!partial || !count) return;
    const kind = this.explorer.state.kind || "cross"; // none: a model without attention, top-k alone
    const layer = this.explorer.state.layer ?? 0;
    const head = this.explorer.head();
    if (partial.fetchView && partial.attention[kind]) {
      const rowKind = kind === "encoder_self" ? (partial.attention.cross ? "cross" : "decoder_self") : kind;
      const single = head === "avg" ? 0 : head;
      [, answer] = await Promise.all([partial.fetchView(rowKind, layer, single), answer && this.core.answerWith(rowKind, layer, single)]);
      if (partial !== this.partial) return; // a newer step is drawn meanwhile: it renders its own
    }
    const path = leadingPath(this.core.steps.slice(0, count));
    renderStepAnatomy(this.anatomy, partial, count, {
      top: this.core.steps[count - 1].top[path[count - 1].row],
      total: this.core.done ? this.core.steps.length : null,
      beam: this.core.steps[0].beam,
      kind,
      layer,
      head,
      answer,
      sourceLang: this.model.source_lang,
      targetLang: this.model.target_lang,
    });
  }

  /** The view changed (kind, layer, head): the step's anatomy follows it. */
  refresh() {
    if (this.core.shown && !this.core.drawing) this.renderStep(this.core.shown); // a draw renders its own
  }

  async finish(answer) {
    const count = this.core.shown;
    if (this.core.steps[0].beam) this.drawTree(this.core.steps, count);
    await this.onAnswerHook(answer, this.core.body, this.model);
    await this.renderStep(count, answer);
    this.core.status.textContent = `Done: ${count} steps. The explorer now shows the final answer, the same as Translate gives.`;
  }
}

/** The tree so far with its leading hypothesis marked as the chosen path (`best`, drawn solid and
 * bold) and the hypotheses still in the beam `live` (drawn plain; the branches that fell out of the
 * beam faded): the live candidate with the best score, or once none is live the finished one
 * ranked best, followed back to the root. `last`: the last step streamed. */
export function leadingTree(tree, last) {
  const byId = new Map(tree.nodes.map((n) => [n.id, n]));
  const live = last.chosen.filter(Boolean);
  const lead = live.length
    ? live.reduce((a, b) => (b.score > a.score ? b : a))
    : last.finished.reduce((a, b) => ((b.ranking ?? b.score) > (a.ranking ?? a.score) ? b : a), last.finished[0]);
  const best = [];
  for (let node = lead && byId.get(lead.node); node; node = node.parent === null ? null : byId.get(node.parent)) best.push(node.id);
  return { ...tree, best: best.reverse(), live: live.map((c) => c.node) };
}
