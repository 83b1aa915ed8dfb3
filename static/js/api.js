// The one transport of the pages: every request to the server goes through here (JSON requests,
// event streams, pages and probes), and every failure becomes an ApiError with a message a person
// can read. No other module calls `fetch` (tests/test_js_modules.py holds them to it). The
// catalogs the pages take their labels from (explanation methods, head roles) are read here once.
import { parseEvents } from "./stream-events.js";

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

/** FastAPI's `detail`: a string, or a list of {loc, msg} for validation errors. */
export function describeDetail(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail
      .map((item) => {
        if (typeof item === "string") return item;
        const loc = (item.loc || []).filter((part) => part !== "body").join(".");
        return loc ? `${loc}: ${item.msg}` : String(item.msg);
      })
      .join("; ");
  }
  if (detail && typeof detail === "object") return JSON.stringify(detail);
  return "";
}

/** The raw Response of one request (`body`: sent as JSON when given; `cache`: fetch's cache mode);
 *  ApiError(status 0) when the server cannot be reached. */
async function send(method, path, body, { cache } = {}) {
  try {
    return await fetch(path, {
      method,
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      ...(cache ? { cache } : {}),
    });
  } catch (err) {
    throw new ApiError(`Could not reach the server (${err.message}).`, 0);
  }
}

/** The body of a response as JSON, or null when it is empty or not JSON. */
function parsed(text) {
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return null;
  }
}

/** An ApiError for a failed response whose body was `text`. */
function failure(response, text) {
  const detail = describeDetail(parsed(text)?.detail) || text.slice(0, 300) || response.statusText;
  return new ApiError(`Error ${response.status}: ${detail}`, response.status);
}

export async function request(method, path, body, options = {}) {
  const response = await send(method, path, body, options);
  const text = await response.text();
  if (!response.ok) throw failure(response, text);
  const data = parsed(text);
  if (data === null) throw new ApiError("The server sent an empty or non-JSON answer.", response.status);
  return data;
}

export const getJSON = (path, options) => request("GET", path, undefined, options);
export const postJSON = (path, body) => request("POST", path, body);

/** GET `path` as JSON whatever its status (a 503 still says why), or null when the server cannot
 *  be reached or sends no JSON: for probes such as /api/ready. */
export async function probeJSON(path) {
  try {
    const response = await send("GET", path, undefined, { cache: "no-store" });
    return parsed(await response.text());
  } catch {
    return null;
  }
}

/** GET `path` as JSON, or null when it is missing (404) or cannot be read: for optional data. */
export async function optionalJSON(path) {
  try {
    return await getJSON(path);
  } catch {
    return null;
  }
}

/** GET `path` as text (a page), fresh from the server; ApiError on failure. */
export async function getText(path) {
  const response = await send("GET", path, undefined, { cache: "no-store" });
  const text = await response.text();
  if (!response.ok) throw failure(response, text);
  return text;
}

/** POST `body` to an event-stream route and yield its events ({name, data}) as they arrive;
 *  ApiError when the server refuses the request. `stale()` is asked before each chunk: true
 *  hangs up (cancelling the stream stops the work on the server) and ends the iteration. */
export async function* eventStream(path, body, { stale = () => false } = {}) {
  const response = await send("POST", path, body);
  if (!response.ok) throw failure(response, await response.text());
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    if (stale()) {
      reader.cancel();
      return;
    }
    const [events, rest] = parseEvents(buffer + value);
    buffer = rest;
    yield* events;
  }
}

let explainCatalog = null;
let roleCatalog = null;

/** GET /api/explain-methods once per page: the registered explanation methods (name, label,
 *  long_label, help, paper, url, families, fields, draw), in the order the pages list them. */
export function explainMethods() {
  explainCatalog ??= getJSON("/api/explain-methods").then((data) => data.methods || []);
  return explainCatalog;
}

/** GET /api/head-roles once per page: the roles of `attnscope analyze` (name, short, help). */
export function headRoles() {
  roleCatalog ??= getJSON("/api/head-roles").then((data) => data.roles || []);
  return roleCatalog;
}
