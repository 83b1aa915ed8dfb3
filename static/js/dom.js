// Tiny DOM helpers. Text always goes in as text nodes, never as HTML.

/** Create an element: el("a", {href: "/", class: "x", onclick: fn}, "text", childNode, ...). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") {
      // Custom properties ("--p") only take effect through setProperty, not by assignment.
      for (const [prop, v] of Object.entries(value)) {
        if (prop.startsWith("--")) node.style.setProperty(prop, v);
        else node.style[prop] = v;
      }
    }
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

/** Replace a node's children (strings become text nodes). */
export function setChildren(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

export const $ = (selector, root = document) => root.querySelector(selector);
export const role = (root, name) => root.querySelector(`[data-role="${name}"]`);

/** Show a message in an error box (role=alert), or hide it with an empty message. */
export function showError(box, message) {
  box.textContent = message || "";
  box.hidden = !message;
}

/** Toggle a button's busy state (spinner via CSS, disabled, aria-busy). */
export function setBusy(button, busy) {
  button.disabled = busy;
  button.classList.toggle("busy", busy);
  button.setAttribute("aria-busy", busy ? "true" : "false");
}

/** Offer `data` as a file download. */
export function download(filename, data, type = "application/json") {
  const blob = new Blob([typeof data === "string" ? data : JSON.stringify(data, null, 2)], { type });
  const url = URL.createObjectURL(blob);
  const a = el("a", { href: url, download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** Wait for Plotly (loaded with `defer` from this server) to be there. */
export function plotlyReady() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  return new Promise((resolve, reject) => {
    const start = Date.now();
    const poll = () => {
      if (window.Plotly) resolve(window.Plotly);
      else if (Date.now() - start > 15000) reject(new Error("Plotly.js did not load from /vendor/plotly.min.js"));
      else setTimeout(poll, 20);
    };
    poll();
  });
}

export function formatCount(n) {
  if (n === null || n === undefined) return "–";
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k`;
  return String(n);
}

export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (h) return `${h} h ${m} min`;
  if (m) return `${m} min ${s % 60} s`;
  return `${s} s`;
}

/** Submit `form` through `onSubmit`; Enter in `textBox` submits, Shift+Enter adds a line. */
export function submitOnEnter(form, textBox, onSubmit) {
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    onSubmit();
  });
  textBox.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
}

/** Fill a <select> with options "Word 1" … "Word count" (values 0-based) and select one. */
export function fillSelect(select, count, word, selected) {
  if (select.options.length !== count) {
    setChildren(
      select,
      Array.from({ length: count }, (_, i) => el("option", { value: String(i) }, `${word} ${i + 1}`)),
    );
  }
  select.value = String(selected);
}
