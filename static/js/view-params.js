// The explorer's view state <-> a page's query string, so every view has a shareable link.

/** View state <-> query-string parameters (1-based layer and head, as people count). */
export function viewToParams(state, params) {
  params.set("kind", state.kind ?? "");
  if (state.layer !== null && state.layer !== undefined) params.set("layer", String(state.layer + 1));
  params.set("head", state.avg ? "avg" : String(state.head + 1));
  for (const [key, on] of [["merge", state.merge], ["eos", state.hideEos], ["stretch", state.stretch]]) {
    if (on) params.set(key, "1");
    else params.delete(key);
  }
  if (!state.kind) params.delete("kind");
}

export function viewFromParams(params) {
  const view = {};
  if (params.get("kind")) view.kind = params.get("kind");
  const layer = parseInt(params.get("layer"), 10);
  if (layer >= 1) view.layer = layer - 1;
  const head = params.get("head");
  if (head === "avg") view.avg = true;
  else if (parseInt(head, 10) >= 1) view.head = parseInt(head, 10) - 1;
  view.merge = params.get("merge") === "1";
  view.hideEos = params.get("eos") === "1";
  view.stretch = params.get("stretch") === "1";
  return view;
}
