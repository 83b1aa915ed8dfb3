// Attention on demand (docs/api.md): an answer asked with "attention": "on_demand" carries an
// attention_id and each kind's shape instead of the matrices. Here it gets placeholders
// (attention[kind][layer][head] = null, so the shape is known to every view) and the pages
// fetch what they draw: one head (GET /api/attention/{id}/{kind}/{layer}/{head}), a layer's heads
// (for the head view), or each layer's head average (the thumbnails, the coverage). What was
// fetched is kept on the answer itself, so moving back to a head costs nothing; a fetch in flight
// is shared by whoever asks for it meanwhile.
import { getJSON } from "./api.js";

/** Whether `response` holds its attention on the server. */
export function isOnDemand(response) {
  return Boolean(response && response.attention_id);
}

/** Give an on-demand answer its placeholders (and an empty cache); other answers unchanged. */
export function withPlaceholders(response, precision = 6) {
  if (!isOnDemand(response) || response.fetched) return response;
  const attention = {};
  for (const [kind, shape] of Object.entries(response.attention_shapes || {})) {
    attention[kind] = Array.from({ length: shape.layers }, () => new Array(shape.heads).fill(null));
  }
  Object.defineProperty(response, "fetched", { value: { precision, inFlight: new Map(), count: 0 }, enumerable: false });
  response.attention = attention;
  response.averages = {};
  return response;
}

function fetchOnce(response, path) {
  const cache = response.fetched;
  if (!cache.inFlight.has(path)) {
    cache.count += 1;
    const url = `/api/attention/${encodeURIComponent(response.attention_id)}/${path}?precision=${cache.precision}`;
    cache.inFlight.set(path, getJSON(url).catch((err) => {
      cache.inFlight.delete(path); // a failed fetch may be tried again
      throw err;
    }));
  }
  return cache.inFlight.get(path);
}

/** Each layer's head average of `kind` ([layer][query][key]), fetched once. */
export async function ensureAverages(response, kind) {
  if (!isOnDemand(response) || !response.attention[kind] || response.averages[kind]) return;
  response.averages[kind] = await fetchOnce(response, kind);
}

/** Every head of one layer (the head view draws them all). */
export async function ensureLayer(response, kind, layer) {
  if (!isOnDemand(response) || !response.attention[kind]) return;
  const heads = response.attention[kind][layer];
  if (!heads || heads.every((h) => h !== null)) return;
  const got = await fetchOnce(response, `${kind}/${layer}`);
  got.forEach((matrix, head) => { heads[head] = matrix; });
}

/** What a view of (kind, layer, head or "avg") draws: one head, or the layer averages. An
 * answer-shaped object with its own `fetchView` (a player's translation so far, whose rows are
 * each step's: explorer-player.js) fetches through it. */
export async function ensureView(response, kind, layer, head) {
  if (response?.fetchView) return response.fetchView(kind, layer, head);
  if (!isOnDemand(response) || !response.attention[kind]) return;
  if (head === "avg") return ensureAverages(response, kind);
  const heads = response.attention[kind][layer];
  if (!heads || heads[head] !== null) return;
  heads[head] = await fetchOnce(response, `${kind}/${layer}/${head}`);
}

/** Whether (kind, layer, head) can be drawn now without a fetch. */
export function isLoaded(response, kind, layer, head) {
  if (head === "avg") return !isOnDemand(response) || Boolean(response.averages?.[kind]);
  return response.attention[kind]?.[layer]?.[head] != null;
}
