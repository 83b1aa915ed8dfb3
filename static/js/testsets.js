// The Test sets page: start a job (/api/testsets/jobs) on one model, or one per model to compare
// two, follow their progress, cancel them, then show the per-sentence table (sortable by any
// column, filtered by a word or a flag; each row opens in Translate), the best head and every
// head's AER where the set has gold alignments, and slices with their corpus metrics. Finished
// jobs of earlier runs are listed under "Earlier results".
import { getJSON, postJSON, request } from "./api.js";
import { el, setChildren, showError } from "./dom.js";

const SINGLE = [
  ["index", "#"], ["source", "source"], ["output", "output"], ["bleu", "BLEU"], ["chrf", "chrF"], ["aer", "AER"],
  ["flags", "flags"], ["source_words", "src words"], ["output_words", "out words"], ["mean_logprob", "mean log-p"],
  ["coverage", "coverage"], ["entropy", "entropy"],
];
const COMPARED = [["bleu", "BLEU"], ["chrf", "chrF"], ["aer", "AER"], ["mean_logprob", "log-p"], ["output_words", "out words"]];
const PAIRED = [
  ["index", "#"], ["source", "source"], ["a_output", "A output"], ["b_output", "B output"],
  ...COMPARED.flatMap(([k, label]) => [[`a_${k}`, `A ${label}`], [`b_${k}`, `B ${label}`], [`delta_${k}`, `Δ ${label}`]]),
  ["flags", "flags (A | B)"],
];
const SAVED = "attnscope-testset-job";
const $ = (id) => document.getElementById(id);
const state = { rows: [], sort: "index", desc: false, jobs: [], models: [], tables: [] };

const show = (v) => (v === null || v === undefined ? "–" : Array.isArray(v) ? v.join(" ") || "–"
  : typeof v === "number" && !Number.isInteger(v) ? v.toFixed(2) : String(v));
const sortable = (v) => (Array.isArray(v) ? v.join(",") : v);
const paired = () => state.jobs.length === 2;

function explorerLink(row, model) {
  return `/?${new URLSearchParams({ model, text: row.source, beam: "1" })}`;
}

function visibleRows() {
  const word = $("ts-filter").value.trim().toLowerCase();
  const flag = $("ts-flag").value;
  const texts = (r) => [r.source, r.output, r.a_output, r.b_output, r.reference].filter(Boolean);
  const flagsOf = (r) => (paired() ? [...(r.a_flags || []), ...(r.b_flags || [])] : r.flags || []);
  return state.rows.filter((r) => (!word || texts(r).some((t) => t.toLowerCase().includes(word)))
    && (!flag || (flag === "*" ? flagsOf(r).length > 0 : flagsOf(r).includes(flag))));
}

function cell(r, k) {
  if (k === "source") {
    const links = [el("a", { href: explorerLink(r, state.models[0]), title: `open in the explorer with ${state.models[0]}` }, r.source)];
    if (paired()) links.push(" ", el("a", { href: explorerLink(r, state.models[1]), class: "meta", title: `open with ${state.models[1]}` }, "(B)"));
    return el("td", {}, ...links);
  }
  const value = k === "flags" && paired() ? `${show(r.a_flags)} | ${show(r.b_flags)}` : show(r[k]);
  const title = (k === "output" || k === "a_output") && r.reference ? `reference: ${r.reference}` : "";
  const sign = k.startsWith("delta_") && typeof r[k] === "number" && r[k] !== 0 ? (r[k] > 0 ? "up" : "down") : null;
  return el("td", { dataset: { col: k, ...(sign ? { sign } : {}) }, title }, value);
}

function render() {
  const columns = paired() ? PAIRED : SINGLE;
  const rows = visibleRows();
  const key = state.sort;
  rows.sort((a, b) => {
    const x = sortable(a[key]), y = sortable(b[key]);
    const order = x === y ? a.index - b.index : x === null || x === undefined ? 1 : y === null || y === undefined ? -1 : x < y ? -1 : 1;
    return state.desc ? -order : order;
  });
  const head = el("tr", {}, ...columns.map(([k, label]) => el("th", {},
    el("button", { type: "button", class: "sort", dataset: { key: k }, "aria-sort": k === key ? (state.desc ? "descending" : "ascending") : "none" },
      `${label}${k === key ? (state.desc ? " ▼" : " ▲") : ""}`))));
  setChildren($("ts-table").querySelector("thead"), head);
  setChildren($("ts-table").querySelector("tbody"), ...rows.map((r) => el("tr", { dataset: { index: String(r.index) } },
    ...columns.map(([k]) => cell(r, k)))));
  $("ts-summary").textContent = `${rows.length} of ${state.rows.length} sentences`
    + (paired() ? ` · A = ${state.models[0]}, B = ${state.models[1]}; Δ = B − A` : "");
}

