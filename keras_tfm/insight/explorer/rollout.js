"use strict";
// Attention rollout (Abnar & Zuidema, "Quantifying Attention Flow in Transformers", 2020), as
// keras_tfm.insight.visualize.attention_rollout computes it: each layer's head-fused map A is mixed with the residual
// connection, Â = rows-normalised (A + I) / 2, and the layers are multiplied first to last: R = Â_L ··· Â_1.
// A pure function: the page runs it inline, node's tests require this file.

function rollout(layers) { // layers: (n x n) head-fused maps (arrays of rows), first layer first -> R (n rows)
  if (!layers.length) throw new Error("rollout needs at least one (tokens x tokens) map");
  const n = layers[0].length;
  let R = Array.from({ length: n }, (_, i) => Float64Array.from({ length: n }, (_, j) => (i === j ? 1 : 0)));
  for (const A of layers) {
    if (A.length !== n || A.some((r) => r.length !== n)) {
      throw new Error("every rolled-out map must be " + n + " x " + n);
    }
    const mixed = A.map((r, q) => {
      const out = Float64Array.from(r);
      out[q] += 1; // (A + I) / 2, and the 1/2 goes with the normalisation
      let s = 0; for (let k = 0; k < n; k++) s += out[k];
      for (let k = 0; k < n; k++) out[k] /= s;
      return out;
    });
    R = mixed.map((a) => { // a later layer acts on what the earlier ones made: Â R
      const out = new Float64Array(n);
      for (let m = 0; m < n; m++) if (a[m]) for (let k = 0; k < n; k++) out[k] += a[m] * R[m][k];
      return out;
    });
  }
  return R;
}

if (typeof module !== "undefined") module.exports = { rollout };
