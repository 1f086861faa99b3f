"use strict";
// rollout.js: attention rollout (Abnar & Zuidema, 2020).
const test = require("node:test");
const assert = require("node:assert");
const { explorerFile } = require("./explorer_files.js");
const { rollout } = explorerFile("rollout.js");

const near = (A, B, tolerance = 1e-12) => A.forEach((r, i) => r.forEach((v, j) =>
  assert.ok(Math.abs(v - B[i][j]) < tolerance, `[${i}][${j}]: ${v} != ${B[i][j]}`)));
const rows = (R) => R.map((r) => Array.from(r));

test("one layer: rows-normalised (A + I) / 2", () => {
  const A = [[0.5, 0.5], [0.0, 1.0]];
  near(rows(rollout([A])), [[0.75, 0.25], [0.0, 1.0]]);
});

test("layers are multiplied last on the left: R = Â2 Â1", () => {
  const A1 = [[0.0, 1.0], [1.0, 0.0]], A2 = [[1.0, 0.0], [0.0, 1.0]];
  const M1 = [[0.5, 0.5], [0.5, 0.5]], M2 = [[1, 0], [0, 1]]; // the mixed maps
  near(rows(rollout([A1, A2])), M1.map((_, i) => [0, 1].map((j) => M2[i][0] * M1[0][j] + M2[i][1] * M1[1][j])));
  const B1 = [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]];
  const B2 = [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]];
  // Â1 = [[1,0,0],[.5,.5,0],[0,0,1]], Â2 = [[.5,.5,0],[0,1,0],[0,.5,.5]]; Â2 Â1:
  near(rows(rollout([B1, B2])), [[0.75, 0.25, 0], [0.5, 0.5, 0], [0.25, 0.25, 0.5]]);
});

test("rows of the rollout sum to 1", () => {
  const A = [[0.1, 0.2, 0.7], [0.3, 0.3, 0.4], [0.9, 0.05, 0.05]];
  for (const r of rollout([A, A, A])) assert.ok(Math.abs(r.reduce((s, v) => s + v, 0) - 1) < 1e-12);
});

test("bad input is named", () => {
  assert.throws(() => rollout([]), /at least one/);
  assert.throws(() => rollout([[[1, 0], [0, 1]], [[1]]]), /must be 2 x 2/);
});
