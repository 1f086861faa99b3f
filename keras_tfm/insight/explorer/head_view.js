"use strict";
// The head view (after BertViz's, Vig 2019): query tokens on the left, key tokens on the right, one line per
// (query, key, head) weighted by the attention. Runs in the page only: it uses main.js's D, state, weight, el, $.

const HEAD = { step: 20, top: 40, left: 170, right: 430 }; // where the two token columns are drawn
let builtLayer = -1; // tokens are drawn once per layer: redrawing them under the pointer would re-fire hovers
let builtMerge = false;
const LONG = 40; // tokens past which a view of every link is a tangle: it opens on the strongest links instead

function headTokens() {
  // The current layer as the head view draws it: word pieces, or words (## pieces joined) when asked.
  const L = D.layers[state.headLayer], base = (h, q, k) => weight(state.epoch, state.headLayer, h, q, k);
  if (!state.merge) return { queries: L.queries, keys: L.keys, weight: base };
  const q = mergePieces(L.queries), k = mergePieces(L.keys);
  return { queries: q.labels, keys: k.labels, weight: mergedWeight(base, q.groups, k.groups) };
}

function movedMost(layer) { // the head of `layer` whose attention moved most from the first snapshot to the last
  if (D.epochs.length < 2) return 0;
  const change = headChange(weights[0][layer], weights[D.epochs.length - 1][layer], D.layers[layer]);
  return strongest(change, 1)[0];
}

function hasPieces() { return D.layers.some((L) => L.keys.some((t) => t.startsWith("##"))); }

function setupHead() {
  D.layers.forEach((L, j) => { const o = el("option", { value: j }, $("head-layer")); o.textContent = L.name; });
  $("head-layer").value = String(state.headLayer);
  $("head-layer").addEventListener("change", () => { state.headLayer = Number($("head-layer").value); headToggles(); render(); });
  const longest = Math.max(...D.layers.map((L) => Math.max(L.queries.length, L.keys.length)));
  state.links = longest > LONG ? "3" : "all";
  $("head-links").value = state.links;
  $("head-links").addEventListener("change", () => { state.links = $("head-links").value; render(); });
  $("head-merge-box").hidden = !hasPieces();
  $("head-merge").addEventListener("change", () => { state.merge = $("head-merge").checked; state.hover = null; render(); });
  headToggles();
}

function headToggles() {
  const L = D.layers[state.headLayer], box = $("head-toggles");
  box.textContent = "";
  // A long text opens on one head (the one that moved most since the first snapshot, where there are two), else
  // every head: twelve heads' links over 60 tokens are a tangle. Click the heads to add others.
  const long = Math.max(L.queries.length, L.keys.length) > LONG;
  state.active = long ? [movedMost(state.headLayer)] : [...Array(L.heads).keys()];
  for (let h = 0; h < L.heads; h++) {
    const t = el("span", { class: "toggle", "data-head": h, title: "click: on/off, double-click: only this head" }, box);
    el("span", { class: "swatch", style: "background:" + PALETTE[h % PALETTE.length] }, t);
    t.appendChild(document.createTextNode("head " + h));
    t.addEventListener("click", () => {
      state.active = state.active.includes(h) ? state.active.filter((x) => x !== h) : [...state.active, h].sort((a, b) => a - b);
      render();
    });
    t.addEventListener("dblclick", () => { state.active = [h]; render(); });
  }
}

function buildHead() {
  const T = headTokens(), svg = $("head-svg"), Q = T.queries.length, K = T.keys.length;
  svg.textContent = "";
  svg.setAttribute("width", HEAD.right + 170);
  svg.setAttribute("height", HEAD.top + HEAD.step * Math.max(Q, K) + 8);
  el("text", { x: HEAD.left, y: 16, "text-anchor": "end", class: "caption" }, svg, SVG).textContent = "queries";
  el("text", { x: HEAD.right, y: 16, class: "caption" }, svg, SVG).textContent = "keys";
  el("g", { id: "head-shades" }, svg, SVG);
  el("g", { id: "head-lines" }, svg, SVG);
  const tokens = (labels, side, x, anchor) => labels.forEach((label, i) => {
    const t = el("text", { x: x, y: HEAD.top + i * HEAD.step + 4, "text-anchor": anchor,
                           class: "token " + side + "-token", "data-index": i }, svg, SVG);
    t.textContent = label;
    t.addEventListener("mouseenter", () => { state.hover = { side: side, index: i }; render(); });
    t.addEventListener("mouseleave", () => { state.hover = null; render(); });
  });
  tokens(T.queries, "query", HEAD.left, "end");
  tokens(T.keys, "key", HEAD.right, "start");
  builtLayer = state.headLayer;
  builtMerge = state.merge;
}

