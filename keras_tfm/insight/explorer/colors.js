"use strict";
// Colours: one per head, and the colour maps of the model view (viridis) and the image view (inferno).
// Pure: the page runs this inline, node's tests require this file.

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#843c39", "#7b4173", "#3182bd"];
const VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
                 [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];
const INFERNO = [[0, 0, 4], [40, 11, 84], [101, 21, 110], [159, 42, 99], [212, 72, 66], [245, 125, 21],
                 [250, 193, 39], [252, 255, 164]];

function color(stops, t) { // [r, g, b] at t in [0, 1] (clipped) between evenly spaced colour stops
  t = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(t)), f = t - i, a = stops[i], b = stops[i + 1];
  return [0, 1, 2].map((c) => Math.round(a[c] + f * (b[c] - a[c])));
}

if (typeof module !== "undefined") module.exports = { PALETTE, VIRIDIS, INFERNO, color };
