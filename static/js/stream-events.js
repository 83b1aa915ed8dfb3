// The pure helpers of a streamed translation (POST /api/translate/stream): parsing the
// text/event-stream into events, and turning the `step` events received so far into the beam
// tree, the leading hypothesis and an answer-shaped object the heatmap code draws. No DOM, no
// network: the transport is api.js's, the controller player.js's. An on-demand stream's steps
// carry no rows but an `attention_id` each (docs/api.md): player.js fetches the heads shown into
// each step (attention-client.js's placeholders) and partialAnswer reads what is there.

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

/** Whether the steps hold their rows on the server (an on-demand stream): each has its own
 * `attention_id` and `attention_shapes`, and the rows fetched so far (after attention-client.js's
 * withPlaceholders) in `attention[kind][layer][head]` ([row][key]) and `averages[kind]`. */
export function onDemandSteps(steps) {
  return Boolean(steps.length && steps[0].attention_id);
}

/** The kinds of attention a stream's steps have ("cross", "decoder_self", "encoder_self"). */
export function stepKinds(steps) {
  const first = steps[0] || {};
  return Object.keys(onDemandSteps(steps) ? first.attention_shapes || {} : first.attention || {});
}

const padded = (row, width) => (row.length < width ? [...row, ...new Array(width - row.length).fill(0)] : row);

/** On demand: per kind `[layer][head][query][key]` of the leading path, a head being null until
 * every step on the path has its rows; `averages` likewise (per layer, the mean of its heads). */
function fetchedAttention(steps, path, source) {
  const first = steps[0];
  const attention = {};
  const averages = {};
  if (first.attention_shapes.encoder_self) {
    attention.encoder_self = first.attention.encoder_self;
    if (first.averages?.encoder_self) averages.encoder_self = first.averages.encoder_self;
  }
  for (const kind of ["cross", "decoder_self"]) {
    const shape = first.attention_shapes[kind];
    if (!shape) continue;
    const width = kind === "cross" ? source.length : path.length;
    const gather = (get) => {
      const rows = path.map((p, t) => get(steps[t])?.[p.row]);
      return rows.every(Boolean) ? rows.map((row) => padded(row, width)) : null;
    };
    const layers = Array.from({ length: shape.layers }, (_, l) => l);
    attention[kind] = layers.map((l) => Array.from({ length: shape.heads }, (_, h) => gather((s) => s.attention[kind][l][h])));
    if (first.averages?.[kind]) averages[kind] = layers.map((l) => gather((s) => s.averages[kind]?.[l]));
  }
  return { attention, averages };
}

/** An answer-shaped object of the translation so far (the leading hypothesis), so the pages'
 * heatmap code draws it as it draws an answer: `target_tokens` and per kind `[layer][head][query][key]`
 * (decoder self-attention rows padded with zeros to the square; encoder self-attention whole,
 * from step 0). On demand, only the heads fetched into every step so far are there (see
 * fetchedAttention); the others are null. */
export function partialAnswer(steps, source, extra = {}) {
  const path = leadingPath(steps);
  const answer = { ...extra, source_tokens: source, target_tokens: path.map((p) => p.token), target_logprobs: path.map((p) => p.logprob) };
  if (onDemandSteps(steps)) return { ...answer, ...fetchedAttention(steps, path, source) };
  const attention = {};
  const first = steps[0].attention;
  if (first.encoder_self) attention.encoder_self = first.encoder_self;
  for (const kind of ["cross", "decoder_self"]) {
    if (!first[kind]) continue;
    const rows = path.map((p, t) => steps[t].attention[kind][p.row]); // [query][layer][head][key]
    const width = kind === "cross" ? source.length : path.length;
    attention[kind] = rows[0].map((heads, l) => heads.map((_, h) => rows.map((r) => padded(r[l][h], width))));
  }
  return { ...answer, attention };
}
