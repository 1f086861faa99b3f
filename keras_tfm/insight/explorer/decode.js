"use strict";
// Decoding the page's weights: each layer of each epoch is a base64 string of uint8 levels, one per weight, in
// (heads, queries, keys) order; a level l stands for the weight l / levels (levels = 255: 8 bits).
// Pure functions: the page runs them inline, node's tests require this file.

function decodeBase64(text) { // base64 text -> Uint8Array of its bytes
  const raw = atob(text), bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

function decodeMaps(data) { // the page's data -> [epoch][layer] Uint8Array (heads, queries, keys)
  return data.maps.map((snapshot, epoch) => snapshot.map((text, j) => {
    const L = data.layers[j], bytes = decodeBase64(text), size = L.heads * L.queries.length * L.keys.length;
    if (bytes.length !== size) {
      throw new Error("layer '" + L.name + "' of snapshot " + data.epochs[epoch] + " holds " + bytes.length
        + " weights, not heads x queries x keys = " + size);
    }
    return bytes;
  }));
}

function layerWeights(bytes, layer, levels) { // -> weight(head, q, k) of one decoded layer, in [0, 1]
  const Q = layer.queries.length, K = layer.keys.length;
  return (head, q, k) => bytes[(head * Q + q) * K + k] / levels;
}

if (typeof module !== "undefined") module.exports = { decodeBase64, decodeMaps, layerWeights };
