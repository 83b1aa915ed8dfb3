// A translation played as it is made: reads POST /api/translate/stream (server-sent events) and
// draws the cross-attention heatmap growing one row per decoder step, with play, pause, step
// and speed controls. The events are buffered as they arrive; playback walks through them.
import { describeDetail } from "./api.js";
import { drawBeamTree } from "./beamtree.js";
import { el, setChildren } from "./dom.js";
import { drawHeatmap } from "./heatmap.js";

/** Parse the `event:`/`data:` blocks of a text/event-stream chunk; returns [events, rest]. */
export function parseEvents(buffer) {
  const events = [];
  const blocks = buffer.split("\n\n");
  const rest = blocks.pop();
  for (const block of blocks) {
    const fields = {};
    for (const line of block.split("\n")) {
      const at = line.indexOf(": ");
      if (at > 0) fields[line.slice(0, at)] = line.slice(at + 2);
    }
    if (fields.event && fields.data) events.push({ name: fields.event, data: JSON.parse(fields.data) });
  }
  return [events, rest];
}

/** The beam tree as far as `steps` go: every kept, ended and finished candidate is a node (its
 * parent: the node its parent row held), as in beam.nodes of the final answer. */
export function treeSoFar(steps) {
  const nodes = [{ id: 0, parent: null, step: 0, token: "<s>", logprob: 0, score: 0, finished: false }];
  let rowNodes = [0];
  for (const s of steps) {
    const add = (c, finished) => nodes.push({ id: c.node, parent: rowNodes[c.parent], step: s.step + 1, token: c.token, logprob: c.logprob, score: c.score, finished });
    s.chosen.forEach((c) => c && add(c, false));
    s.ended.forEach((c) => add(c, false));
    s.finished.forEach((c) => add(c, true));
    rowNodes = s.chosen.map((c) => (c ? c.node : -1));
  }
  nodes.sort((a, b) => a.id - b.id);
  return { nodes, best: [], hypotheses: [] };
}

/** The mean over the heads of the last layer of one step's row: [layer][head][key] -> [key]. */
function lastLayerMean(layers) {
  const heads = layers[layers.length - 1];
  return heads[0].map((_, k) => heads.reduce((sum, h) => sum + h[k], 0) / heads.length);
}

export class Player {
  constructor(box) {
    this.box = box;
    this.steps = [];
    this.shown = 0;
    this.done = false;
    this.timer = null;
    this.source = [];
    this.status = el("p", { class: "player-status", "aria-live": "polite" }, "Press Play to stream the translation.");
    this.play = el("button", { type: "button", onclick: () => this.start() }, "▶ Play");
    this.pauseButton = el("button", { type: "button", onclick: () => this.pause(), disabled: true }, "❚❚ Pause");
    this.stepButton = el("button", { type: "button", onclick: () => this.advance() }, "Step ›");
    this.speed = el(
      "select",
      { "aria-label": "Speed", onchange: () => this.timer && this.resume() },
      el("option", { value: "900" }, "slow"),
      el("option", { value: "400", selected: true }, "normal"),
      el("option", { value: "120" }, "fast"),
    );
    this.mode = el(
      "select",
      { "aria-label": "What to play", onchange: () => this.load({ ...this.body, beam_size: Number(this.mode.value), return_beam: this.mode.value !== "1" }) },
      el("option", { value: "1" }, "greedy: attention rows"),
      el("option", { value: "3" }, "beam 3: the tree"),
    );
    this.top = el("div", { class: "player-top", "aria-label": "The likeliest next tokens at this step" });
    this.plot = el("div", { class: "player-plot", dataset: { role: "player-plot" } });
    setChildren(box, el("div", { class: "player-controls" }, this.play, this.pauseButton, this.stepButton, this.speed, this.mode), this.status, this.top, this.plot);
  }

  /** A new request to play (the stream starts on the first Play or Step). */
  load(body) {
    this.pause();
    this.generation = (this.generation || 0) + 1;
    this.body = body;
    this.steps = [];
    this.shown = 0;
    this.done = false;
    this.fetching = null;
    this.status.textContent = "Press Play to stream the translation.";
    this.plot.replaceChildren();
    this.top.replaceChildren();
    this.answer = null;
    delete this.box.dataset.rows;
  }

  fetchStream() {
    if (!this.fetching) this.fetching = this.read().catch((err) => this.fail(err.message));
    return this.fetching;
  }