function renderHead() {
  if (builtLayer !== state.headLayer || builtMerge !== state.merge) buildHead();
  const L = D.layers[state.headLayer], T = headTokens(), Q = T.queries.length, K = T.keys.length, hover = state.hover;
  const top = state.links === "all" ? 0 : Number(state.links);
  for (const t of $("head-toggles").children) t.classList.toggle("off", !state.active.includes(Number(t.dataset.head)));
  const lines = $("head-lines"), shades = $("head-shades");
  lines.textContent = ""; shades.textContent = "";
  for (const h of state.active) {
    for (let q = 0; q < Q; q++) {
      if (hover && hover.side === "query" && hover.index !== q) continue;
      const row = Float64Array.from({ length: K }, (_, k) => T.weight(h, q, k));
      const shown = top && !hover ? new Set(topKeys(row, top, 0.02)) : null; // the strongest links of the query
      for (let k = 0; k < K; k++) {
        if (hover && hover.side === "key" && hover.index !== k) continue;
        const w = row[k];
        if (!hover && (w < 0.02 || (shown && !shown.has(k)))) continue; // a hovered token shows all its links
        const shift = (h - (L.heads - 1) / 2) * 2; // heads side by side, not drawn over each other
        el("line", { x1: HEAD.left + 6, y1: HEAD.top + q * HEAD.step + shift, x2: HEAD.right - 6,
                     y2: HEAD.top + k * HEAD.step + shift,
                     stroke: PALETTE[h % PALETTE.length], "stroke-width": 2, "stroke-opacity": Math.max(w, 0.03),
                     "data-head": h, "data-query": q, "data-key": k, "data-weight": w.toFixed(4),
                     class: "attention-line" }, lines, SVG);
      }
    }
  }
  for (const t of $("head-svg").querySelectorAll("text.token")) {
    t.classList.toggle("active", !!hover && t.classList.contains(hover.side + "-token") && Number(t.dataset.index) === hover.index);
  }
  if (!hover || !state.active.length) {
    $("head-readout").textContent = L.name + ": " + Q + (state.merge ? " words" : " queries") + " × " + K + " keys, "
      + state.active.length + " of " + L.heads + " heads shown; "
      + (top ? "the " + top + " strongest links of each query (≥ 0.02)" : "every link ≥ 0.02")
      + ". Hover a token for all of its links.";
    return;
  }
  const sized = { queries: T.queries, keys: T.keys }; // the mean of the shown heads, over the other side's tokens
  const shade = hover.side === "query" ? attentionRow(T.weight, sized, state.active, hover.index)
                                       : attentionColumn(T.weight, sized, state.active, hover.index);
  for (let i = 0; i < shade.length; i++) {
    el("rect", { x: hover.side === "query" ? HEAD.right - 2 : HEAD.left - 150, y: HEAD.top + i * HEAD.step - 9, width: 152,
                 height: 18, rx: 3, fill: "rgba(43,108,176," + (0.85 * shade[i]).toFixed(3) + ")" }, shades, SVG);
  }
  const labels = hover.side === "query" ? T.keys : T.queries, who = (hover.side === "query" ? T.queries : T.keys)[hover.index];
  $("head-readout").textContent = "“" + who + "” " + (hover.side === "query" ? "looks most at: " : "is looked at most by: ")
    + strongest(shade, 3).map((i) => "“" + labels[i] + "” " + fmt(shade[i])).join(", ") + "  (mean of the shown heads)";
}
