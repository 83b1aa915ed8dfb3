// A translation played as it is made: reads POST /api/translate/stream (server-sent events) and
// draws the cross-attention heatmap growing one row per decoder step, with play, pause, step
// and speed controls. The events are buffered as they arrive; playback walks through them.
import { describeDetail } from "./api.js";
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
    this.plot = el("div", { class: "player-plot", dataset: { role: "player-plot" } });
    setChildren(box, el("div", { class: "player-controls" }, this.play, this.pauseButton, this.stepButton, this.speed), this.status, this.plot);
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

  async draw(count) {
    this.shown = count;
    const steps = this.steps.slice(0, count);
    const tokens = steps.map((s) => s.chosen[0].token);
    const last = steps[count - 1];
    const best = last.top[0][0];
    const finished = count === this.steps.length && this.done;
    this.status.textContent = `Step ${count}: wrote «${last.chosen[0].token}» (p = ${Math.exp(last.chosen[0].logprob).toFixed(3)}; the likeliest was «${best.token}», ${best.p.toFixed(3)})${finished && this.answer ? ` · done: ${this.answer.translation}` : ""}`;
    this.box.dataset.rows = String(count);
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
