"use strict";
// change.js: how far heads moved between snapshots, their ranking, and word pieces joined into words.
const test = require("node:test");
const assert = require("node:assert");
const { explorerFile } = require("./explorer_files.js");
const { headChange, rankHeads, mergePieces, mergedWeight, topKeys } = explorerFile("change.js");

// Two heads over 2 queries x 3 keys, before and after: head 0 unchanged, head 1's first query moved all its weight.
const BEFORE = [[[0.2, 0.3, 0.5], [0.6, 0.4, 0.0]], [[1.0, 0.0, 0.0], [0.1, 0.1, 0.8]]];
const AFTER = [[[0.2, 0.3, 0.5], [0.6, 0.4, 0.0]], [[0.0, 0.0, 1.0], [0.1, 0.5, 0.4]]];
const layer = { heads: 2, queries: ["a", "b"], keys: ["x", "y", "z"] };
const of = (W) => (h, q, k) => W[h][q][k];

test("headChange: total variation per query, mean of the queries (worked by hand)", () => {
  const change = headChange(of(BEFORE), of(AFTER), layer);
  assert.strictEqual(change[0], 0);
  // head 1: query a moves 0.5 * (1 + 0 + 1) = 1, query b moves 0.5 * (0 + 0.4 + 0.4) = 0.4; mean 0.7
  assert.ok(Math.abs(change[1] - 0.7) < 1e-12, String(change[1]));
});

test("rankHeads: most changed first, over every layer", () => {
  assert.deepStrictEqual(rankHeads([[0.1, 0.5], [0.3, 0.0]]), [[0, 1, 0.5], [1, 0, 0.3], [0, 0, 0.1], [1, 1, 0.0]]);
});

test("mergePieces: ## continuations join the piece before", () => {
  const merged = mergePieces(["[CLS]", "a", "wonder", "##ful", "##ly", "film", "[SEP]"]);
  assert.deepStrictEqual(merged.labels, ["[CLS]", "a", "wonderfully", "film", "[SEP]"]);
  assert.deepStrictEqual(merged.groups, [[0], [1], [2, 3, 4], [5], [6]]);
});

test("mergedWeight: a word's row is the mean of its pieces' rows, summed over the pieces it reads; rows sum to 1", () => {
  // one head, 3 pieces (x, ##y, z): rows sum to 1
  const W = [[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [0.0, 0.5, 0.5]]];
  const groups = mergePieces(["x", "##y", "z"]).groups; // [[0, 1], [2]]
  const w = mergedWeight(of(W), groups, groups);
  assert.ok(Math.abs(w(0, 0, 0) - (0.5 + 0.25 + 0.1 + 0.1) / 2) < 1e-12);
  assert.ok(Math.abs(w(0, 0, 1) - (0.25 + 0.8) / 2) < 1e-12);
  assert.ok(Math.abs(w(0, 1, 0) - 0.5) < 1e-12);
  for (let q = 0; q < 2; q++) assert.ok(Math.abs(w(0, q, 0) + w(0, q, 1) - 1) < 1e-12);
});

test("topKeys: the strongest keys of a row above the floor, strongest first", () => {
  assert.deepStrictEqual(topKeys([0.1, 0.6, 0.01, 0.29], 3, 0.02), [1, 3, 0]);
  assert.deepStrictEqual(topKeys([0.1, 0.6, 0.01, 0.29], 1, 0.02), [1]);
});
