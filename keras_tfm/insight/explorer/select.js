"use strict";
// Choosing weights out of one layer's map: a query's row, a key's column, the mean of the heads, the strongest
// entries, the patch under the pointer. `weight(head, q, k)` is what decode.js's layerWeights returns.
// Pure functions: the page runs them inline, node's tests require this file.

function headList(head, heads) { // "mean" -> every head; a number -> that head alone
  return head === "mean" ? [...Array(heads).keys()] : [head];
}

function queryNote(layer) { // what a layer's rows are where a learner could misread them: a decoder's are its inputs
  if (layer.kind !== "self" && layer.kind !== "cross") return "";
  return "Queries are the decoder's inputs (the start token, then the target shifted right by one): the row of "
    + "input token t is where the decoder looked while predicting token t+1.";
}

function attentionRow(weight, layer, heads, q) { // query q's weights over the keys, the mean of `heads` (a list)
  const out = new Float64Array(layer.keys.length);
  for (const h of heads) for (let k = 0; k < out.length; k++) out[k] += weight(h, q, k) / heads.length;
  return out;
}

function attentionColumn(weight, layer, heads, k) { // key k's weights from every query, the mean of `heads` (a list)
  const out = new Float64Array(layer.queries.length);
  for (const h of heads) for (let q = 0; q < out.length; q++) out[q] += weight(h, q, k) / heads.length;
  return out;
}

function meanOfRows(rows, length) { // element-wise mean of equally long rows
  const out = new Float64Array(length);
  for (const r of rows) for (let k = 0; k < length; k++) out[k] += r[k] / rows.length;
  return out;
}

function strongest(values, count) { // indices of the `count` largest values, largest first (ties: lower index)
  return [...Array(values.length).keys()].sort((a, b) => values[b] - values[a] || a - b).slice(0, count);
}

function queryOverPatches(rowOf, query, image) {
  // The weights the image view shows: the row of token `query` (or, query null, the mean of the patches' rows)
  // over the patches, the prefix keys ([CLS]) left out. rowOf(q) gives a token's row over every key.
  const patches = image.rows * image.columns, rows = [];
  if (query === null) for (let p = 0; p < patches; p++) rows.push(rowOf(image.prefix + p));
  else rows.push(rowOf(query));
  const full = meanOfRows(rows, rows[0].length);
  return Array.from(full).slice(image.prefix);
}

function patchAt(x, y, width, height, image) { // the token index of the patch at (x, y) of a width x height box
  const r = Math.floor(y / height * image.rows), c = Math.floor(x / width * image.columns);
  if (r < 0 || c < 0 || r >= image.rows || c >= image.columns) return null;
  return image.prefix + r * image.columns + c;
}

if (typeof module !== "undefined") {
  module.exports = { headList, queryNote, attentionRow, attentionColumn, meanOfRows, strongest, queryOverPatches,
                     patchAt };
}