const metricsLine = (m) => `corpus BLEU ${show(m.bleu)}, chrF ${show(m.chrf)}`
  + (m.aer === null ? "" : `, best head's AER ${show(100 * m.aer)} %`) + ` · ${m.flagged} of ${m.sentences} flagged`;

function renderHeads() {
  const best = state.tables[0]?.best_head;
  $("ts-heads-box").hidden = !best;
  const lines = state.tables.map((t, k) => `${paired() ? (k ? "B: " : "A: ") : ""}${metricsLine(t.summary)}`);
  $("ts-corpus").textContent = lines.join(" · ") + " (sacreBLEU corpus scores)";
  if (!best) return;
  $("ts-best").textContent = `Best head${paired() ? " of A" : ""}: layer ${best.layer + 1}, head ${best.head + 1}, chosen on the held-out part `
    + `(every 5th sentence, ${best.heldout_sentences} sentences, AER ${show(100 * best.heldout_aer)} %); `
    + `AER ${show(100 * best.aer)} % on the other ${best.scored_sentences}. Every head's AER (%) on those:`;
  const heads = best.heads[0].length;
  setChildren($("ts-heads"),
    el("thead", {}, el("tr", {}, el("th", {}, "layer"), ...Array.from({ length: heads }, (_, h) => el("th", {}, `H${h + 1}`)))),
    el("tbody", {}, ...best.heads.map((row, layer) => el("tr", {}, el("th", {}, `L${layer + 1}`),
      ...row.map((c, h) => {
        const isBest = layer === best.layer && h === best.head;
        return el("td", { dataset: { best: String(isBest) }, style: isBest ? { fontWeight: "700", background: "var(--accent-soft)" } : null },
          (100 * c.aer).toFixed(1));
      })))));
}

async function renderSlices() {
  const params = new URLSearchParams({ by: $("ts-slice-by").value });
  if (params.get("by") === "word") params.set("word", $("ts-slice-word").value);
  const found = await Promise.all(state.jobs.map((id) => getJSON(`/api/testsets/jobs/${id}/slices?${params}`)));
  const metrics = [["sentences", "sentences"], ["bleu", "BLEU"], ["chrf", "chrF"], ["aer", "AER"], ["flagged", "flagged"]];
  const cols = found.length === 2 ? metrics.flatMap(([k, l]) => [[k, `A ${l}`, 0], [k, `B ${l}`, 1]]) : metrics.map(([k, l]) => [k, l, 0]);
  setChildren($("ts-slices").querySelector("thead"), el("tr", {}, el("th", {}, "slice"), ...cols.map(([, l]) => el("th", {}, l))));
  setChildren($("ts-slices").querySelector("tbody"), ...found[0].slices.map((s, i) => el("tr", {}, el("th", {}, s.name),
    ...cols.map(([k, , j]) => el("td", { dataset: { col: k } }, show(k === "aer" && found[j].slices[i][k] !== null ? 100 * found[j].slices[i][k] : found[j].slices[i][k]))))));
}

async function showJobs(ids, models) {
  state.jobs = ids;
  state.models = models;
  state.tables = await Promise.all(ids.map((id) => getJSON(`/api/testsets/jobs/${id}/rows`)));
  state.rows = ids.length === 2
    ? (await getJSON(`/api/testsets/compare?${new URLSearchParams({ a: ids[0], b: ids[1] })}`)).rows
    : state.tables[0].rows;
  state.sort = "index";
  state.desc = false;
  $("ts-results").hidden = false;
  renderHeads();
  render();
  await renderSlices();
}

