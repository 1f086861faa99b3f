"use strict";
// decode.js: the page's base64 8-bit weights back to numbers.
const test = require("node:test");
const assert = require("node:assert");
const { explorerFile } = require("./explorer_files.js");
const { decodeBase64, decodeMaps, layerWeights } = explorerFile("decode.js");

const base64 = (bytes) => Buffer.from(Uint8Array.from(bytes)).toString("base64");

test("decodeBase64 gives back every byte value", () => {
  const bytes = [...Array(256).keys()];
  assert.deepStrictEqual(Array.from(decodeBase64(base64(bytes))), bytes);
  assert.strictEqual(decodeBase64("").length, 0);
});

test("decodeMaps decodes every epoch and layer and checks their sizes", () => {
  const layers = [{ name: "block_0", heads: 2, queries: ["a", "b"], keys: ["a", "b", "c"] },
                  { name: "block_1", heads: 1, queries: ["x"], keys: ["y"] }];
  const data = { layers, epochs: ["1", "2"], maps: [[base64([...Array(12).keys()]), base64([7])],
                                                   [base64(Array(12).fill(255)), base64([0])]] };
  const maps = decodeMaps(data);
  assert.strictEqual(maps.length, 2);
  assert.deepStrictEqual(maps.map((s) => s.map((m) => m.length)), [[12, 1], [12, 1]]);
  assert.strictEqual(maps[1][0][5], 255);
  data.maps[1][1] = base64([1, 2]);
  assert.throws(() => decodeMaps(data), /layer 'block_1' of snapshot 2 holds 2 weights, not heads x queries x keys = 1/);
});

test("layerWeights reads (head, query, key) in that order and divides by the levels", () => {
  const layer = { heads: 2, queries: ["a", "b"], keys: ["a", "b", "c"] };
  const bytes = Uint8Array.from([...Array(12).keys()]); // (head * 2 + q) * 3 + k
  const weight = layerWeights(bytes, layer, 255);
  assert.strictEqual(weight(0, 0, 0), 0);
  assert.strictEqual(weight(0, 1, 2), 5 / 255);
  assert.strictEqual(weight(1, 0, 1), 7 / 255);
  assert.strictEqual(weight(1, 1, 2), 11 / 255);
  assert.strictEqual(layerWeights(Uint8Array.from([255]), { heads: 1, queries: ["q"], keys: ["k"] }, 255)(0, 0, 0), 1);
});
