"use strict";
// The image view (ViT): the image under a heat overlay of where one query token looks, for one layer and head,
// the mean of the heads, or the attention rollout of every layer; or, where the page has it (D.relevance), each
// frame's occlusion map: where the prediction comes from. Runs in the page only: it uses main.js's D, state, row,
// el, $.

const rollouts = {}; // epoch -> the rollout over its square layers, computed once
let baseImage = null;

function imageRollout(epoch) { // the rollout (rollout.js) of the heads' mean of every layer over the same n tokens
  if (rollouts[epoch]) return rollouts[epoch];
  const n = D.layers.find((L) => L.queries.length === L.keys.length).keys.length, fused = [];
  D.layers.forEach((L, j) => {
    if (L.queries.length === n && L.keys.length === n) fused.push([...Array(n).keys()].map((q) => row(epoch, j, "mean", q)));
  });
  return (rollouts[epoch] = rollout(fused));
}

function setupImage() {
  const I = D.image, layer = $("image-layer"), head = $("image-head");
  if (D.relevance) el("option", { value: "relevance" }, layer).textContent = "occlusion (what the prediction needs)";
  el("option", { value: "rollout" }, layer).textContent = "rollout (all layers)";
  D.layers.forEach((L, j) => {
    if (L.queries.length === L.keys.length) el("option", { value: j }, layer).textContent = L.name;
  });
  const heads = Math.max(...D.layers.map((L) => L.heads));
  el("option", { value: "mean" }, head).textContent = "mean of heads";
  for (let h = 0; h < heads; h++) el("option", { value: h }, head).textContent = "head " + h;
  layer.value = state.imageLayer;
  layer.addEventListener("change", () => { state.imageLayer = layer.value; render(); });
  head.addEventListener("change", () => { state.imageHead = head.value === "mean" ? "mean" : Number(head.value); render(); });
  $("image-alpha").addEventListener("input", render);
  state.query = I.prefix ? 0 : null; // the [CLS] token, or (no [CLS]) the mean over all patches as queries
  $("image-cls").textContent = I.prefix ? "query: [CLS]" : "query: all patches (mean)";
  $("image-cls").addEventListener("click", () => { state.query = I.prefix ? 0 : null; render(); });
  const scale = Math.max(1, Math.floor(320 / Math.max(I.width, I.height)));
  for (const c of [$("image-plain"), $("image-base"), $("image-overlay")]) { c.width = I.width * scale; c.height = I.height * scale; }
  $("image-legend").style.background = "linear-gradient(to right, " + INFERNO.map((c) => "rgb(" + c.join(",") + ")").join(", ") + ")";
  baseImage = new Image();
  baseImage.onload = render;
  baseImage.src = "data:image/png;base64," + I.png;
  $("image-overlay").addEventListener("click", (event) => {
    const box = $("image-overlay").getBoundingClientRect();
    const query = patchAt(event.clientX - box.left, event.clientY - box.top, box.width, box.height, I);
    if (query !== null) { state.query = query; render(); }
  });
}

function imageWeights() { // the shown weights: the query's attention over the patches (prefix keys left out)
  const e = state.epoch;
  if (state.imageLayer === "relevance") { // this frame's shares of the score drop (zeros for a frame without one)
    return D.relevance[e] || new Array(D.image.rows * D.image.columns).fill(0);
  }
  if (state.imageLayer === "rollout") {
    const R = imageRollout(e);
    return queryOverPatches((q) => R[q], state.query, D.image);
  }
  const j = Number(state.imageLayer);
  return queryOverPatches((q) => row(e, j, state.imageHead, q), state.query, D.image);
}

function renderImage() {
  const I = D.image, base = $("image-base"), overlay = $("image-overlay");
  const attention = state.imageLayer !== "relevance";
  $("image-head").disabled = state.imageLayer === "rollout" || !attention;
  $("image-cls").disabled = !attention;
  $("image-hint").textContent = attention
    ? "The heat shows where the chosen query token looks. Click a patch to make it the query."
    : "The heat shows which patches the prediction needs: hiding a bright one lowers the predicted class's score most.";
  $("image-caption").textContent = attention ? "where the query looks" : "what the prediction needs";
  if (!baseImage || !baseImage.complete) return;
  for (const canvas of [base, $("image-plain")]) {
    const b = canvas.getContext("2d");
    b.imageSmoothingEnabled = false;
    b.drawImage(baseImage, 0, 0, canvas.width, canvas.height);
  }
  const w = imageWeights(), low = Math.min(...w), high = Math.max(...w), alpha = Number($("image-alpha").value) / 100;
  const o = overlay.getContext("2d"), cw = overlay.width / I.columns, ch = overlay.height / I.rows;
  o.clearRect(0, 0, overlay.width, overlay.height);
  for (let p = 0; p < w.length; p++) {
    const c = color(INFERNO, (w[p] - low) / Math.max(high - low, 1e-9));
    o.fillStyle = "rgba(" + c[0] + "," + c[1] + "," + c[2] + "," + alpha + ")";
    o.fillRect((p % I.columns) * cw, Math.floor(p / I.columns) * ch, Math.ceil(cw), Math.ceil(ch));
  }
  if (attention && state.query !== null && state.query >= I.prefix) {
    const p = state.query - I.prefix;
    o.strokeStyle = "#00e5ff"; o.lineWidth = 3;
    o.strokeRect((p % I.columns) * cw + 1.5, Math.floor(p / I.columns) * ch + 1.5, cw - 3, ch - 3);
  }
  overlay.dataset.weights = JSON.stringify(w.map((v) => Number(v.toFixed(4))));
  if (!attention) {
    $("image-readout").textContent = "occlusion, " + frameLabel(state.epoch) + ": each patch's share of the fall in the"
      + " predicted class's score when the patch is hidden (painted with the image's mean colour), from " + fmt(low)
      + " (dark) to " + fmt(high) + " (bright); " + I.rows + "×" + I.columns + " patches.";
    return;
  }
  const what = state.imageLayer === "rollout" ? "rollout over all layers"
    : D.layers[Number(state.imageLayer)].name + ", " + (state.imageHead === "mean" ? "mean of heads" : "head " + state.imageHead);
  const query = state.query === null ? "all patches (mean)" : state.query < I.prefix ? "[CLS]" : "patch " + (state.query - I.prefix)
    + " (row " + Math.floor((state.query - I.prefix) / I.columns) + ", column " + ((state.query - I.prefix) % I.columns) + ")";
  $("image-readout").textContent = "query: " + query + ". " + what + ", " + frameLabel(state.epoch)
    + ". Patch weights from " + fmt(low) + " (dark) to " + fmt(high) + " (bright); " + I.rows + "×" + I.columns + " patches.";
}
