// A translation played as it is made, the controller every player shares (the Learn tour's and
// the Translate explorer's): reads POST /api/translate/stream through api.js's event stream,
// buffers the `step` events as they arrive, and walks through them with play, pause, step and
// speed controls. What a step looks like is the page's: `onDraw(count)` draws the first `count`
// steps. The pure transforms of the events are stream-events.js's (re-exported here). The players
// ask for `"attention": "on_demand"`: the step events carry no rows, and `fetchRows` fetches the
// one head (or layer average) a page shows, a step's rows at a time, kept on the step.
import { eventStream } from "./api.js";
import { ensureView, isOnDemand, withPlaceholders } from "./attention-client.js";
import { el } from "./dom.js";
import { onDemandSteps } from "./stream-events.js";

export { leadingPath, parseEvents, partialAnswer, treeSoFar } from "./stream-events.js";

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
    const stale = () => generation !== this.generation; // a newer request: hang up
    for await (const event of eventStream("/api/translate/stream", this.body, { stale })) this.take(event);
    if (generation !== this.generation) return;
    this.done = true;
    if (this.box.dataset.state === "streaming") this.box.dataset.state = "received";
    this.finishIfShown();
  }

  take(event) {
    if (event.name === "step") {
      if (event.data.source_tokens) this.source = event.data.source_tokens;
      this.steps.push(withPlaceholders(event.data)); // on demand: rows fetched into it (fetchRows)
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

  /** On demand, fetch what drawing the first `count` steps of (kind, layer, head or "avg") needs:
   * each step's rows of that head ([row][key], one per live row), or its layer averages; for
   * encoder self-attention, step 0's whole matrix. Steps already holding it cost nothing; an
   * inline stream costs nothing at all. */
  fetchRows(count, kind, layer, head) {
    if (!onDemandSteps(this.steps)) return Promise.resolve();
    const steps = kind === "encoder_self" ? this.steps.slice(0, 1) : this.steps.slice(0, count);
    return Promise.all(steps.map((step) => ensureView(step, kind, layer, head)));
  }

  /** The final answer, once in, with one head (kind, layer, head index) there to read: a step's
   * anatomy shows the answer's raw scores beside that head's weights. On demand it is fetched
   * (once); null before the answer. */
  async answerWith(kind, layer, head) {
    const answer = this.answer;
    if (answer && isOnDemand(answer)) await ensureView(withPlaceholders(answer), kind, layer, head);
    return answer;
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
