// precprobe report page: renders the JSON in #precprobe-data (written by
// precprobe::build_report_data) with uPlot charts, one canvas heat map and paged tables.
// Every chart container gets data-points (points drawn) so tests can check it through the DOM;
// window.precprobeReport.charts holds the uPlot instances.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("precprobe-data").textContent);
  const R = (window.precprobeReport = { charts: {}, data: D });
  const main = document.getElementById("report");
  const COLORS = ["#2e90fa", "#d92d20", "#079455", "#dc6803", "#7a5af8", "#667085"];

  // ---- small DOM helpers -------------------------------------------------------------
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of kids.flat()) if (c !== null && c !== undefined)
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number") {
      if (!isFinite(v)) return String(v);
      if (Number.isInteger(v) && Math.abs(v) < 1e15) return String(v);
      const a = Math.abs(v);
      return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(4) : v.toPrecision(6);
    }
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }
  function section(id, title, ...kids) {
    const s = el("section", { id }, el("h2", { text: title }), ...kids);
    main.appendChild(s);
    document.getElementById("toc").appendChild(el("a", { href: "#" + id, text: title }));
    return s;
  }
  function note(text) { return el("p", { class: "note", text }); }
  // Identifying fields first, in this order; the rest as they come.
  const KEY_ORDER = ["name", "op", "step", "rank", "seq", "scope", "direction", "node", "params",
                     "#", "io", "index", "dtype", "dtype_n", "dtype_b", "shape", "shape_n", "shape_b", "numel",
                     "min", "max", "mean", "norm", "nan", "pinf", "ninf", "zero"];
  function ordered(keys) {
    const rank = (k) => { const i = KEY_ORDER.indexOf(k); return i < 0 ? KEY_ORDER.length : i; };
    return keys.map((k, i) => [k, i]).sort((a, b) => rank(a[0]) - rank(b[0]) || a[1] - b[1]).map((x) => x[0]);
  }
  function kvTable(obj) {
    const t = el("table", { class: "kv" });
    for (const k of ordered(Object.keys(obj || {}))) {
      const v = obj[k];
      const scalars = Array.isArray(v) && v.length <= 20 && v.every((x) => x === null || typeof x !== "object");
      const val = scalars ? el("span", { text: v.map(fmt).join(", ") })
        : v !== null && typeof v === "object"
        ? el("details", {}, el("summary", { text: Array.isArray(v) ? `${v.length} items` : "{…}" }),
             el("pre", { text: JSON.stringify(v, null, 2) }))
        : el("span", { text: fmt(v) });
      t.appendChild(el("tr", {}, el("th", { text: k }), el("td", {}, val)));
    }
    return t;
  }

  // ---- sortable, filterable, paged table ----------------------------------------------
  // columns: [{key, label, num}] (derived from the rows' scalar fields when omitted).
  function dataTable(id, rows, opts) {
    opts = opts || {};
    const cols = opts.columns || inferColumns(rows);
    const pageSize = opts.pageSize || 50;
    let view = rows.slice(), page = 0, sortKey = opts.sortKey || null, sortDir = opts.sortDir || -1;
    const box = el("div", { class: "tablebox" });
    const info = el("span", { class: "note" });
    const filter = el("input", { type: "search", placeholder: "filter (substring, any column)",
                                 "aria-label": "filter " + id });
    const prev = el("button", { text: "‹ prev", onclick: () => { page--; draw(); } });
    const next = el("button", { text: "next ›", onclick: () => { page++; draw(); } });
    const wrap = el("div", { id, class: "datatable", "data-rows": String(rows.length) },
                    el("div", { class: "tabletools" }, filter, prev, next, info), box);
    const table = el("table"), thead = el("thead"), tbody = el("tbody");
    table.append(thead, tbody); box.appendChild(table);
    const hr = el("tr");
    cols.forEach((c) => {
      const th = el("th", { class: "sortable", text: c.label || c.key, "data-key": c.key,
                            onclick: () => { sortDir = sortKey === c.key ? -sortDir : (c.num ? -1 : 1);
                                             sortKey = c.key; applySort(); page = 0; draw(); } });
      hr.appendChild(th);
    });
    thead.appendChild(hr);
    filter.addEventListener("input", () => {
      const q = filter.value.trim().toLowerCase();
      view = q ? rows.filter((r) => cols.some((c) => fmt(r[c.key]).toLowerCase().includes(q))) : rows.slice();
      applySort(); page = 0; draw();
    });
    function applySort() {
      if (!sortKey) return;
      const k = sortKey;
      view.sort((a, b) => {
        const x = a[k], y = b[k];
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        if (typeof x === "number" && typeof y === "number") {
          if (isNaN(x)) return 1; if (isNaN(y)) return -1;
          return (x - y) * sortDir;
        }
        return String(x).localeCompare(String(y)) * sortDir;
      });
      hr.querySelectorAll("th").forEach((th) => {
        th.classList.toggle("sorted-asc", th.dataset.key === k && sortDir > 0);
        th.classList.toggle("sorted-desc", th.dataset.key === k && sortDir < 0);
      });
    }
    function draw() {
      const pages = Math.max(1, Math.ceil(view.length / pageSize));
      page = Math.min(Math.max(page, 0), pages - 1);
      tbody.textContent = "";
      for (const r of view.slice(page * pageSize, (page + 1) * pageSize)) {
        const tr = el("tr", { class: opts.highlight && opts.highlight(r) ? "hl" : null });
        cols.forEach((c) => tr.appendChild(el("td", { class: c.num ? "num" : null, text: fmt(r[c.key]) })));
        tbody.appendChild(tr);
      }
      prev.disabled = page === 0; next.disabled = page >= pages - 1;
      info.textContent = `${view.length} of ${rows.length} rows` +
        (opts.total > rows.length ? ` (${opts.total} in the dump; the first ${rows.length} kept)` : "") +
        ` · page ${page + 1}/${pages}`;
      wrap.dataset.shown = String(tbody.children.length);
    }
    applySort();
    // Open on the page of the first highlighted row (the first divergent op of a compare
    // table can be hundreds of rows down).
    if (opts.highlight) {
      const at = view.findIndex((r) => opts.highlight(r));
      if (at > 0) page = Math.floor(at / pageSize);
    }
    draw();
    return wrap;
  }
  // Scalar fields of the rows, the usual identifying ones first.
  function inferColumns(rows) {
    const keys = new Map();
    for (const r of rows.slice(0, 200))
      for (const [k, v] of Object.entries(r))
        if (v === null || typeof v !== "object") {
          const num = typeof v === "number";
          if (!keys.has(k)) keys.set(k, num); else if (num) keys.set(k, true);
        }
    return ordered([...keys.keys()]).map((key) => ({ key, num: keys.get(key) }));
  }

  // ---- charts -------------------------------------------------------------------------
  function chart(id, opts, data, parent) {
    const box = el("div", { class: "chart", id });
    parent.appendChild(box);
    const width = Math.max(480, Math.min(1360, main.clientWidth - 10));
    const o = Object.assign({ width, height: 260, scales: { x: { time: false } } }, opts);
    o.axes = o.axes || [{}, {}];
    o.axes[0] = Object.assign({ incrs: INT_INCRS }, o.axes[0]);  // steps and op indices are integers
    const u = new uPlot(o, data, box);
    let pts = 0;
    for (let s = 1; s < data.length; s++) for (const v of data[s]) if (v !== null && v !== undefined) pts++;
    box.dataset.points = String(pts);
    box.dataset.series = String(data.length - 1);
    R.charts[id] = u;
    return u;
  }
  // A value axis whose labels fit (1.1e+13, not "0,000"), logarithmic when the positive values
  // span more than three decades (a loss that explodes).
  function valueAxes(...series) {
    const v = series.flat().filter((x) => typeof x === "number" && isFinite(x));
    let lo = Infinity, hi = -Infinity;
    for (const x of v) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
    const log = v.length > 0 && lo > 0 && hi / lo > 1e3;
    const label = (x) => (typeof x === "number" && x !== 0 && (Math.abs(x) >= 1e5 || Math.abs(x) < 1e-3) ? x.toExponential(1) : fmt(x));
    return { scales: { x: { time: false }, y: log ? { distr: 3 } : {} },
             axes: [{}, { size: 72, values: (u, vals) => vals.map(label) }] };
  }
  const INT_INCRS = [];
  for (let p = 1; p <= 1e12; p *= 10) INT_INCRS.push(p, 2 * p, 5 * p);
  const line = (label, stroke, extra) => Object.assign({ label, stroke, width: 1.2, spanGaps: false }, extra || {});
  const dots = (label, color, size) => ({ label, stroke: color, fill: color, width: 0, paths: () => null,
                                          points: { show: true, size: size || 7, fill: color, stroke: color } });
  // Ticks at powers of two, at most ~8 of them (uPlot puts one at every power).
  function log2Splits(u, axis, min, max) {
    const lo = Math.floor(Math.log2(min)), hi = Math.ceil(Math.log2(max));
    const stride = Math.max(1, Math.ceil((hi - lo) / 8)), out = [];
    for (let k = lo; k <= hi; k += stride) out.push(2 ** k);
    return out;
  }
  // Positions of a sorted x array nearest to each value of `xs` (markers onto bucketed series).
  function bucketIndex(steps, s) {
    let lo = 0, hi = steps.length - 1;
    while (lo < hi) { const m = (lo + hi + 1) >> 1; if (steps[m] <= s) lo = m; else hi = m - 1; }
    return lo;
  }

  // ---- sections -----------------------------------------------------------------------
  // The run's facts, meta.json, config and counters: collapsed, at the end.
  function renderHeader() {
    const s = section("run", "Run details");
    (D.runs || []).forEach((run, i) => {
      s.appendChild(el("h3", { text: (D.runs.length > 1 ? (i === 0 ? "Run A: " : "Run B (reference): ") : "") + run.path }));
      const sum = run.summary || {};
      const st = sum.streams || run.streams || [];
      const dropped = sum.dropped || 0;
      const trunc = st.filter((x) => x.truncated);
      const steps = sum.step_min !== undefined && sum.step_min !== null
        ? `${sum.step_min} … ${sum.step_max}` + (sum.steps && sum.steps.count ? ` (${sum.steps.count} steps with ops)` : "")
        : run.steps ? `${run.steps.first} … ${run.steps.last} (${run.steps.count} steps)` : "n/a";
      const facts = {
        ranks: (run.ranks || []).map((r) => r.rank).join(", "),
        world_size: ((run.ranks || [])[0] || {}).world_size,
        steps,
        op_records: sum.op_records, scaler_records: sum.scaler_records,
        grad_records: sum.grad_records, scalar_records: sum.scalar_records,
        ops_with_nonfinite_output: sum.nonfinite_op_records,
        dropped_records: dropped,
        truncated_streams: trunc.length ? trunc.map((x) => `${x.path} (${x.truncated_bytes} B: ${x.message})`).join("; ") : "none",
      };
      const box = el("div", { class: "grid" }, kvTable(facts));
      const warn = [];
      if (dropped) warn.push(`${dropped} records were dropped (overflow_policy = drop): counts below are lower bounds.`);
      if (trunc.length) warn.push(`${trunc.length} stream(s) end in a truncated frame: the run was killed mid-write.`); if (sum.run && !sum.run.stopped) warn.push(`${sum.run.text}.`);
      warn.forEach((w) => s.appendChild(el("p", { class: "warn", text: w })));
      s.appendChild(el("details", { class: "run-details" }, el("summary", { text: "records, meta.json, config, counters" }), box));
      // meta.json of rank 0: its plain fields (versions, host, task, times) in one table, each
      // object (config, seed_report, counters, writer) in its own.
      const meta = ((run.ranks || [])[0] || {}).meta || {};
      const plain = {}, objects = [];
      for (const [k, v] of Object.entries(meta)) {
        if (["rank", "world_size"].includes(k)) continue;
        if (v !== null && typeof v === "object" && !Array.isArray(v)) objects.push([k, v]); else plain[k] = v;
      }
      if (Object.keys(plain).length) box.appendChild(el("div", {}, el("h3", { text: "meta.json" }), kvTable(plain)));
      const rankOf = (k) => { const i = ["seed_report", "seed", "versions", "config"].indexOf(k); return i < 0 ? 9 : i; };
      objects.sort((a, b) => rankOf(a[0]) - rankOf(b[0]));
      for (const [k, v] of objects) box.appendChild(el("div", {}, el("h3", { text: k }), kvTable(v)));
      s.appendChild(el("details", {}, el("summary", { text: "meta.json of every rank" }),
                       el("pre", { text: JSON.stringify(run.ranks, null, 2) })));
      if (run.summary) s.appendChild(el("details", {}, el("summary", { text: "precprobe summary --json" }),
                                        el("pre", { text: JSON.stringify(run.summary, null, 2) })));
    });
  }

  // The answer first: what was recorded, the origin of the first NaN/Inf, the replayed
  // anomalies, the losses, watchpoint hits, bad gradients, the checklist's problems (likely
  // cause first), data lost.
  function renderVerdict() {
    const run = (D.runs || [])[0] || {};
    const sum = run.summary || {};
    const C = D.checklist || { items: [], likely_causes: [] };
    const item = (id) => (C.items || []).find((c) => c.id === id);
    const s = section("verdict", "Verdict");
    const rows = [];
    const row = (label, text, cls) => rows.push(el("tr", { class: cls || "" }, el("th", { text: label }), el("td", { text })));
    row("recorded", sum.step_min !== undefined && sum.step_min !== null
      ? `steps ${sum.step_min} … ${sum.step_max} on ${(run.ranks || []).length} rank(s), ${fmt(sum.op_records)} op records`
      : `no op records on ${(run.ranks || []).length} rank(s)`);
    const ov = item("mp.overflow"); if (sum.run && !sum.run.stopped) row("run", sum.run.text, "bad");  // before anything reads as a whole run
    if (ov && ov.verdict === "problem") row("NaN/Inf", ov.evidence, "bad");
    else if (sum.nonfinite_op_records) row("NaN/Inf", `in the outputs of ${sum.nonfinite_op_records} op records`, "bad");
    else if (sum.op_records) row("NaN/Inf", "none in the op records", "ok");
    if (sum.masking) row("masking", sum.masking.text, "ok");  // a mask's -inf: intent, not overflow
    const replays = sum.anomalies || [];  // the first rank's replayed steps ("record": "on_anomaly")
    replays.forEach((a) => { if (a.rank === replays[0].rank) row("replay", a.text, a.reproduced ? "bad" : "warn"); });
    const lt = item("hp.loss_trend");
    const f = (lt && lt.figures) || {};
    const lossCls = lt && lt.verdict === "problem" ? "bad" : "";
    const lossText = (first, firstStep, last, lastStep, bad) => {
      let t = `${first === null ? "NaN" : fmt(first)} (step ${firstStep}) → ${last === null ? "NaN" : fmt(last)} (step ${lastStep})`;
      if (bad !== undefined && bad !== null) t += `, first non-finite at step ${bad}`;
      return t;
    };
    const losses = sum.losses || [];  // each logged loss, by name unless the one is "loss"
    if (losses.length) {
      const plain = losses.length === 1 && losses[0].name === "loss";
      losses.slice(0, 4).forEach((l) => row("loss", (plain ? "" : `${l.name} `) +
        lossText(l.first_value, l.first_step, l.last_value, l.last_step, l.nonfinite_step), lossCls));
    } else if (f.first_value !== undefined) {
      row("loss", lossText(f.first_value, f.first_step, f.last_value, f.last_step, f.nonfinite_step), lossCls);
    }
    // Anomalies are the replayed bad steps only; watchpoint hits and bad gradients have rows of their own.
    row("anomalies", replays.length ? `${replays.length} replayed step(s) (above)` : "none", replays.length ? "bad" : "ok");
    const hits = sum.watch_hits || [];  // earliest first
    if (hits.length) {
      const total = hits.reduce((n, h) => n + h.count, 0);
      row("watchpoints", `${total} hits (earliest: ${hits[0].param} ${hits[0].watch} at step ${hits[0].first_step})`, "warn");
    } else if (sum.grad_records) {
      row("watchpoints", "none", "ok");
    }
    const W = D.op_watch;  // precprobe watch DIR --json: the op watchpoints
    if (W && W.hits_total) {
      const e = W.early || W.hits[0];
      let t = `${W.hits_total} hit${W.hits_total === 1 ? "" : "s"} (earliest: ${e.watch} in ${e.module || "data"} at step ${e.step}`;
      if (W.early && W.steps_earlier !== null) t += `, ${W.steps_earlier} steps before the first NaN/Inf at step ${W.first_nonfinite_step}`;
      row("op watch", t + ")", "warn");
    } else if (W) {
      row("op watch", "none", "ok");
    }
    const grads = [];
    if (sum.nonfinite_grad_records) grads.push(`${sum.nonfinite_grad_records} records with NaN/Inf`);
    if (D.scale && D.scale.skipped_total) grads.push(`${D.scale.skipped_total} step(s) skipped by the GradScaler`);
    if (grads.length) row("gradients", grads.join("; "), "warn");
    const causes = C.likely_causes || [];
    row("checklist", causes.length ? `${causes.length} problem(s), likely cause first` : "no problem",
         causes.length ? "bad" : "ok");
    const st = sum.streams || run.streams || [];
    const lost = sum.run && !sum.run.stopped ? [sum.run.complete_through === null ? "partial: no step complete (the run did not stop)" : `partial: complete through step ${sum.run.complete_through} (the run did not stop)`] : [];
    if (sum.dropped) lost.push(`${sum.dropped} records dropped (writer queue full)`);
    st.filter((x) => x.truncated).forEach((x) => lost.push(`${x.path} truncated (${x.truncated_bytes} B lost)`));
    row("data", lost.length ? lost.join("; ") : "complete", sum.run && !sum.run.stopped ? "bad" : lost.length ? "warn" : "ok");
    s.appendChild(el("table", { class: "verdict" }, el("tbody", {}, ...rows)));
    if (causes.length) {
      const ol = el("ol", { id: "likely-causes" });
      causes.forEach((id) => { const c = item(id); if (c) ol.appendChild(el("li", {}, el("b", { text: `${c.id}: ${c.title}. ` }), el("span", { text: c.evidence }))); });
      s.appendChild(ol);
    }
    if ((C.items || []).length) {
      s.appendChild(el("details", {}, el("summary", { text: "every checklist item (precprobe check)" }),
        dataTable("table-checklist", C.items.map((c) => ({ id: c.id, verdict: c.verdict, title: c.title, evidence: c.evidence })),
                  { columns: [{ key: "id" }, { key: "verdict" }, { key: "title" }, { key: "evidence" }] })));
    }
  }

  // Every scalar logged with log_scalar other than the loss (drawn above), one chart each.
  function renderScalars() {
    const list = (D.scalars || []).filter((c) => !(D.loss && c.name === D.loss.name) && c.step && c.step.length);
    if (!list.length) return;
    const s = section("scalars", "Scalars");
    s.appendChild(note(`${list.length} scalar(s) logged with log_scalar besides the loss.`));
    list.forEach((c, i) => {
      s.appendChild(el("h3", { text: c.name }));
      const one = c.bucket === 1;
      chart(`chart-scalar-${i}`, Object.assign(valueAxes(c.max, c.min), {
                                   series: [{ label: "step" }, line(one ? c.name : "max", COLORS[i % COLORS.length]), line("min", COLORS[2], { show: !one })],
                                   bands: [{ series: [1, 2], fill: "rgba(46,144,250,.15)" }] }),
            [c.step, c.max, c.min], s);
    });
  }

  function renderLoss() {
    const L = D.loss;
    if (!L || !L.step || !L.step.length) return;
    const s = section("loss", "Loss");
    s.appendChild(note((L.from_op ? `The output of ${L.from_op} in each step (no "loss" scalar logged; dbg.log_scalar("loss", v) chooses one), ${L.n} values`
                                   : `Scalar "${L.name}" logged with log_scalar, ${L.n} values`) +
      (L.bucket > 1 ? `; ${L.bucket} steps a bucket, its min and max drawn (spikes survive).` : ".")));
    const one = L.bucket === 1;  // one point a bucket: min = max, draw one line
    chart("chart-loss", Object.assign(valueAxes(L.max, L.min), {
                          series: [{ label: "step" }, line(one ? L.name : "max", COLORS[0]), line("min", COLORS[2], { show: !one })],
                          bands: [{ series: [1, 2], fill: "rgba(46,144,250,.15)" }] }),
          [L.step, L.max, L.min], s);
  }

  function renderScale() {
    const S = D.scale;
    if (!S || !S.step || !S.step.length) return;
    const s = section("scale", "Loss scale");
    s.appendChild(note(`${S.n} GradScaler updates (rank ${S.rank}, optimizer ${S.optimizer}, its parameter groups merged); ` +
      `${S.skipped_total} skipped steps, ${S.backoffs} backoffs, ${S.growths} growths.` +
      (S.bucket > 1 ? ` ${S.bucket} updates a bucket: min and max scale drawn.` : "")));
    // Markers are placed at the bucket holding the event, at that bucket's scale.
    const n = S.step.length, skip = new Array(n).fill(null), back = new Array(n).fill(null), grow = new Array(n).fill(null);
    for (let i = 0; i < n; i++) if (S.skipped[i] > 0) skip[i] = S.min[i];
    for (const e of S.events) {
      const i = bucketIndex(S.step, e.step);
      if (e.event === "growth") grow[i] = S.max[i]; else back[i] = S.min[i];
    }
    chart("chart-scale", {
      scales: { x: { time: false }, y: { distr: 3, log: 2 } },
      axes: [{ label: "step" }, { label: "scale (log2)", splits: log2Splits, size: 60,
                                  space: 18,
                                  values: (u, v) => v.map((x) => (x > 0 ? "2^" + Math.round(Math.log2(x)) : "")) }],
      series: [{ label: "step" }, line(S.bucket === 1 ? "scale" : "scale max", COLORS[0]), line("scale min", COLORS[5], { show: S.bucket > 1 }),
               dots("backoff", COLORS[3], 11), dots("growth", COLORS[2], 8), dots("skipped", COLORS[1], 5)],
    }, [S.step, S.max, S.min, back, grow, skip], s);
    if (S.events.length)
      s.appendChild(el("details", {}, el("summary", { text: `${S.events_total} scale events (backoff/growth/collapse)` }),
                       dataTable("table-scale-events", S.events, { total: S.events_total, pageSize: 25 })));
  }

  // The heat maps' painter lives in report_heatmap.js (the same script element, before this).
  const heatmap = (s, o) => window.precprobeHeatmap(s, o, { el, fmt });

  function renderGrads() {
    const G = D.grads;
    if (!G || !G.params || !G.params.length) return;
    const s = section("grads", "Gradient norms");
    s.appendChild(note(`L2 norm of each parameter's gradient per step (${G.n} records, ${G.params.length} parameters` +
      (G.params_total > G.params.length ? ` of ${G.params_total}` : "") + `). Colour: log10 of the largest norm in the cell` +
      (G.bucket > 1 ? ` (${G.bucket} steps a column)` : "") + "; red: a non-finite gradient in the cell; grey: no gradient."));
    const { cv, g, wrap, tip, labelW, cw, ch, rows, cols } = heatmap(s, {
      id: "heatmap", legendId: "heat-legend", legend: "log10 ‖g‖: ", empty: "no gradient",
      labels: G.params, values: G.norm, bad: G.bad, steps: G.steps, maxLabelW: 260 });
    const base = g.getImageData(0, 0, cv.width, cv.height);
    function cellAt(ev) {
      const b = cv.getBoundingClientRect();
      const c = Math.floor((ev.clientX - b.left - labelW) / cw), r = Math.floor((ev.clientY - b.top) / ch);
      return c >= 0 && c < cols && r >= 0 && r < rows ? [r, c] : null;
    }
    cv.addEventListener("mousemove", (ev) => {
      const rc = cellAt(ev);
      if (!rc) { tip.style.display = "none"; return; }
      const [r, c] = rc, last = c + 1 < cols ? G.steps[c + 1] - 1 : G.last_step;
      tip.textContent = `${G.params[r]} · steps ${G.steps[c]}–${last} · max ‖g‖ ${fmt(G.norm[r][c])}` +
        (G.bad[r][c] ? ` · ${G.bad[r][c]} non-finite` : "");
      tip.style.display = "block"; tip.style.left = (ev.offsetX + 12) + "px"; tip.style.top = (ev.offsetY + 12) + "px";
    });
    cv.addEventListener("mouseleave", () => { tip.style.display = "none"; });
    R.highlightCell = (r, c) => {
      g.putImageData(base, 0, 0);
      g.strokeStyle = "#ff00ff"; g.lineWidth = 2;
      g.strokeRect(labelW + c * cw - 1, r * ch - 1, cw + 2, ch + 2);
      cv.dataset.highlight = `${r},${c}`;
      wrap.scrollLeft = Math.max(0, labelW + c * cw - wrap.clientWidth / 2);
      cv.scrollIntoView({ block: "center" });
    };
    if (G.watch && G.watch.length) {
      s.appendChild(el("h3", { text: `Watchpoint hits (${G.watch_total})` }));
      const ul = el("ul", { id: "watch-hits" });
      for (const w of G.watch) {
        const r = G.params.indexOf(w.param), c = bucketIndex(G.steps, w.step);
        ul.appendChild(el("li", {}, el("a", { class: "cell", href: "#heatmap", "data-row": r, "data-col": c,
                                              onclick: (ev) => { ev.preventDefault(); if (r >= 0) R.highlightCell(r, c); },
                                              text: `step ${w.step} · ${w.param}` }),
                          " — " + (w.names || []).join(", ")));
      }
      s.appendChild(ul);
      if (G.watch_total > G.watch.length) s.appendChild(note(`first ${G.watch.length} of ${G.watch_total} hits listed`));
    }
  }

  // Activations: per op that reads a parameter × step, colour = log10 of the largest finite
  // |output|, red = NaN/Inf in an output: values growing before they overflow.
  function renderActivations() {
    const A = D.activations;
    if (!A || !A.rows || !A.rows.length) return;
    const s = section("activations", "Activations");
    s.appendChild(note(`Largest |output| of each op that reads a parameter (parameter · op), per step (${A.n} op calls, ` +
      `${A.rows.length} rows` + (A.rows_total > A.rows.length ? ` of ${A.rows_total}` : "") + "). Colour: log10 of the largest finite |output| in the cell" +
      (A.bucket > 1 ? ` (${A.bucket} steps a column)` : "") + "; red: NaN/Inf in an output; grey: not run."));
    const { cv, tip, labelW, cw, ch, rows, cols } = heatmap(s, {
      id: "activations-heatmap", legendId: "act-legend", legend: "log10 max |output|: ", empty: "not run",
      labels: A.rows, values: A.abs_max, bad: A.bad, steps: A.steps, maxLabelW: 320 });
    cv.addEventListener("mousemove", (ev) => {
      const b = cv.getBoundingClientRect();
      const c = Math.floor((ev.clientX - b.left - labelW) / cw), r = Math.floor((ev.clientY - b.top) / ch);
      if (!(c >= 0 && c < cols && r >= 0 && r < rows)) { tip.style.display = "none"; return; }
      const last = c + 1 < cols ? A.steps[c + 1] - 1 : A.last_step;
      tip.textContent = `${A.rows[r]} · steps ${A.steps[c]}–${last} · max |output| ${fmt(A.abs_max[r][c])}` +
        (A.bad[r][c] ? ` · ${A.bad[r][c]} with NaN/Inf` : "");
      tip.style.display = "block"; tip.style.left = (ev.offsetX + 12) + "px"; tip.style.top = (ev.offsetY + 12) + "px";
    });
    cv.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  }

  // The op watchpoints' hits (docs/watchpoints.md), recomputed from the op records as
  // `precprobe watch DIR` does; the run's live hits are said beside them.
  function renderOpWatch() {
    const W = D.op_watch;
    if (!W || !W.hits_total) return;
    const s = section("op-watch", "Op watchpoints");
    let text = `${W.hits_total} hits on the outputs of the model's forward ops, each the start of a condition out of line with the op's own history.`;
    if (W.live) text += W.same_as_live ? " The run judged them live: the same hits." : ` The run judged them live: ${W.recorded} hits (differing options or a cut-off run).`;
    if (W.early && W.steps_earlier !== null) text += ` The first warning came ${W.steps_earlier} steps before the first NaN/Inf (step ${W.first_nonfinite_step}, ${W.first_nonfinite_op}).`;
    s.appendChild(note(text));
    s.appendChild(dataTable("table-op-watch", W.hits, {
      columns: ["step", "rank", "module", "watch", "record", "value", "threshold", "detail"].map((key) => ({ key })) }));
    if (W.hits_total > W.hits.length) s.appendChild(note(`first ${W.hits.length} of ${W.hits_total} hits listed`));
  }

  function opCard(o, title, id) {
    const card = el("div", { class: "card", id });
    card.appendChild(el("h3", { text: title }));
    const scalars = {}, lists = [];
    for (const [k, v] of Object.entries(o)) {
      if (Array.isArray(v) && v.length && typeof v[0] === "object") lists.push([k, v]);
      else scalars[k] = v;
    }
    card.appendChild(kvTable(scalars));
    for (const [k, v] of lists) {
      card.appendChild(el("h3", { text: k }));
      // Per-argument rows; nested statistics (compare: {n, b, diff, rel_pct}) flattened.
      const rows = v.map((a, i) => {
        const r = { "#": i };
        for (const [key, val] of Object.entries(a))
          if (val && typeof val === "object" && !Array.isArray(val))
            for (const [k2, v2] of Object.entries(val)) r[`${key}.${k2}`] = v2;
          else r[key] = Array.isArray(val) ? `[${val.join(",")}]` : val;
        return r;
      });
      card.appendChild(dataTable(`${id}-${k}`, rows, { pageSize: 20, highlight: (r) => (r.nan || 0) + (r.pinf || 0) + (r.ninf || 0) > 0 || r.warning === true }));
    }
    return card;
  }

  function renderNonFinite() {
    const N = D.nonfinite, O = D.overflow;
    if (!N && !O) return;
    const s = section("nonfinite", "Non-finite values");
    if (N && N.step && N.step.length) {
      s.appendChild(note(`Ops whose outputs held NaN or Inf, per step (${N.steps_with} of ${N.steps} steps have some` +
        (N.bucket > 1 ? `; ${N.bucket} steps a bucket, the largest count drawn` : "") + ")."));
      const origin = new Array(N.step.length).fill(null);
      const os = O && O.found ? O.step : undefined;
      if (os !== undefined) { const i = bucketIndex(N.step, os); origin[i] = N.ops[i] || 0; }
      chart("chart-nonfinite", {
        axes: [{ label: "step" }, { label: "ops with NaN/Inf" }],
        // Points, not a line: steps without op records (a step filter) must not look like zeros.
        series: [{ label: "step" }, dots("ops with NaN/Inf", COLORS[1], 7), dots("none", "#98a2b3", 3),
                 dots("origin step", "#7a5af8", 12)],
      }, [N.step, N.ops.map((v) => (v > 0 ? v : null)), N.ops.map((v) => (v === 0 ? 0 : null)), origin], s);
    }
    if (O && O.found) {
      const o = Object.assign({}, O);
      for (const k of ["found", "any_nonfinite", "ranks", "run", "steps", "masking"]) delete o[k];
      if (o.reason === null) delete o.reason;
      if (o.masked_by) o.masked_by = `${o.masked_by.name} (seq ${o.masked_by.seq}${o.masked_by.module ? ", module " + o.masked_by.module : ""})`;
      else delete o.masked_by;
      s.appendChild(opCard(o, "Origin: the first op whose output went non-finite while its inputs were finite", "origin-op"));
    } else if (O) {
      s.appendChild(el("div", { class: "card ok", id: "origin-op" }, O.any_nonfinite
        ? "Non-finite values were recorded, but no op turned finite inputs into a non-finite output: they came from outside the observed ops (data, parameters, or code that ran before recording started)."
        : "No non-finite value was recorded." + (O.run && !O.run.stopped ? ` But ${O.run.text}: what came after is not in the dump.` : "")));
    }
    if (O && O.masking) s.appendChild(note(`Masking: ${O.masking.text}.`));
    if (O) s.appendChild(el("details", {}, el("summary", { text: "precprobe overflow --json" }), el("pre", { text: JSON.stringify(O, null, 2) })));
  }

  const COMPARE_COLS = [
    { key: "name" }, { key: "step", num: true }, { key: "rank", num: true }, { key: "seq", num: true },
    { key: "scope" }, { key: "input_error", num: true }, { key: "output_error", num: true },
    { key: "score", label: "score (added)", num: true }, { key: "warning" }, { key: "exact" },
    { key: "name_b", label: "name in B" }, { key: "seq_b", num: true }];
  function renderCompare() {
    const C = D.compare;
    if (!C) return;
    const s = section("compare", "Compare");
    s.appendChild(note(`Run A ${C.a} against run B ${C.b} (the reference). Ops are matched by name (op.call.direction) per step and rank.`));
    const res = C.result || {};
    s.appendChild(note(`${res.matched} ops matched, ${res.warnings} with a statistics warning, ${res.unmatched_count} in one run only` +
      (res.aligned_by_lcs ? `, ${res.aligned_by_lcs} (step, rank) groups aligned by LCS` : "") + "."));
    if (C.first) s.appendChild(opCard(C.first, "First divergent op: the first whose output error exceeds its input error by more than rtol (the error is its own, not inherited)", "first-divergent"));
    else s.appendChild(el("div", { class: "card ok", id: "first-divergent" }, "No op diverged beyond rtol."));
    if (res.first_unmatched) s.appendChild(el("p", { class: "warn", text: `First op present in one run only: ${res.first_unmatched.name} (step ${res.first_unmatched.step}, rank ${res.first_unmatched.rank}, run ${res.first_unmatched.side})` }));
    const P = C.per_op;
    if (P && P.index && P.index.length) {
      s.appendChild(note(`Step ${C.step}, rank ${C.rank}: ${P.metric} of each op's output against run B along execution order (` +
        (P.bucket > 1 ? `${P.bucket} ops a bucket, max drawn` : `${P.index.length} ops`) +
        `). Zero is drawn at ${fmt(P.floor)}, a structural difference (shape, dtype, NaN/Inf positions) at ${fmt(P.top)}.`));
      const first = new Array(P.index.length).fill(null);
      if (P.first_pos !== null && P.first_pos !== undefined) first[P.first_pos] = P.value[P.first_pos];
      const u = chart("chart-compare", {
        scales: { x: { time: false }, y: { distr: 3, log: 10 } },
        axes: [{ label: "op (execution order)" }, { label: P.metric, size: 70 }],
        series: [{ label: "op", value: (u, v) => (v === null || v === undefined ? "" : `#${v} ${P.name[Math.floor(v / P.bucket)] || ""}`) },
                 line(P.metric, COLORS[0], { points: { show: P.index.length < 400 } }), dots("first divergent", COLORS[1], 11)],
      }, [P.index, P.value, first], s);
      u.root.parentNode.dataset.first = P.first_pos === null ? "" : String(P.first_pos);
    }
    if (C.rows && C.rows.length) {
      s.appendChild(el("h3", { text: "Compare table" }));
      s.appendChild(dataTable("table-compare", C.rows, { total: C.rows_total, columns: COMPARE_COLS,
        highlight: (r) => C.first && r.name === C.first.name && r.step === C.first.step && r.rank === C.first.rank }));
    }
  }

  function renderTopOps() {
    const T = D.top_ops;
    if (!T) return;
    const s = section("top", "Top ops");
    if (T.by_abs_max && T.by_abs_max.length) {
      s.appendChild(el("h3", { text: "By largest |output|" }));
      s.appendChild(note(`The ${T.by_abs_max.length} op calls with the largest finite |value| in an output, of ${T.ops_total} recorded.`));
      s.appendChild(dataTable("table-top-absmax", T.by_abs_max, { sortKey: "abs_max", sortDir: -1, columns: [
        { key: "name" }, { key: "step", num: true }, { key: "rank", num: true }, { key: "seq", num: true },
        { key: "abs_max", label: "max |output|", num: true }, { key: "out_nonfinite", label: "NaN/Inf in outputs", num: true },
        { key: "dtype" }, { key: "shape" }, { key: "scope" }] }));
    }
    if (T.by_error && T.by_error.length) {
      s.appendChild(el("h3", { text: "By error against run B" }));
      s.appendChild(note("Matched ops ordered by the error they added (score = output error − input error)."));
      s.appendChild(dataTable("table-top-error", T.by_error, { sortKey: T.error_key, sortDir: -1, columns: COMPARE_COLS }));
    }
  }

  // Module x format (precprobe precision, scaling none): the worst verdict of a module's ops
  // in each format, and whether the plan keeps it in fp32.
  function renderPrecision() {
    const P = D.precision;
    if (!P) return;
    const s = section("precision", "Precision readiness");
    const names = ["fp16", "bf16", "e4m3", "e5m2"].filter((f) => P.formats[f]);
    s.appendChild(note("From the run's range statistics (precprobe precision DIR --to FORMAT): per module, the worst " +
      "verdict of its ops in each format without scaling (fits, fits_with_scaling: only with per-tensor scaling, " +
      "keep_fp32), and \u2022 where the plan keeps it in fp32 (backward ops judged at the recommended loss scale)."));
    const t = el("table", { id: "table-precision", class: "kv" });
    t.appendChild(el("tr", {}, el("th", { text: "module" }), ...names.map((f) => el("th", { text: f }))));
    for (const m of P.modules) {
      const cells = names.map((f) => {
        const c = P.formats[f].modules[m];
        if (!c) return el("td", { text: "-" });
        const cls = c.verdict === "keep_fp32" ? "bad" : c.verdict === "fits" ? "" : "warn";
        return el("td", { class: cls, text: c.verdict + (c.keep_fp32 ? " \u2022" : "") });
      });
      t.appendChild(el("tr", {}, el("th", { text: m }), ...cells));
    }
    const ls = el("tr", {}, el("th", { text: "loss scale" }), ...names.map((f) => {
      const L = P.formats[f].loss_scale;
      return el("td", { text: L ? `${fmt(L.recommended)} (${fmt(L.low)}..${fmt(L.high)})` : "-" });
    }));
    t.appendChild(ls);
    s.appendChild(t);
  }

  const steps = [renderVerdict, renderLoss, renderGrads, renderActivations, renderOpWatch, renderScalars, renderScale, renderNonFinite,
                 renderCompare, renderTopOps, renderPrecision, renderHeader];
  document.getElementById("loading").remove();
  for (const f of steps) {
    try { f(); } catch (e) {
      main.appendChild(el("p", { class: "bad", text: `${f.name} failed: ${e}` }));
      throw e;
    }
  }
  document.body.dataset.rendered = "1";
})();
