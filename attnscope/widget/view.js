// attnscope's notebook views (result.show(), result.to_html()): the explorer's own modules from
// static/js, which Python sends as sources (`modules`), are imported from blob: URLs with their
// relative imports pointed at each other, so the notebook draws with the very code the pages
// run. Plotly.js comes as text from the installed plotly package (offline).
// An anywidget module: render({model, el}); model.get() reads answer, view, modules, plotly,
// and for the step anatomy the score formulas, for the comparison the other answer and labels.

function loadPlotly(source) {
  if (window.Plotly || !source) return;
  const amd = window.define; // classic Notebook's RequireJS would take the UMD bundle as a module
  window.define = undefined;
  try {
    const script = document.createElement("script");
    script.textContent = source;
    document.head.append(script);
  } finally {
    window.define = amd;
  }
}

/** name -> blob: URL of each module, its "./x.js" imports rewritten to the others' URLs. */
function moduleUrls(sources, key) {
  const cache = (window.__attnscopeModules ??= {});
  if (cache[key]) return cache[key];
  const urls = {};
  const make = (name) => {
    if (urls[name]) return urls[name];
    if (!(name in sources)) throw new Error(`attnscope view: module ${name} was not sent`);
    const code = sources[name].replace(
      /((?:from|import)\s*\(?\s*)(["'])\.\/([\w.-]+\.js)\2/g,
      (_, before, quote, dep) => `${before}${quote}${make(dep)}${quote}`,
    );
    urls[name] = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
    return urls[name];
  };
  Object.keys(sources).forEach(make);
  cache[key] = urls;
  return urls;
}

function select(label, options, value, onChange) {
  const box = document.createElement("select");
  box.setAttribute("aria-label", label);
  box.dataset.role = label;
  for (const [v, text] of options) box.append(new Option(text, String(v), false, String(v) === String(value)));
  box.addEventListener("change", () => onChange(box.value));
  const wrap = document.createElement("label");
  wrap.style.marginRight = "1em";
  wrap.append(`${label} `, box);
  return wrap;
}

const range = (n) => Array.from({ length: n }, (_, i) => i);

async function heatmapView(el, answer, m, options) {
  const kinds = m.matrix.kindsOf(answer);
  if (!kinds.length) {
    el.append("This model has no attention (score: none): nothing to draw.");
    return;
  }
  const state = { kind: options.kind ?? kinds[0], layer: options.layer ?? 0, head: options.head ?? 0 };
  const controls = document.createElement("div");
  const plot = document.createElement("div");
  plot.dataset.role = "heatmap";
  el.append(controls, plot);
  const redraw = () => draw().catch((err) => {
    el.dataset.error = err.message;
    console.error(err);
  });
  const draw = async () => {
    const { layers, heads } = m.matrix.shapeOf(answer, state.kind);
    state.layer = Math.min(state.layer, layers - 1);
    if (state.head !== "avg") state.head = Math.min(Number(state.head), heads - 1);
    controls.replaceChildren(
      select("kind", kinds.map((k) => [k, m.matrix.KIND_LABELS[k]]), state.kind, (v) => { state.kind = v; redraw(); }),
      select("layer", range(layers).map((i) => [i, `${i + 1}`]), state.layer, (v) => { state.layer = Number(v); redraw(); }),
      select("head", [...range(heads).map((i) => [i, `${i + 1}`]), ...(heads > 1 ? [["avg", "average"]] : [])], state.head,
        (v) => { state.head = v === "avg" ? v : Number(v); redraw(); }),
    );
    const view = m.matrix.viewOf(answer, state.kind, { layer: state.layer, head: state.head });
    const where = `${m.matrix.KIND_LABELS[state.kind]} · layer ${state.layer + 1} · head ${state.head === "avg" ? "average" : state.head + 1}`;
    plot.dataset.kind = state.kind;
    await m.heatmap.drawHeatmap(plot, view, { where, boxWidth: options.width ?? 820, boxHeight: options.height ?? 640 });
    plot.dataset.drawn = `${state.kind}/${state.layer}/${state.head}`; // what the plot shows now
  };
  await draw();
}

function headsView(el, answer, m, options) {
  const kinds = m.matrix.kindsOf(answer);
  const kind = options.kind ?? kinds[0];
  if (!kind) {
    el.append("This model has no attention (score: none): nothing to draw.");
    return;
  }
  const { layers, heads } = m.matrix.shapeOf(answer, kind);
  const grid = document.createElement("div");
  grid.dataset.role = "head-grid";
  grid.style.cssText = `display:grid;grid-template-columns:max-content repeat(${heads}, 90px);justify-content:start;gap:6px;align-items:center`;
  grid.append(document.createElement("span"), ...range(heads).map((h) => Object.assign(document.createElement("b"), { textContent: `head ${h + 1}` })));
  for (let layer = 0; layer < layers; layer++) {
    grid.append(Object.assign(document.createElement("b"), { textContent: `layer ${layer + 1}` }));
    for (let head = 0; head < heads; head++) {
      const view = m.matrix.viewOf(answer, kind, { layer, head });
      const canvas = document.createElement("canvas");
      canvas.style.cssText = "width:88px;height:88px;image-rendering:pixelated;border:1px solid #cbd5e1";
      canvas.title = `layer ${layer + 1} · head ${head + 1}: ${m.matrix.meanEntropy(view.z).toFixed(2)} bits`;
      m.heatmap.drawThumbnail(canvas, view.z, m.matrix.maxOf(view.z));
      grid.append(canvas);
    }
  }
  el.append(Object.assign(document.createElement("div"), { textContent: `${m.matrix.KIND_LABELS[kind]} attention, every layer × head` }), grid);
}

function beamView(el, answer, m) {
  if (!answer.beam) {
    el.append("No beam tree in this answer: translate with return_beam=True.");
    return;
  }
  const box = document.createElement("div");
  box.dataset.role = "beam-tree";
  box.style.overflow = "auto";
  el.append(box);
  m.beamtree.drawBeamTree(box, answer.beam, { title: answer.translation });
}

/** The player's step anatomy for any step, kind, layer and head of an answer with return_scores. */
function anatomyView(el, answer, m, options) {
  const kinds = m.matrix.kindsOf(answer);
  if (!answer.attention_scores || !kinds.length) {
    el.append("No scores in this answer: translate with return_scores=True (and alternatives=5 for the likeliest tokens).");
    return;
  }
  const steps = answer.target_tokens.length;
  const state = {
    step: Math.min(Math.max(Number(options.step ?? 1), 1), steps),
    kind: options.kind ?? (kinds.includes("cross") ? "cross" : kinds[0]),
    layer: options.layer ?? 0,
    head: options.head ?? 0,
  };
  const controls = document.createElement("div");
  const box = m.stepAnatomy.stepAnatomyBox();
  el.append(controls, box);
  const draw = () => {
    const { layers, heads } = m.matrix.shapeOf(answer, state.kind);
    state.layer = Math.min(state.layer, layers - 1);
    state.head = Math.min(state.head, heads - 1);
    controls.replaceChildren(
      select("step", range(steps).map((i) => [i + 1, `${i + 1}: ${answer.target_tokens[i]}`]), state.step, (v) => { state.step = Number(v); draw(); }),
      select("kind", kinds.map((k) => [k, m.matrix.KIND_LABELS[k]]), state.kind, (v) => { state.kind = v; draw(); }),
      select("layer", range(layers).map((i) => [i, `${i + 1}`]), state.layer, (v) => { state.layer = Number(v); draw(); }),
      select("head", range(heads).map((i) => [i, `${i + 1}`]), state.head, (v) => { state.head = Number(v); draw(); }),
    );
    const top = (answer.alternatives?.[state.step - 1] || []).map((a) => ({ token: a.token, p: Math.exp(a.logprob) }));
    m.stepAnatomy.renderStepAnatomy(box, answer, state.step, {
      top, total: steps, kind: state.kind, layer: state.layer, head: state.head, answer,
    });
    box.dataset.drawn = `${state.step}/${state.kind}/${state.layer}/${state.head}`;
  };
  draw();
}

/** Two answers side by side on one kind, layer and head, and A − B where their tokens agree. */
async function compareView(el, a, b, m, options, labels) {
  const kinds = m.matrix.kindsOf(a).filter((k) => m.matrix.kindsOf(b).includes(k));
  if (!kinds.length) {
    el.append("The two results share no attention kind: nothing to compare.");
    return;
  }
  const state = { kind: options.kind ?? kinds[0], layer: options.layer ?? 0, head: options.head ?? 0 };
  const controls = document.createElement("div");
  const row = document.createElement("div");
  row.style.cssText = "display:flex;flex-wrap:wrap;gap:12px";
  const panel = (role, title) => {
    const box = document.createElement("div");
    const plot = document.createElement("div");
    plot.dataset.role = role;
    box.append(Object.assign(document.createElement("b"), { textContent: title }), plot);
    return { box, plot };
  };
  const sides = [panel("heatmap-a", `A: ${labels.a}`), panel("heatmap-b", `B: ${labels.b}`)];
  const diff = panel("difference", "A − B (red: A attends more, blue: B does)");
  const note = document.createElement("p");
  note.dataset.role = "difference-note";
  row.append(sides[0].box, sides[1].box);
  el.append(controls, row, diff.box, note);
  const width = options.width ?? 420;
  const height = options.height ?? 420;
  const draw = async () => {
    const shapes = [a, b].map((r) => m.matrix.shapeOf(r, state.kind));
    const layers = Math.max(...shapes.map((s) => s.layers));
    const heads = Math.max(...shapes.map((s) => s.heads));
    state.layer = Math.min(state.layer, layers - 1);
    state.head = Math.min(state.head, heads - 1);
    controls.replaceChildren(
      select("kind", kinds.map((k) => [k, m.matrix.KIND_LABELS[k]]), state.kind, (v) => { state.kind = v; redraw(); }),
      select("layer", range(layers).map((i) => [i, `${i + 1}`]), state.layer, (v) => { state.layer = Number(v); redraw(); }),
      select("head", range(heads).map((i) => [i, `${i + 1}`]), state.head, (v) => { state.head = Number(v); redraw(); }),
    );
    const views = [a, b].map((r, i) => {
      const where = { layer: Math.min(state.layer, shapes[i].layers - 1), head: Math.min(state.head, shapes[i].heads - 1) };
      return { view: m.matrix.viewOf(r, state.kind, where), where };
    });
    for (const [i, side] of sides.entries()) {
      const { view, where } = views[i];
      await m.heatmap.drawHeatmap(side.plot, view, { where: `layer ${where.layer + 1} · head ${where.head + 1}`, boxWidth: width, boxHeight: height });
    }
    const [va, vb] = views.map((v) => v.view);
    const same = (x, y) => x.length === y.length && x.every((v, i) => v === y[i]);
    if (same(va.rowLabels, vb.rowLabels) && same(va.colLabels, vb.colLabels)) {
      const z = va.z.map((r, i) => r.map((v, j) => v - vb.z[i][j]));
      diff.box.hidden = false;
      note.textContent = "";
      await m.heatmap.drawHeatmap(diff.plot, { ...va, z, zmin: -1, colorscale: m.difference.DIVERGING }, { where: "A − B", zmax: 1, boxWidth: width * 2, boxHeight: height });
    } else {
      m.heatmap.purge(diff.plot);
      diff.box.hidden = true;
      note.textContent = "The two results' tokens differ, so their matrices cannot be subtracted: align both on the same target (model.align) to see the difference.";
    }
    el.dataset.drawn = `${state.kind}/${state.layer}/${state.head}`;
  };
  const redraw = () => draw().catch((err) => { el.dataset.error = err.message; console.error(err); });
  await draw();
}

async function render({ model, el }) {
  loadPlotly(model.get("plotly"));
  const urls = moduleUrls(model.get("modules"), model.get("modules_key"));
  const [matrix, heatmap, beamtree, stepAnatomy, difference, modelsApi] = await Promise.all(
    ["matrix.js", "heatmap.js", "beamtree.js", "step-anatomy.js", "difference.js", "models-api.js"].map((name) => import(urls[name])),
  );
  Object.assign(modelsApi.SCORE_FORMULAS, model.get("formulas") || {}); // what loadCatalog() fills on a page
  const m = { matrix, heatmap, beamtree, stepAnatomy, difference };
  const answer = model.get("answer");
  const options = model.get("options") || {};
  el.classList.add("attnscope-view");
  const style = document.createElement("style");
  style.textContent = model.get("css") || "";
  el.append(style);
  el.style.fontFamily = "system-ui, sans-serif";
  el.style.fontSize = "13px";
  try {
    const view = model.get("view");
    if (view === "heads") headsView(el, answer, m, options);
    else if (view === "beam") beamView(el, answer, m);
    else if (view === "anatomy") anatomyView(el, answer, m, options);
    else if (view === "compare") await compareView(el, answer, model.get("other"), m, options, model.get("labels") || { a: "A", b: "B" });
    else await heatmapView(el, answer, m, options);
    el.dataset.ready = "true";
  } catch (err) {
    el.append(`attnscope view failed: ${err.message}`);
    el.dataset.error = err.message;
    throw err;
  }
}

export default { render };
