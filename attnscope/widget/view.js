// attnscope's notebook views (result.show(), result.to_html()): the explorer's own modules from
// static/js, which Python sends as sources (`modules`), are imported from blob: URLs with their
// relative imports pointed at each other, so the notebook draws with the very code the pages
// run. Plotly.js comes as text from the installed plotly package (offline).
// An anywidget module: render({model, el}); model.get() reads answer, view, modules, plotly.

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

async function render({ model, el }) {
  loadPlotly(model.get("plotly"));
  const urls = moduleUrls(model.get("modules"), model.get("modules_key"));
  const [matrix, heatmap, beamtree] = await Promise.all(
    ["matrix.js", "heatmap.js", "beamtree.js"].map((name) => import(urls[name])),
  );
  const m = { matrix, heatmap, beamtree };
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
    else await heatmapView(el, answer, m, options);
    el.dataset.ready = "true";
  } catch (err) {
    el.append(`attnscope view failed: ${err.message}`);
    el.dataset.error = err.message;
    throw err;
  }
}

export default { render };
