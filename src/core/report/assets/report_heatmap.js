// precprobe report page: the heat map painter shared by the gradient and the activation
// views of report.js. Embedded in the same script element, before report.js, which calls
// window.precprobeHeatmap(section, options, { el, fmt }) with its DOM helpers.
(function () {
  "use strict";
  function viridis(t) {
    const c = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    t = Math.min(1, Math.max(0, t)) * (c.length - 1);
    const i = Math.min(c.length - 2, Math.floor(t)), f = t - i;
    return `rgb(${c[i].map((v, k) => Math.round(v + (c[i + 1][k] - v) * f)).join(",")})`;
  }

  // A labels × steps heatmap appended to section `s`: colour = log10 of the value (viridis),
  // red = non-finite in the cell, grey = empty; its legend above it. Shared by the gradient
  // and the activation views; returns what their tooltips and highlights need.
  function heatmap(s, o, { el, fmt }) {
    let lo = Infinity, hi = -Infinity;
    for (const row of o.values) for (const v of row) if (v !== null && v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    const llo = Math.log10(lo), lhi = Math.log10(hi), span = lhi - llo || 1;
    const rows = o.labels.length, cols = o.steps.length;
    const labelW = Math.min(o.maxLabelW, 8 + 7 * Math.max(...o.labels.map((p) => p.length)));
    const cw = Math.max(2, Math.min(24, Math.floor(1100 / cols))), ch = Math.max(6, Math.min(18, Math.floor(480 / rows)));
    const cv = el("canvas", { id: o.id, width: labelW + cols * cw, height: rows * ch + 22 });
    const tip = el("div", { class: "tip" });
    const wrap = el("div", { class: "heatwrap" }, cv, tip);
    s.appendChild(el("p", { class: "note" }, o.legend, fmt(llo), el("canvas", { class: "legend-bar", id: o.legendId, width: 160, height: 10 }),
                     fmt(lhi), el("span", { class: "swatch", style: "background:#d92d20" }), "non-finite",
                     el("span", { class: "swatch", style: "background:#e4e7ec" }), o.empty));
    s.appendChild(wrap);
    const lg = document.getElementById(o.legendId).getContext("2d");
    for (let x = 0; x < 160; x++) { lg.fillStyle = viridis(x / 159); lg.fillRect(x, 0, 1, 10); }
    const g = cv.getContext("2d");
    let cells = 0, bad = 0;
    g.font = "11px system-ui, sans-serif"; g.textBaseline = "middle";
    for (let r = 0; r < rows; r++) {
      // Rows thinner than a line of text: label every k-th (the tooltip names every row).
      const every = Math.ceil(11 / ch);
      if (r % every === 0) { g.fillStyle = "#1d2330"; g.fillText(o.labels[r], 2, Math.max(6, r * ch + ch / 2), labelW - 6); }
      for (let c = 0; c < cols; c++) {
        const v = o.values[r][c], nb = o.bad[r][c];
        if (nb > 0) { g.fillStyle = "#d92d20"; bad++; }
        else if (v === null) g.fillStyle = "#e4e7ec";
        else g.fillStyle = viridis(v > 0 ? (Math.log10(v) - llo) / span : 0);
        if (v !== null || nb > 0) cells++;
        g.fillRect(labelW + c * cw, r * ch, cw, ch);
      }
    }
    g.fillStyle = "#667085";
    for (let c = 0; c < cols; c += Math.max(1, Math.ceil(cols / 8)))
      g.fillText(String(o.steps[c]), labelW + c * cw, rows * ch + 11);
    cv.dataset.rows = String(rows); cv.dataset.cols = String(cols);
    cv.dataset.points = String(cells); cv.dataset.nonfinite = String(bad);
    return { cv, g, wrap, tip, labelW, cw, ch, rows, cols };
  }

  window.precprobeHeatmap = heatmap;
})();
