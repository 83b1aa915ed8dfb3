// The Test sets page: start a job (/api/testsets/jobs), follow its progress, cancel it, then show
// its per-sentence table, sortable by any column and filtered by a word; each row opens in Translate.
import { getJSON, postJSON, request } from "./api.js";
import { el, setChildren, showError } from "./dom.js";

const COLUMNS = [
  ["index", "#"], ["source", "source"], ["output", "output"], ["bleu", "BLEU"], ["chrf", "chrF"],
  ["source_words", "src words"], ["output_words", "out words"], ["mean_logprob", "mean log-p"],
  ["coverage", "coverage"], ["entropy", "entropy"],
];
const $ = (id) => document.getElementById(id);
const state = { rows: [], sort: "index", desc: false, job: null, model: null };

const show = (v) => (v === null || v === undefined ? "–" : typeof v === "number" && !Number.isInteger(v) ? v.toFixed(2) : String(v));

function explorerLink(row) {
  const params = new URLSearchParams({ model: state.model, text: row.source, beam: "1" });
  return `/?${params}`;
}

function render() {
  const word = $("ts-filter").value.trim().toLowerCase();
  const rows = state.rows.filter((r) => !word || [r.source, r.output, r.reference || ""].some((t) => t.toLowerCase().includes(word)));
  const key = state.sort;
  rows.sort((a, b) => {
    const x = a[key], y = b[key];
    const order = x === y ? a.index - b.index : x === null ? 1 : y === null ? -1 : x < y ? -1 : 1;
    return state.desc ? -order : order;
  });
  const head = el("tr", {}, ...COLUMNS.map(([k, label]) => el("th", {},
    el("button", { type: "button", class: "sort", dataset: { key: k }, "aria-sort": k === key ? (state.desc ? "descending" : "ascending") : "none" },
      `${label}${k === key ? (state.desc ? " ▼" : " ▲") : ""}`))));
  setChildren($("ts-table").querySelector("thead"), head);
  setChildren($("ts-table").querySelector("tbody"), ...rows.map((r) => el("tr", { dataset: { index: String(r.index) } },
    ...COLUMNS.map(([k]) => (k === "source"
      ? el("td", {}, el("a", { href: explorerLink(r), title: "open in the explorer" }, r.source))
      : el("td", { dataset: { col: k }, title: k === "output" && r.reference ? `reference: ${r.reference}` : "" }, show(r[k])))))));
  const scored = rows.filter((r) => typeof r.bleu === "number");
  const mean = (k) => (scored.length ? scored.reduce((s, r) => s + r[k], 0) / scored.length : null);
  $("ts-summary").textContent = `${rows.length} of ${state.rows.length} sentences`
    + (scored.length ? ` · mean sentence BLEU ${show(mean("bleu"))}, chrF ${show(mean("chrf"))} (sacreBLEU sentence-level; not corpus BLEU)` : "");
}

async function follow(id) {
  for (;;) {
    const job = await getJSON(`/api/testsets/jobs/${id}`);
    $("ts-progress").max = job.total;
    $("ts-progress").value = job.done;
    $("ts-status").textContent = `${job.name} on ${job.model}: ${job.done} / ${job.total} sentences · ${job.state}`;
    if (job.state === "done") {
      const table = await getJSON(`/api/testsets/jobs/${id}/rows`);
      state.rows = table.rows;
      $("ts-results").hidden = false;
      render();
      break;
    }
    if (["cancelled", "failed"].includes(job.state)) {
      if (job.error) showError($("ts-error"), job.error);
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
  $("ts-cancel").hidden = true;
  $("ts-run").disabled = false;
  sessionStorage.removeItem("attnscope-testset-job");
}

async function run(event) {
  event.preventDefault();
  $("ts-error").hidden = true;
  const split = $("ts-split").value;
  const body = { model: $("ts-model").value };
  const limit = parseInt($("ts-limit").value, 10);
  if (limit > 0) body.limit = limit;
  if (split === "upload") {
    body.sources = $("ts-sources").value.split("\n").filter((s) => s.trim());
    const refs = $("ts-references").value.split("\n").filter((s) => s.trim());
    if (refs.length) body.references = refs;
  } else body.split = split;
  try {
    const job = await postJSON("/api/testsets/jobs", body);
    state.model = body.model;
    state.job = job.id;
    sessionStorage.setItem("attnscope-testset-job", JSON.stringify({ id: job.id, model: body.model }));
    $("ts-progress").hidden = false;
    $("ts-cancel").hidden = false;
    $("ts-run").disabled = true;
    await follow(job.id);
  } catch (err) {
    showError($("ts-error"), err.message);
    $("ts-run").disabled = false;
  }
}

async function main() {
  const data = await getJSON("/api/models");
  const models = data.models || [];
  setChildren($("ts-model"), ...models.map((m) => el("option", { value: m.id }, m.id)));
  $("ts-split").addEventListener("change", () => { $("ts-upload").hidden = $("ts-split").value !== "upload"; });
  $("testset-form").addEventListener("submit", run);
  $("ts-cancel").addEventListener("click", () => state.job && request("DELETE", `/api/testsets/jobs/${state.job}`));
  $("ts-filter").addEventListener("input", render);
  $("ts-table").addEventListener("click", (event) => {
    const button = event.target.closest("button.sort");
    if (!button) return;
    state.desc = state.sort === button.dataset.key ? !state.desc : false;
    state.sort = button.dataset.key;
    render();
  });
  const saved = JSON.parse(sessionStorage.getItem("attnscope-testset-job") || "null");
  if (saved) { // a page reload finds its running job again
    state.job = saved.id;
    state.model = saved.model;
    $("ts-progress").hidden = false;
    $("ts-cancel").hidden = false;
    follow(saved.id).catch((err) => showError($("ts-error"), err.message));
  }
  document.body.dataset.ready = "true";
}

main().catch((err) => showError($("ts-error"), err.message));
