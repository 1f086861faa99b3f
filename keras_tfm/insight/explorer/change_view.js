"use strict";
// The change view: how far each head's attention moved from the first snapshot (before training) to the one on
// the slider, as a layers x heads grid and a ranking, most changed first; for the chosen head, the first query's
// row ([CLS], what a classifier reads) before and now. Runs in the page only: it uses main.js's D, state, weight,
// el, $, fmt.

function changesAt(epoch) { // [layer] -> Float64Array(heads): change from snapshot 0 to `epoch`
  return D.layers.map((L, j) => headChange(weights[0][j], weights[epoch][j], L));
}

function setupChange() {
  const heads = Math.max(...D.layers.map((L) => L.heads)), grid = $("change-grid");
  grid.style.gridTemplateColumns = "auto repeat(" + heads + ", 46px)";
  el("span", { class: "collabel" }, grid).textContent = "head →";
  for (let h = 0; h < heads; h++) el("span", { class: "collabel" }, grid).textContent = String(h);
  D.layers.forEach((L, j) => {
    el("span", { class: "label" }, grid).textContent = L.name;
    for (let h = 0; h < heads; h++) {
      if (h >= L.heads) { el("span", {}, grid); continue; }
      const cell = el("button", { type: "button", class: "change-cell", "data-layer": j, "data-head": h,
                                  title: L.name + ", head " + h }, grid);
      cell.addEventListener("click", () => { state.change = { layer: j, head: h }; render(); });
    }
  });
  $("change-open").addEventListener("click", () => {
    if (!state.change) return;
    state.view = "head"; state.headLayer = state.change.layer; $("head-layer").value = String(state.headLayer);
    headToggles(); state.active = [state.change.head]; render();
  });
}

const SPECIAL = /^(\[[A-Z]+\]|<\/?s>)$/; // [CLS], [SEP], <s>, </s>: they hold much of the weight, drawn grey

function tokenRow(box, labels, values, high) { // tokens with a background shade by weight
  box.textContent = "";
  labels.forEach((label, k) => {
    const s = el("span", { class: "change-token", title: label + ": " + fmt(values[k]) }, box);
    s.textContent = label;
    if (SPECIAL.test(label)) { s.style.background = "#ddd"; return; }
    s.style.background = "rgba(197,48,48," + Math.min(1, values[k] / high).toFixed(3) + ")";
    if (values[k] / high > 0.6) s.style.color = "#fff";
  });
}

function renderChange() {
  const changes = changesAt(state.epoch), ranked = rankHeads(changes);
  const high = Math.max(1e-9, ...ranked.map((r) => r[2]));
  for (const cell of document.querySelectorAll("#change-grid .change-cell")) {
    const j = Number(cell.dataset.layer), h = Number(cell.dataset.head), c = changes[j][h];
    cell.textContent = c.toFixed(2);
    cell.style.background = "rgba(197,48,48," + (c / high).toFixed(3) + ")";
    cell.style.color = c / high > 0.6 ? "#fff" : "#222";
    cell.classList.toggle("selected", !!state.change && state.change.layer === j && state.change.head === h);
  }
  const list = $("change-ranking");
  list.textContent = "";
  for (const [j, h, c] of ranked.slice(0, 8)) {
    const item = el("li", {}, list);
    const link = el("button", { type: "button", class: "link" }, item);
    link.textContent = D.layers[j].name + ", head " + h + ": " + fmt(c);
    link.addEventListener("click", () => { state.change = { layer: j, head: h }; render(); });
  }
  if (!state.change && ranked.length) state.change = { layer: ranked[0][0], head: ranked[0][1] };
  const L = D.layers[state.change.layer], h = state.change.head;
  const before = attentionRow(weights[0][state.change.layer], L, [h], 0);
  const now = attentionRow(weights[state.epoch][state.change.layer], L, [h], 0);
  const top = Math.max(1e-9, ...L.keys.map((t, k) => SPECIAL.test(t) ? 0 : Math.max(before[k], now[k])));
  $("change-title").textContent = L.name + ", head " + h + ": what “" + L.queries[0] + "” reads, "
    + frameLabel(0) + " and " + frameLabel(state.epoch);
  $("change-before-label").textContent = frameLabel(0);
  $("change-now-label").textContent = frameLabel(state.epoch);
  tokenRow($("change-before"), L.keys, before, top);
  tokenRow($("change-now"), L.keys, now, top);
}
