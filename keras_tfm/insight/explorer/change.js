"use strict";
// What changed between two snapshots, and word pieces read as words. `weight(head, q, k)` is what decode.js's
// layerWeights returns. Pure functions: the page runs them inline, node's tests require this file.

function headChange(before, after, layer) {
  // How far each head's attention moved: per query, the total variation distance 0.5 * sum_k |before - after|
  // between its two distributions over the keys (0: the same, 1: all of it went elsewhere), mean of the queries.
  const Q = layer.queries.length, K = layer.keys.length, out = new Float64Array(layer.heads);
  for (let h = 0; h < layer.heads; h++) {
    let total = 0;
    for (let q = 0; q < Q; q++) {
      let moved = 0;
      for (let k = 0; k < K; k++) moved += Math.abs(before(h, q, k) - after(h, q, k));
      total += moved / 2;
    }
    out[h] = Q ? total / Q : 0;
  }
  return out;
}

function rankHeads(changes) { // [[layer, head, change]] of every head, most changed first (ties: earlier first)
  const all = [];
  changes.forEach((row, j) => row.forEach((c, h) => all.push([j, h, c])));
  return all.sort((a, b) => b[2] - a[2] || a[0] - b[0] || a[1] - b[1]);
}

function mergePieces(labels) {
  // WordPiece continuations ("##ful") joined to the piece before: {labels: ["wonderful"], groups: [[3, 4]]}.
  const out = { labels: [], groups: [] };
  labels.forEach((label, i) => {
    if (label.startsWith("##") && out.groups.length) {
      out.groups[out.groups.length - 1].push(i);
      out.labels[out.labels.length - 1] += label.slice(2);
    } else {
      out.groups.push([i]);
      out.labels.push(label);
    }
  });
  return out;
}

function mergedWeight(weight, queryGroups, keyGroups) {
  // Attention between words: what a word attends to is the mean of its pieces' rows; what a word receives is
  // the sum over its pieces (Clark et al. 2019), so each merged row still sums to 1.
  return (h, q, k) => {
    let total = 0;
    for (const qi of queryGroups[q]) for (const ki of keyGroups[k]) total += weight(h, qi, ki);
    return total / queryGroups[q].length;
  };
}

function topKeys(row, count, floor) { // the `count` strongest keys of one query row (weights >= floor), strongest first
  const pick = typeof strongest === "function" ? strongest : require("./select.js").strongest; // the page / node
  return pick(row, count).filter((k) => row[k] >= floor);
}

if (typeof module !== "undefined") module.exports = { headChange, rankHeads, mergePieces, mergedWeight, topKeys };
