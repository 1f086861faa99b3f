"use strict";
// select.js: rows, columns, means and patches chosen out of one layer's weights.
const test = require("node:test");
const assert = require("node:assert");
const { explorerFile } = require("./explorer_files.js");
const { headList, queryNote, attentionRow, attentionColumn, meanOfRows, strongest, queryOverPatches, patchAt } =
  explorerFile("select.js");

const close = (actual, expected) => {
  assert.strictEqual(actual.length, expected.length);
  actual.forEach((v, i) => assert.ok(Math.abs(v - expected[i]) < 1e-12, `at ${i}: ${v} != ${expected[i]}`));
};
// Two heads over 2 queries x 3 keys: W[h][q][k].
const W = [[[0.2, 0.3, 0.5], [0.6, 0.4, 0.0]], [[1.0, 0.0, 0.0], [0.1, 0.1, 0.8]]];
const weight = (h, q, k) => W[h][q][k];
const layer = { heads: 2, queries: ["a", "b"], keys: ["x", "y", "z"] };

test("headList: 'mean' is every head, a number that head alone", () => {
  assert.deepStrictEqual(headList("mean", 3), [0, 1, 2]);
  assert.deepStrictEqual(headList(1, 3), [1]);
});

test("attentionRow is a query's row, one head's or the mean of the heads given", () => {
  close(attentionRow(weight, layer, [1], 0), [1.0, 0.0, 0.0]);
  close(attentionRow(weight, layer, [0, 1], 1), [0.35, 0.25, 0.4]);
  close(attentionRow(weight, layer, headList("mean", 2), 0), [0.6, 0.15, 0.25]);
});

test("attentionColumn is a key's column over the queries", () => {
  close(attentionColumn(weight, layer, [0], 2), [0.5, 0.0]);
  close(attentionColumn(weight, layer, [0, 1], 0), [0.6, 0.35]);
});

test("meanOfRows and strongest", () => {
  close(meanOfRows([[1, 2], [3, 4]], 2), [2, 3]);
  assert.deepStrictEqual(strongest([0.1, 0.5, 0.2, 0.5], 3), [1, 3, 2]); // ties: the lower index first
  assert.deepStrictEqual(strongest([0.3], 3), [0]);
});

test("queryOverPatches: one query's row or the patches' mean, without the prefix keys", () => {
  const image = { prefix: 1, rows: 1, columns: 2 }; // [CLS] + 2 patches
  const rows = [[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.2, 0.2, 0.6]];
  const rowOf = (q) => rows[q];
  close(queryOverPatches(rowOf, 0, image), [0.25, 0.25]);
  close(queryOverPatches(rowOf, 2, image), [0.2, 0.6]);
  close(queryOverPatches(rowOf, null, image), [0.6, 0.3]); // mean of rows 1 and 2, the patches
  close(queryOverPatches((q) => [[0.5, 0.5], [1, 0]][q], null, { prefix: 0, rows: 2, columns: 1 }), [0.75, 0.25]);
});

test("patchAt: the token under a point of the image, inside the grid only", () => {
  const image = { prefix: 1, rows: 4, columns: 4 };
  assert.strictEqual(patchAt(2.5 * 10, 1.5 * 10, 40, 40, image), 1 + 1 * 4 + 2); // row 1, column 2
  assert.strictEqual(patchAt(0, 0, 40, 40, image), 1);
  assert.strictEqual(patchAt(39.9, 39.9, 40, 40, { prefix: 0, rows: 4, columns: 4 }), 15);
  assert.strictEqual(patchAt(-1, 5, 40, 40, image), null);
  assert.strictEqual(patchAt(5, 40, 40, 40, image), null);
});

test("queryNote: a decoder's rows (self- and cross-attention) predict the next token; an encoder's need no note", () => {
  for (const kind of ["self", "cross"]) {
    assert.match(queryNote({ kind: kind }), /row of input token t is where the decoder looked while predicting token t\+1/);
  }
  assert.strictEqual(queryNote({ kind: "encoder" }), "");
});
