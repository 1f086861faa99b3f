"use strict";
// The model view: a grid of layers x heads thumbnails; clicking one opens it large, with the weight under the
// pointer. Runs in the page only: it uses main.js's D, state, weight, el, $.

function paint(canvas, layer, head, size) { // one head's (q, k) map, colours scaled to its largest weight
  const L = D.layers[layer], Q = L.queries.length, K = L.keys.length, e = state.epoch;
  let top = 1e-9;
  for (let q = 0; q < Q; q++) for (let k = 0; k < K; k++) top = Math.max(top, weight(e, layer, head, q, k));
  const small = document.createElement("canvas");
  small.width = K; small.height = Q;
  const ctx = small.getContext("2d"), image = ctx.createImageData(K, Q);
  for (let q = 0; q < Q; q++) for (let k = 0; k < K; k++) {
    const c = color(VIRIDIS, weight(e, layer, head, q, k) / top), p = 4 * (q * K + k);
    image.data[p] = c[0]; image.data[p + 1] = c[1]; image.data[p + 2] = c[2]; image.data[p + 3] = 255;
  }
  ctx.putImageData(image, 0, 0);
  const scale = size / Math.max(Q, K);
  canvas.width = Math.round(K * scale); canvas.height = Math.round(Q * scale);
  const out = canvas.getContext("2d");
  out.imageSmoothingEnabled = false;
  out.drawImage(small, 0, 0, canvas.width, canvas.height);
}

function setupModel() {
  const heads = Math.max(...D.layers.map((L) => L.heads)), grid = $("model-grid");
  grid.style.gridTemplateColumns = "auto repeat(" + heads + ", 88px)";
  el("span", {}, grid);
  for (let h = 0; h < heads; h++) el("span", { class: "collabel" }, grid).textContent = "head " + h;
  D.layers.forEach((L, j) => {
    el("span", { class: "label" }, grid).textContent = L.name;
    for (let h = 0; h < heads; h++) {
      if (h >= L.heads) { el("span", {}, grid); continue; }
      const c = el("canvas", { class: "thumb", "data-layer": j, "data-head": h, title: L.name + ", head " + h }, grid);
      c.addEventListener("click", () => { state.detail = { layer: j, head: h }; render(); });
    }
  });
  $("detail-canvas").addEventListener("mousemove", (event) => {
    if (!state.detail) return;
    const L = D.layers[state.detail.layer], c = $("detail-canvas"), box = c.getBoundingClientRect();
    const k = Math.floor((event.clientX - box.left) / box.width * L.keys.length);
    const q = Math.floor((event.clientY - box.top) / box.height * L.queries.length);
    if (q < 0 || k < 0 || q >= L.queries.length || k >= L.keys.length) return;
    $("detail-readout").textContent = "query “" + L.queries[q] + "” (" + q + ") → key “" + L.keys[k] + "” (" + k + "): "
      + fmt(weight(state.epoch, state.detail.layer, state.detail.head, q, k));
  });
}

function renderModel() {
  for (const c of document.querySelectorAll("#model-grid canvas.thumb")) {
    const j = Number(c.dataset.layer), h = Number(c.dataset.head);
    paint(c, j, h, 80);
    c.classList.toggle("selected", !!state.detail && state.detail.layer === j && state.detail.head === h);
  }
  $("model-detail").hidden = !state.detail;
  if (state.detail) {
    const L = D.layers[state.detail.layer];
    $("detail-title").textContent = L.name + ", head " + state.detail.head + " (" + frameLabel(state.epoch) + ")";
    const canvas = $("detail-canvas");
    paint(canvas, state.detail.layer, state.detail.head, 420);
    const cellWidth = canvas.width / L.keys.length, cellHeight = canvas.height / L.queries.length;
    const keys = $("detail-keys"), queries = $("detail-queries");
    keys.textContent = ""; queries.textContent = "";
    if (Math.min(cellWidth, cellHeight) >= 11) { // labels only where they fit
      for (const label of L.keys) { const s = el("span", { style: "width:" + cellWidth + "px" }, keys); s.textContent = label; }
      for (const label of L.queries) { const s = el("span", { style: "height:" + cellHeight + "px" }, queries); s.textContent = label; }
    }
  }
}
