"use strict";
// The explorer's page: reads the data block, keeps the state (epoch, view, layer, heads, hover, ...), sets up the
// tabs and the epoch slider, and draws the chosen view. Runs in the page only, after the other files.

const D = JSON.parse(document.getElementById("explorer-data").textContent);
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const maps = decodeMaps(D); // [epoch][layer] -> uint8 (heads, q, k)
const weights = maps.map((snapshot) => snapshot.map((bytes, j) => layerWeights(bytes, D.layers[j], D.levels)));
const state = { epoch: D.epochs.length - 1, view: D.views[0], headLayer: D.start.headLayer, active: [], hover: null, links: "all", merge: false, change: null,
                detail: null, imageLayer: D.start.imageLayer, imageHead: "mean", query: null };

function weight(epoch, layer, head, q, k) { return weights[epoch][layer](head, q, k); }
function row(epoch, layer, head, q) { // one head's weights of query q over the keys (head "mean": all heads)
  return attentionRow(weights[epoch][layer], D.layers[layer], headList(head, D.layers[layer].heads), q);
}
const fmt = (w) => w.toFixed(3);
function el(tag, attrs, parent, ns) {
  const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

// ---- tabs and epoch slider --------------------------------------------------------------------------------
const NAMES = { head: "head view", model: "model view", image: "image view", change: "change view" };
for (const view of D.views) {
  const button = el("button", { id: "tab-" + view, type: "button" }, $("tabs"));
  button.textContent = NAMES[view];
  button.addEventListener("click", () => { state.view = view; render(); });
}
if (D.epochs.length > 1) {
  $("epoch-control").hidden = false;
  $("epoch").max = D.epochs.length - 1;
  $("epoch").value = state.epoch;
  $("epoch").addEventListener("input", () => { state.epoch = Number($("epoch").value); render(); });
  let timer = null;
  $("play").addEventListener("click", () => {
    if (timer) { clearInterval(timer); timer = null; $("play").innerHTML = "&#9654;"; return; }
    if (state.epoch === D.epochs.length - 1) state.epoch = 0;
    $("play").innerHTML = "&#10074;&#10074;";
    timer = setInterval(() => {
      $("epoch").value = state.epoch; render();
      if (state.epoch >= D.epochs.length - 1) { clearInterval(timer); timer = null; $("play").innerHTML = "&#9654;"; }
      else state.epoch += 1;
    }, 600);
  });
}

// What a snapshot is: "before fine-tuning", "epoch 0.25", "epoch 3" (pages written before labels: "epoch N").
function frameLabel(i) { return D.labels ? D.labels[i] : "epoch " + D.epochs[i]; }

// ---- all together -------------------------------------------------------------------------------------------
function render() {
  for (const view of ["head", "model", "image", "change"]) {
    $("view-" + view).hidden = state.view !== view;
    const tab = $("tab-" + view);
    if (tab) tab.classList.toggle("active", state.view === view);
  }
  $("epoch-label").textContent = frameLabel(state.epoch);
  const note = (id, text) => { $(id).textContent = text; $(id).hidden = !text; };
  note("head-note", queryNote(D.layers[state.headLayer]));
  const decoder = D.layers.find((L) => queryNote(L));
  note("model-note", decoder ? "Decoder layers (self- and cross-attention): " + queryNote(decoder) : "");
  if (state.view === "head") renderHead();
  if (state.view === "model") renderModel();
  if (state.view === "image") renderImage();
  if (state.view === "change") renderChange();
}
if (D.views.includes("head")) setupHead();
setupModel();
if (D.views.includes("image")) setupImage();
if (D.views.includes("change")) setupChange();
render();
window.explorer = { data: D, state: state, render: render };
