// The beam search tree from the API's `beam` answer, drawn as SVG: one column per output step,
// every kept hypothesis prefix a node with its token and probability, the returned path
// highlighted, branches that never finished dimmed. Clicking a node calls onPick(node path).
import { el, setChildren } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const COL = 104; // px per step
const ROW = 26; // px per leaf

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

const shortToken = (token) => ([...token].length > 11 ? `${[...token].slice(0, 10).join("")}…` : token);

/** Node ids from the root to `id`. */
export function pathTo(beam, id) {
  const byId = new Map(beam.nodes.map((n) => [n.id, n]));
  const ids = [];
  for (let node = byId.get(id); node; node = node.parent === null ? null : byId.get(node.parent)) ids.push(node.id);
  return ids.reverse();
}

/**
 * Draw `beam` into `container` (an element); returns the <svg>. options: {title, onPick(ids, node),
 * selected: node id}.
 */
export function drawBeamTree(container, beam, { title = "", onPick = () => {}, selected = null } = {}) {
  const byId = new Map(beam.nodes.map((n) => [n.id, n]));
  const children = new Map(beam.nodes.map((n) => [n.id, []]));
  for (const n of beam.nodes) if (n.parent !== null) children.get(n.parent).push(n);
  for (const list of children.values()) list.sort((a, b) => b.score - a.score);
  // a node is alive if some finished hypothesis goes through it
  const alive = new Set();
  const live = new Set(beam.live || []); // a tree still growing: the hypotheses in the beam now
  for (const n of beam.nodes) {
    if (!n.finished && !live.has(n.id)) continue;
    for (let m = n; m; m = m.parent === null ? null : byId.get(m.parent)) alive.add(m.id);
  }
  const best = new Set(beam.best);
  const root = beam.nodes.find((n) => n.parent === null);
  const y = new Map();
  let leaves = 0;
  const place = (node) => {
    const kids = children.get(node.id);
    if (!kids.length) {
      y.set(node.id, leaves++);
      return;
    }
    kids.forEach(place);
    y.set(node.id, kids.reduce((sum, k) => sum + y.get(k.id), 0) / kids.length);
  };
  place(root);
  // The chosen path runs straight, at its leaf's height: it stays in one band of the box (a path
  // averaged between its branches wanders up and out of view in a tall tree).
  const chosenLeaf = beam.best.length ? y.get(beam.best.at(-1)) : undefined;
  if (chosenLeaf !== undefined) for (const id of beam.best) y.set(id, chosenLeaf);
  const steps = Math.max(...beam.nodes.map((n) => n.step));
  const width = 40 + (steps + 1) * COL;
  const height = 24 + Math.max(leaves, 1) * ROW;
  const X = (n) => 20 + n.step * COL;
  const Y = (n) => 22 + y.get(n.id) * ROW;
  const s = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "beam-svg", role: "group", "aria-label": title || "beam search tree" });
  const edges = svg("g", { class: "edges" });
  const nodes = svg("g", { class: "nodes" });
  for (const n of beam.nodes) {
    if (n.parent === null) continue;
    const p = byId.get(n.parent);
    const mid = (X(p) + X(n)) / 2;
    edges.append(
      svg("path", {
        d: `M${X(p) + 6},${Y(p)} C${mid},${Y(p)} ${mid},${Y(n)} ${X(n) - 6},${Y(n)}`,
        class: `edge${best.has(n.id) ? " best" : ""}${alive.has(n.id) ? "" : " pruned"}`,
      }),
    );
  }
  for (const n of beam.nodes) {
    const p = Math.exp(n.logprob);
    const cls = `node${best.has(n.id) ? " best" : ""}${alive.has(n.id) ? "" : " pruned"}${n.finished ? " finished" : ""}${n.id === selected ? " selected" : ""}`;
    const label = n.parent === null ? "<s>" : shortToken(n.token);
    const g = svg("g", {
      class: cls,
      transform: `translate(${X(n)},${Y(n)})`,
      tabindex: 0,
      role: "button",
      "data-id": n.id,
      "aria-label": `${n.token}, step ${n.step}, p ${p.toFixed(2)}, score ${n.score.toFixed(2)}${best.has(n.id) ? ", on the chosen path" : ""}${alive.has(n.id) ? "" : ", pruned"}`,
    });
    g.append(
      svg("rect", { class: "hit", x: -8, y: -14, width: COL - 14, height: 28 }),
      n.finished ? svg("rect", { class: "mark", x: -5, y: -5, width: 10, height: 10, rx: 2 }) : svg("circle", { class: "mark", r: 5 }),
      svg("text", { x: 8, y: -3, class: "tok" }, label),
      svg("text", { x: 8, y: 9, class: "prob" }, n.parent === null ? "" : `p ${p.toFixed(2)}`),
      svg("title", {}, `${n.token} · p = ${p.toFixed(4)} · path log-prob ${n.score.toFixed(3)}${n.finished ? " · finished" : ""}${alive.has(n.id) ? "" : " · pruned"}`),
    );
    const pick = () => onPick(pathTo(beam, n.id), n);
    g.addEventListener("click", pick);
    g.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        pick();
      }
    });
    nodes.append(g);
  }
  s.append(edges, nodes);
  const scroller = el("div", { class: "beam-scroll" }, s);
  const finished = beam.hypotheses.length;
  const summary = `${beam.nodes.length - 1} nodes kept over ${steps} step${steps === 1 ? "" : "s"} · ${finished} finished ${finished === 1 ? "hypothesis" : "hypotheses"}`;
  // An empty hypothesis (</s> at once) is no translation to offer; it is counted, not listed,
  // unless beam search chose it.
  const listed = beam.hypotheses.map((h, i) => ({ h, chosen: i === 0 })).filter(({ h, chosen }) => chosen || h.translation);
  const empty = finished - listed.length;
  setChildren(
    container,
    title ? el("h3", { class: "beam-title" }, title) : null,
    el("p", { class: "hint" }, summary),
    scroller,
    listed.length
      ? el(
          "ol",
          { class: "hypotheses", title: "Sorted as beam search ranked them: by the length-normalised score" },
          listed.slice(0, 5).map(({ h, chosen }) =>
            el(
              "li",
              { dataset: { ranking: String(h.ranking), score: String(h.score) } },
              el(
                "a",
                {
                  href: "#",
                  class: "hypothesis",
                  onclick: (event) => {
                    event.preventDefault();
                    onPick(pathTo(beam, h.node), byId.get(h.node));
                  },
                },
                h.translation || "(an empty translation: </s> at once)",
              ),
              el(
                "span",
                { class: "muted" },
                ` ranked by ${h.ranking.toFixed(2)} (length-normalised) · log-prob ${h.score.toFixed(2)}${chosen ? " · chosen" : ""}`,
              ),
            ),
          ),
        )
      : null,
    empty ? el("p", { class: "hint", dataset: { role: "empty-hypotheses" } }, `${empty} empty ${empty === 1 ? "hypothesis" : "hypotheses"} (</s> at once) not listed.`) : null,
  );
  // Tall trees scroll: start with the chosen path in the middle of the box, once the box has its
  // size (it may be laid out after this call).
  const bestY = beam.best.filter((id) => y.has(id)).map((id) => Y(byId.get(id)));
  const top = Math.min(...bestY, Y(root)) - ROW;
  const bottom = Math.max(...bestY, Y(root)) + ROW;
  const reveal = () => {
    const room = scroller.clientHeight;
    if (!room) return false;
    scroller.scrollTop = Math.max(0, bottom - top <= room ? (top + bottom) / 2 - room / 2 : top);
    return true;
  };
  if (!reveal()) requestAnimationFrame(reveal);
  return s;
}
