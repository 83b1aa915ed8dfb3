// The Learn tour's player (stop 7): a translation streamed from POST /api/translate/stream and
// played as it is made: the cross-attention heatmap growing one row per decoder step (greedy)
// or the beam tree growing (beam 3), and the anatomy of the current step. The streaming, the
// buffering and the controls are player.js's, shared with the Translate explorer. It streams on
// demand: each step's rows of the head shown are fetched as the step is drawn (player.js).
import { drawBeamTree } from "./beamtree.js";
import { el, setChildren } from "./dom.js";
import { drawHeatmap } from "./heatmap.js";
import { StreamPlayer } from "./player.js";
import { leadingPath, partialAnswer, stepKinds, treeSoFar } from "./stream-events.js";
import { renderStepAnatomy, stepAnatomyBox, topBars } from "./step-anatomy.js";

export { parseEvents, treeSoFar } from "./stream-events.js";

/** The matrix drawn: one head, or with "avg" the mean over the layer's heads (on demand, the
 * server's layer average): [layer][head][query][key] -> [query][key]. */
function shownMatrix(partial, layer, head) {
  if (head !== "avg") return partial.attention.cross[layer][head];
  if (partial.averages?.cross) return partial.averages.cross[layer];
  const heads = partial.attention.cross[layer];
  return heads[0].map((row, q) => row.map((_, k) => heads.reduce((sum, h) => sum + h[q][k], 0) / heads.length));
}

export class Player {
  constructor(box) {
    this.box = box;
    this.mode = el(
      "select",
      { "aria-label": "What to play", onchange: () => this.load({ ...this.body, beam_size: Number(this.mode.value), return_beam: this.mode.value !== "1" }) },
      el("option", { value: "1" }, "greedy: attention rows"),
      el("option", { value: "3" }, "beam 3: the tree"),
    );
    // Which head of the last layer the heatmap and the step's anatomy show (filled at step 1).
    this.head = el("select", { "aria-label": "Head", hidden: true, onchange: () => this.core.shown && this.draw(this.core.shown) });
    this.core = new StreamPlayer(box, { onDraw: (count) => this.draw(count), onAnswer: () => this.draw(this.core.shown), extra: [this.mode, this.head] });
    this.top = el("div", { class: "player-top", "aria-label": "The likeliest next tokens at this step" });
    this.plot = el("div", { class: "player-plot", dataset: { role: "player-plot" } });
    this.anatomy = stepAnatomyBox();
    setChildren(box, this.core.controls, this.core.status, this.top, this.plot, this.anatomy);
  }

  /** A new request to play (the stream starts on the first Play or Step); the scores come with
   *  the final answer, for the anatomy of each step. */
  load(body) {
    this.body = { ...body, return_scores: true };
    this.core.load(this.body);
    this.plot.replaceChildren();
    this.top.replaceChildren();
    this.anatomy.hidden = true;
    this.head.hidden = true;
    this.head.replaceChildren();
  }

  /** The head chosen: an index, or "avg" (the mean of the last layer's heads); `heads`: how many. */
  chosenHead(heads) {
    if (heads > 1 && !this.head.options.length) {
      this.head.append(el("option", { value: "avg" }, "mean of heads"), ...Array.from({ length: heads }, (_, h) => el("option", { value: String(h) }, `head ${h + 1}`)));
      this.head.hidden = false;
    }
    return heads > 1 && this.head.value !== "avg" ? Number(this.head.value) : heads > 1 ? "avg" : 0;
  }

  /** The last layer and the head chosen, from the first step's attention (inline
   * [row][layer][head][key], or on demand its shape). */
  shownHead(shown) {
    const shape = shown[0].attention_shapes?.cross;
    const layers = shape ? shape.layers : shown[0].attention.cross[0].length;
    const heads = shape ? shape.heads : shown[0].attention.cross[0][layers - 1].length;
    return { layer: layers - 1, head: this.chosenHead(heads) };
  }

  /** The status line: the step, what it did, and once the answer is in, the translation. */
  status(count) {
    const { steps, answer } = this.core;
    if (!count) return;
    const done = this.core.isLast(count) && answer ? ` · done: ${answer.translation}` : "";
    const last = steps[count - 1];
    if (last.beam) {
      const kept = last.chosen.filter(Boolean).length;
      const ended = steps.slice(0, count).reduce((n, s) => n + s.finished.length, 0);
      this.core.status.textContent = `Step ${count}: ${kept} hypotheses kept, ${ended} finished so far${done}`;
      return;
    }
    const best = last.top[0][0];
    this.core.status.textContent = `Step ${count}: wrote «${last.chosen[0].token}» (p = ${Math.exp(last.chosen[0].logprob).toFixed(3)}; the likeliest was «${best.token}», ${best.p.toFixed(3)})${done}`;
  }

  async draw(count) {
    const { steps, source, answer } = this.core;
    const shown = steps.slice(0, count);
    const path = leadingPath(shown);
    const row = path[count - 1].row;
    this.status(count);
    const cross = stepKinds(shown).includes("cross");
    this.top.hidden = cross; // else the anatomy shows them
    setChildren(this.top, topBars(shown[count - 1].top[row]));
    let partial = null;
    let head = 0;
    let layer = 0;
    if (cross) {
      ({ layer, head } = this.shownHead(shown));
      // on demand: this head's rows (and head 1's, which the anatomy of a mean shows), step by step
      const single = head === "avg" ? 0 : head;
      const [, , final] = await Promise.all([
        this.core.fetchRows(count, "cross", layer, head), this.core.fetchRows(count, "cross", layer, single),
        answer && this.core.answerWith("cross", layer, single), // its raw scores, beside the weights
      ]);
      partial = partialAnswer(shown, source);
      renderStepAnatomy(this.anatomy, partial, count, {
        top: shown[count - 1].top[row], total: this.core.done ? steps.length : null, beam: shown[0].beam, kind: "cross", layer, head, answer: final,
      });
    }
    if (shown[0].beam) return this.drawTree(shown, count);
    if (!cross) return;
    const tokens = path.map((p) => p.token);
    const z = shownMatrix(partial, layer, head);
    const view = { z, rowLabels: tokens, colLabels: source, rowPieces: tokens, colPieces: source, rowTitle: "target", colTitle: "source" };
    const drawn = await drawHeatmap(this.plot, view, { where: `last layer, ${head === "avg" ? "mean of heads" : `head ${head + 1}`}`, boxWidth: Math.min(this.box.clientWidth || 360, 760), boxHeight: 420, xTitle: "source", yTitle: "written so far" });
    if (drawn.visibleRows < count && window.Plotly) {
      // Keep the newest row in sight: the window follows the translation as it grows.
      await window.Plotly.relayout(this.plot, { "yaxis.range": [count - 0.5, count - drawn.visibleRows - 0.5] });
    }
  }

  drawTree(shown, count) {
    const { answer } = this.core;
    const finished = this.core.isLast(count) && answer?.beam;
    const scroll = el("div", { class: "beam-scroll", tabindex: "0", role: "region", "aria-label": "Beam search tree so far" });
    this.plot.replaceChildren(scroll);
    drawBeamTree(scroll, finished ? answer.beam : treeSoFar(shown), { title: "beam search tree so far" });
    scroll.scrollLeft = scroll.scrollWidth;
  }
}
