// The server's readiness, seen from the page: while the models load (GET /api/ready answers 503
// with {status: "loading", loaded, total}), the header's status is amber and says "loading N of M
// models", and the page waits, polling, instead of showing an empty model list. Once ready, the
// cards the page was rendered with (none, if it was rendered while loading) are fetched again.
import { getText, probeJSON } from "./api.js";

const POLL_MS = 1000;
let readyPromise = null;
let listeners = [];

function badge() {
  return document.getElementById("health");
}

function setBadge(text, state, title = "") {
  const box = badge();
  if (!box) return;
  box.textContent = text;
  box.title = title || "Server status";
  box.classList.remove("ok", "bad", "loading");
  box.classList.add(state);
  box.dataset.state = state;
}

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** One look at /api/ready: the JSON body (also sent with the 503 while loading), or null when the
 *  server cannot be reached or sends no JSON. */
async function readyOnce() {
  const data = await probeJSON("/api/ready");
  return data && typeof data.status === "string" ? data : null;
}

/** The page was rendered while the models loaded: its cards (model cards, rendered into the page
 *  as JSON) are missing, so fetch the page again and take its cards. */
async function refreshCards() {
  const node = document.getElementById("cards-data");
  if (!node) return;
  try {
    const html = await getText(location.pathname);
    const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("cards-data");
    if (fresh) node.textContent = fresh.textContent;
  } catch {
    // the pages still work without the cards: no F1 or BLEU from them
  }
}

async function poll() {
  let sawLoading = false;
  let failures = 0;
  for (;;) {
    const ready = await readyOnce();
    if (ready && ready.status === "ready") {
      if (sawLoading) await refreshCards();
      return { ...ready, waited: sawLoading };
    }
    if (ready && ready.status === "loading") {
      sawLoading = true;
      failures = 0;
      const total = Number.isFinite(ready.total) ? ready.total : null;
      const loaded = Number.isFinite(ready.loaded) ? ready.loaded : ready.models;
      setBadge(
        total === null ? "loading models…" : `loading ${loaded} of ${plural(total, "model")}`,
        "loading",
        "The server is still loading its models; this page waits and fills in on its own.",
      );
      for (const listener of listeners) listener(ready);
    } else if (ready && ready.status === "stopping") {
      setBadge("server stopping", "bad", "The server is shutting down.");
    } else if (++failures >= 3) {
      setBadge("server unreachable", "bad", "No answer from /api/ready; still trying.");
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** Resolves with /api/ready's answer once the models are loaded (at once if they are), with
 *  `waited`: whether the page was opened while they loaded; until then the header shows the
 *  progress. `onProgress(ready)` hears each "loading" answer. */
export function whenReady(onProgress = null) {
  if (onProgress) listeners.push(onProgress);
  readyPromise ??= poll().then((ready) => {
    listeners = [];
    return ready;
  });
  return readyPromise;
}

/** The header's server status: amber while loading, then "ok · cpu · N models" (amber too when
 *  no model loaded: an empty server is not a healthy one to a person who came to translate). */
export async function showHealth() {
  const ready = await whenReady();
  try {
    const health = await probeJSON("/api/health");
    if (!health) throw new Error("no answer from /api/health");
    const n = health.models;
    setBadge(
      `${health.status} · ${health.device} · ${plural(n, "model")}`,
      n > 0 ? "ok" : "loading",
      n > 0 ? "Server status" : `No model loaded (${ready.unavailable} folder${ready.unavailable === 1 ? "" : "s"} failed: see the Models page).`,
    );
  } catch (err) {
    setBadge("server unreachable", "bad", err.message);
  }
}