async function follow(ids, models) {
  let failed = null;
  for (;;) {
    const jobs = await Promise.all(ids.map((id) => getJSON(`/api/testsets/jobs/${id}`)));
    const done = jobs.reduce((s, j) => s + j.done, 0), total = jobs.reduce((s, j) => s + j.total, 0);
    $("ts-progress").max = total;
    $("ts-progress").value = done;
    $("ts-status").textContent = jobs.map((j) => `${j.name} on ${j.model}${j.on_ray ? " (Ray)" : ""}: ${j.done} / ${j.total} sentences · ${j.state}`).join("; ");
    if (jobs.every((j) => j.state === "done")) break;
    const ended = jobs.find((j) => ["cancelled", "failed"].includes(j.state));
    if (ended && jobs.every((j) => j.state !== "running" && j.state !== "cancelling")) { failed = ended; break; }
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
  $("ts-cancel").hidden = true;
  $("ts-run").disabled = false;
  sessionStorage.removeItem(SAVED);
  if (failed) {
    if (failed.error) showError($("ts-error"), failed.error);
    return;
  }
  await showJobs(ids, models);
  await loadEarlier();
}

function readBody(model) {
  const split = $("ts-split").value;
  const body = { model };
  const limit = parseInt($("ts-limit").value, 10);
  if (limit > 0) body.limit = limit;
  if (split !== "upload") return { ...body, split };
  const lines = (id) => $(id).value.split("\n");
  body.sources = lines("ts-sources").filter((s) => s.trim());
  const refs = lines("ts-references").filter((s) => s.trim());
  if (refs.length) body.references = refs;
  const links = lines("ts-alignments");
  while (links.length && !links[links.length - 1].trim()) links.pop(); // an empty line inside is a pair without links
  if (links.length) body.alignments = links;
  return body;
}

async function run(event) {
  event.preventDefault();
  showError($("ts-error"), "");
  const models = [$("ts-model").value, $("ts-model-b").value].filter(Boolean);
  try {
    const jobs = [];
    for (const model of models) jobs.push(await postJSON("/api/testsets/jobs", readBody(model)));
    const ids = jobs.map((j) => j.id);
    sessionStorage.setItem(SAVED, JSON.stringify({ ids, models }));
    $("ts-progress").hidden = false;
    $("ts-cancel").hidden = false;
    $("ts-run").disabled = true;
    state.pending = ids;
    await follow(ids, models);
  } catch (err) {
    showError($("ts-error"), err.message);
    $("ts-run").disabled = false;
  }
}

async function loadEarlier() { // long option texts: the select stays inside a narrow screen
  Object.assign($("ts-earlier").style, { maxWidth: "100%", width: "100%" });
  Object.assign($("ts-earlier").parentElement.style, { minWidth: "0", maxWidth: "100%" });
  const { jobs } = await getJSON("/api/testsets/jobs");
  const done = jobs.filter((j) => j.state === "done");
  setChildren($("ts-earlier"), el("option", { value: "" }, done.length ? "choose a finished job…" : "—"),
    ...done.map((j) => el("option", { value: j.id, dataset: { model: j.model } },
      `${j.name} · ${j.model} · ${j.total} sentences · ${new Date(j.created * 1000).toLocaleString()}`)));
}

async function main() {
  const data = await getJSON("/api/models");
  const models = data.models || [];
  setChildren($("ts-model"), ...models.map((m) => el("option", { value: m.id }, m.id)));
  setChildren($("ts-model-b"), el("option", { value: "" }, "no second model"), ...models.map((m) => el("option", { value: m.id }, m.id)));
  $("ts-split").addEventListener("change", () => { $("ts-upload").hidden = $("ts-split").value !== "upload"; });
  $("testset-form").addEventListener("submit", run);
  $("ts-cancel").addEventListener("click", () => (state.pending || []).forEach((id) => request("DELETE", `/api/testsets/jobs/${id}`)));
  $("ts-filter").addEventListener("input", render);
  $("ts-flag").addEventListener("change", render);
  $("ts-slice-run").addEventListener("click", () => renderSlices().catch((err) => showError($("ts-error"), err.message)));
  $("ts-earlier").addEventListener("change", () => {
    const option = $("ts-earlier").selectedOptions[0];
    if (option?.value) showJobs([option.value], [option.dataset.model]).catch((err) => showError($("ts-error"), err.message));
  });
  $("ts-table").addEventListener("click", (event) => {
    const button = event.target.closest("button.sort");
    if (!button) return;
    state.desc = state.sort === button.dataset.key ? !state.desc : false;
    state.sort = button.dataset.key;
    render();
  });
  await loadEarlier();
  const saved = JSON.parse(sessionStorage.getItem(SAVED) || "null");
  if (saved?.ids) { // a page reload finds its running jobs again
    state.pending = saved.ids;
    $("ts-progress").hidden = false;
    $("ts-cancel").hidden = false;
    $("ts-run").disabled = true;
    follow(saved.ids, saved.models).catch((err) => { // e.g. 404: the server restarted and lost a running job
      sessionStorage.removeItem(SAVED);
      $("ts-run").disabled = false;
      $("ts-cancel").hidden = true;
      showError($("ts-error"), err.message);
    });
  }
  document.body.dataset.ready = "true";
}

main().catch((err) => showError($("ts-error"), err.message));
