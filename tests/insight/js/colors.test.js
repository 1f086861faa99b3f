"use strict";
// colors.js: colour maps between evenly spaced stops.
const test = require("node:test");
const assert = require("node:assert");
const { explorerFile } = require("./explorer_files.js");
const { PALETTE, VIRIDIS, INFERNO, color } = explorerFile("colors.js");

test("color: the end stops at 0 and 1, clipped outside, blended between", () => {
  assert.deepStrictEqual(color(VIRIDIS, 0), VIRIDIS[0]);
  assert.deepStrictEqual(color(VIRIDIS, 1), VIRIDIS[VIRIDIS.length - 1]);
  assert.deepStrictEqual(color(INFERNO, -3), INFERNO[0]);
  assert.deepStrictEqual(color(INFERNO, 7), INFERNO[INFERNO.length - 1]);
  assert.deepStrictEqual(color([[0, 0, 0], [100, 200, 50]], 0.5), [50, 100, 25]);
  assert.deepStrictEqual(color([[0, 0, 0], [10, 10, 10], [20, 40, 60]], 0.75), [15, 25, 35]);
});

test("the head palette has distinct colours", () => {
  assert.strictEqual(new Set(PALETTE).size, PALETTE.length);
});