  async read() {
    const generation = this.generation;
    const response = await fetch("/api/translate/stream", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(this.body),
    });
    if (!response.ok) {
      const text = await response.text();
      let detail = text;
      try { detail = describeDetail(JSON.parse(text).detail) || text; } catch { /* not JSON */ }
      throw new Error(`Error ${response.status}: ${detail}`);
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (generation !== this.generation) {
        reader.cancel(); // a newer sentence: hanging up stops this decode on the server
        return;
      }
      const [events, rest] = parseEvents(buffer + value);
      buffer = rest;
      for (const event of events) this.take(event);
    }
    this.done = true;
  }

  take(event) {
    if (event.name === "step") {
      if (event.data.source_tokens) this.source = event.data.source_tokens;
      this.steps.push(event.data);
    } else if (event.name === "answer") {
      this.answer = event.data;
    } else if (event.name === "error") {
      this.fail(`Error ${event.data.status}: ${event.data.detail}`);
    }
  }

  fail(message) {
    this.pause();
    this.status.textContent = message;
    this.box.dataset.state = "error";
  }

  start() {
    this.fetchStream();
    if (this.shown >= this.steps.length && this.done) this.shown = 0; // replay
    this.resume();
  }

  resume() {
    clearInterval(this.timer);
    this.timer = setInterval(() => this.tick(), Number(this.speed.value));
    this.play.disabled = true;
    this.pauseButton.disabled = false;
  }

  pause() {
    clearInterval(this.timer);
    this.timer = null;
    this.play.disabled = false;
    this.pauseButton.disabled = true;
  }

  tick() {
    if (this.shown < this.steps.length) this.draw(this.shown + 1);
    else if (this.done) this.pause();
  }

  /** One step forward (waiting for it to arrive when it has not yet). */
  async advance() {
    this.pause();
    this.fetchStream();
    const deadline = Date.now() + 15000;
    while (this.shown >= this.steps.length && !this.done && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 30));
    }
    if (this.shown < this.steps.length) await this.draw(this.shown + 1);
  }

  /** The likeliest next tokens of row 0 at a step: the choice the decoder made, in numbers. */
  drawTop(step) {
    setChildren(this.top, step.top[0].map((t) =>
      el("div", { class: "top-row" }, el("span", { class: "top-token" }, t.token),
        el("span", { class: "top-bar", style: { width: `${Math.round(100 * t.p)}%` } }), el("span", { class: "top-p" }, t.p.toFixed(3)))));
  }

  drawTree(count) {
    const steps = this.steps.slice(0, count);
    const finished = count === this.steps.length && this.done && this.answer?.beam;
    const kept = steps[count - 1].chosen.filter(Boolean).length;
    const ended = steps.reduce((n, s) => n + s.finished.length, 0);
    this.status.textContent = `Step ${count}: ${kept} hypotheses kept, ${ended} finished so far${finished ? ` · done: ${this.answer.translation}` : ""}`;
    this.box.dataset.rows = String(count);
    this.drawTop(steps[count - 1]);
    const scroll = el("div", { class: "beam-scroll", tabindex: "0", role: "region", "aria-label": "Beam search tree so far" });
    this.plot.replaceChildren(scroll);
    drawBeamTree(scroll, finished ? this.answer.beam : treeSoFar(steps), { title: "beam search tree so far" });
    scroll.scrollLeft = scroll.scrollWidth;
  }

  async draw(count) {
    this.shown = count;
    if (this.steps[0].beam) return this.drawTree(count);
    const steps = this.steps.slice(0, count);
    const tokens = steps.map((s) => s.chosen[0].token);
    const last = steps[count - 1];
    const best = last.top[0][0];
    const finished = count === this.steps.length && this.done;
    this.status.textContent = `Step ${count}: wrote «${last.chosen[0].token}» (p = ${Math.exp(last.chosen[0].logprob).toFixed(3)}; the likeliest was «${best.token}», ${best.p.toFixed(3)})${finished && this.answer ? ` · done: ${this.answer.translation}` : ""}`;
    this.box.dataset.rows = String(count);
    this.drawTop(last);
    if (!last.attention.cross) return;
    const z = steps.map((s) => lastLayerMean(s.attention.cross[0]));
    const view = { z, rowLabels: tokens, colLabels: this.source, rowPieces: tokens, colPieces: this.source, rowTitle: "target", colTitle: "source" };
    const shown = await drawHeatmap(this.plot, view, { where: "last layer, mean of heads", boxWidth: Math.min(this.box.clientWidth || 360, 760), boxHeight: 420, xTitle: "source", yTitle: "written so far" });
    if (shown.visibleRows < count && window.Plotly) {
      // Keep the newest row in sight: the window follows the translation as it grows.
      await window.Plotly.relayout(this.plot, { "yaxis.range": [count - 0.5, count - shown.visibleRows - 0.5] });
    }
  }
}
