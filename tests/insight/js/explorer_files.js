"use strict";
// Where the explorer's script files are (package data of keras_tfm.insight.explorer), for the tests beside this file.
const path = require("node:path");

const EXPLORER = path.join(__dirname, "..", "..", "..", "keras_tfm", "insight", "explorer");

module.exports = { explorerFile: (name) => require(path.join(EXPLORER, name)) };
