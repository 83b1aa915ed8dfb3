// A translation played as it is made, the part every player shares (the Learn tour's and the
// Translate explorer's): reads POST /api/translate/stream (server-sent events through fetch and a
// ReadableStream), buffers the `step` events as they arrive, and walks through them with play,
// pause, step and speed controls. What a step looks like is the page's: `onDraw(count)` draws the
// first `count` steps. Also the pure helpers the pages build their figures from.
import { describeDetail } from "./api.js";
import { el, setChildren } from "./dom.js";

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

/** The hypothesis in the lead after `steps` (greedy: the one there is), followed back through the
 * parents: per step t, {token, logprob, row} where `row` is the step's row that wrote it (the row
 * whose attention and `top` belong to it). Beam: the live candidate with the best score, or, once
 * none is live, the finished one with the best ranking. */
export function leadingPath(steps) {
  if (!steps.length) return [];
  const last = steps[steps.length - 1];
  const live = last.chosen.filter(Boolean);
  const candidate = live.length
    ? live.reduce((a, b) => (b.score > a.score ? b : a))
    : last.finished.reduce((a, b) => ((b.ranking ?? b.score) > (a.ranking ?? a.score) ? b : a));
  const path = [{ token: candidate.token, logprob: candidate.logprob, row: candidate.parent }];
  let row = candidate.parent;
  for (let t = steps.length - 2; t >= 0; t--) {
    const c = steps[t].chosen[row];
    path.push({ token: c.token, logprob: c.logprob, row: c.parent });
    row = c.parent;
  }
  return path.reverse();
}

/** An answer-shaped object of the translation so far (the leading hypothesis), so the pages'
 * heatmap code draws it as it draws an answer: `target_tokens` and per kind `[layer][head][query][key]`
 * (decoder self-attention rows padded with zeros to the square; encoder self-attention whole,
 * from step 0). */
export function partialAnswer(steps, source, extra = {}) {
  const path = leadingPath(steps);
  const attention = {};
  const first = steps[0].attention;
  if (first.encoder_self) attention.encoder_self = first.encoder_self;
  for (const kind of ["cross", "decoder_self"]) {
    if (!first[kind]) continue;
    const rows = path.map((p, t) => steps[t].attention[kind][p.row]); // [query][layer][head][key]
    const width = kind === "cross" ? source.length : path.length;
    attention[kind] = rows[0].map((heads, l) => heads.map((_, h) => rows.map((r) => {
      const row = r[l][h];
      return row.length < width ? [...row, ...new Array(width - row.length).fill(0)] : row;
    })));
  }
  return {
    ...extra,
    source_tokens: source,
    target_tokens: path.map((p) => p.token),
    target_logprobs: path.map((p) => p.logprob),
    attention,
  };
}

/** The likeliest next tokens of one row at a step, as bars: the choice the decoder made, in numbers. */
export function topBars(top) {
  return top.map((t) =>
    el("div", { class: "top-row" }, el("span", { class: "top-token" }, t.token),
      el("span", { class: "top-bar-track" }, el("span", { class: "top-bar", style: { width: `${Math.round(100 * t.p)}%` } })),
      el("span", { class: "top-p" }, t.p.toFixed(3))));
}

const SPEEDS = [["900", "slow"], ["400", "normal"], ["120", "fast"]];

export class StreamPlayer {
  /** box: the element to fill. onDraw(count, player): draw the first `count` steps (may be async);
   * onAnswer(answer, player): the final answer came and every step is drawn; extra: elements for
   * the controls row; label: what the Play button says; beforePlay(): called first by Play and
   * Step (a page loads the request on screen there), false to do nothing. */
  constructor(box, { onDraw, onAnswer = () => {}, beforePlay = () => true, extra = [], label = "▶ Play", idle = "Press Play to stream the translation." }) {
    this.box = box;
    this.onDraw = onDraw;
    this.onAnswer = onAnswer;
    this.beforePlay = beforePlay;
    this.idle = idle;
    this.steps = [];
    this.shown = 0;
    this.done = false;
    this.timer = null;
    this.source = [];
    this.generation = 0;
    this.status = el("p", { class: "player-status", "aria-live": "polite" }, idle);
    this.play = el("button", { type: "button", class: "btn small primary", dataset: { role: "player-play" }, onclick: () => this.start() }, label);
    this.pauseButton = el("button", { type: "button", class: "btn small", dataset: { role: "player-pause" }, onclick: () => this.pause(), disabled: true }, "❚❚ Pause");
    this.stepButton = el("button", { type: "button", class: "btn small", dataset: { role: "player-step" }, onclick: () => this.advance() }, "Step ›");
    this.speed = el("select", { "aria-label": "Speed", dataset: { role: "player-speed" }, onchange: () => this.timer && this.resume() },
      SPEEDS.map(([value, name]) => el("option", { value, selected: name === "normal" }, name)));
    this.controls = el("div", { class: "player-controls", role: "group", "aria-label": "Player" }, this.play, this.pauseButton, this.stepButton, this.speed, extra);
  }

  /** A new request to play (the stream starts on the first Play or Step). */
  load(body) {
    this.pause();
    this.generation += 1;
    this.body = body;
    this.steps = [];
    this.shown = 0;
    this.done = false;
    this.fetching = null;
    this.answer = null;
    this.adopted = false;
    this.status.textContent = this.idle;
    delete this.box.dataset.rows;
    delete this.box.dataset.state;
  }

  fetchStream() {
    if (!this.fetching) this.fetching = this.read().catch((err) => this.fail(err.message));
    return this.fetching;
  }

  async read() {
    const generation = this.generation;
    this.box.dataset.state = "streaming";
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
        reader.cancel(); // a newer request: hanging up stops this decode on the server
        return;
      }
      const [events, rest] = parseEvents(buffer + value);
      buffer = rest;
      for (const event of events) this.take(event);
    }
    if (generation !== this.generation) return;
    this.done = true;
    if (this.box.dataset.state === "streaming") this.box.dataset.state = "received";
    this.finishIfShown();
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

  /** Whether `count` steps is all of them (the stream has ended). */
  isLast(count) {
    return this.done && count === this.steps.length;
  }

  start() {
    if (this.beforePlay() === false) return;
    this.fetchStream();
    if (this.shown >= this.steps.length && this.done) {
      this.shown = 0; // replay, handing the answer over again at the end
      this.adopted = false;
      this.box.dataset.state = "received";
    }
    this.resume();
  }

  resume() {
    clearInterval(this.timer);
    this.timer = setInterval(() => this.tick(), Number(this.speed.value));
    this.play.disabled = true;
    this.pauseButton.disabled = false;
    this.box.dataset.playing = "true";
  }

  pause() {
    clearInterval(this.timer);
    this.timer = null;
    this.play.disabled = false;
    this.pauseButton.disabled = true;
    this.box.dataset.playing = "false";
  }

  tick() {
    if (this.drawing) return; // a slow draw: the next tick waits for it
    if (this.shown < this.steps.length) this.draw(this.shown + 1);
    else if (this.done) this.pause();
  }

  /** One step forward (waiting for it to arrive when it has not yet). */
  async advance() {
    this.pause();
    if (this.beforePlay() === false) return;
    this.fetchStream();
    const generation = this.generation;
    while (this.shown >= this.steps.length && !this.done && this.box.dataset.state !== "error") {
      await new Promise((resolve) => setTimeout(resolve, 30));
      if (generation !== this.generation) return;
    }
    if (this.shown < this.steps.length) await this.draw(this.shown + 1);
  }

  async draw(count) {
    this.shown = count;
    this.drawing = true;
    this.box.dataset.drawing = "true"; // a step is being drawn (pages and tests wait for it)
    try {
      await this.onDraw(count, this);
      this.box.dataset.rows = String(count);
    } catch (err) {
      this.fail(`Step ${count} could not be drawn: ${err.message}`);
      throw err; // still a bug: the page's error handlers (and its tests) hear of it
    } finally {
      this.drawing = false;
      delete this.box.dataset.drawing;
    }
    this.finishIfShown();
  }

  /** Every step drawn and the answer in: hand it over (once per stream). */
  finishIfShown() {
    if (!this.answer || this.adopted || !this.isLast(this.shown) || this.drawing) return;
    this.adopted = true;
    this.pause();
    Promise.resolve(this.onAnswer(this.answer, this)).then(() => {
      this.box.dataset.state = "done";
    });
  }
}
