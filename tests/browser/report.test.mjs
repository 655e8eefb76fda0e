// Renders precprobe HTML reports in headless Chromium (Debian's /usr/bin/chromium) through
// playwright-core and checks them through the DOM. Fails on any console error, page error or
// network request; writes a screenshot of each report next to it.
//
// Environment (set by tests/browser/tests.cmake):
//   PRECPROBE_CLI          the precprobe executable
//   PRECPROBE_MAKE_DUMP    tests/browser/make_dump.cpp built
//   PRECPROBE_MAKE_ANOMALY_DUMP  tests/cli/make_anomaly_dump.cpp built (a replayed anomaly)
//   PRECPROBE_BROWSER_OUT  output directory (dumps, reports, screenshots)
//   PRECPROBE_GOLDEN       tests/data/cli (the CLI's golden dumps)
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const CHROMIUM = process.env.PRECPROBE_CHROMIUM || "/usr/bin/chromium";
let passed = 0, failed = 0;

function die(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}
function check(cond, what) {
  if (cond) { passed++; console.log(`  ok   ${what}`); }
  else { failed++; console.error(`  FAIL ${what}`); }
}

for (const v of ["PRECPROBE_CLI", "PRECPROBE_MAKE_DUMP", "PRECPROBE_MAKE_ANOMALY_DUMP", "PRECPROBE_BROWSER_OUT",
                 "PRECPROBE_GOLDEN"])
  if (!process.env[v]) die(`${v} is not set (run through ctest)`);
if (!fs.existsSync(CHROMIUM))
  die(`${CHROMIUM} not found: install Debian's chromium (scripts/install-deps.sh does: apt-get install chromium)`);
let chromium;
try {
  ({ chromium } = await import(pathToFileURL(path.join(here, "node_modules/playwright-core/index.mjs")).href));
} catch (e) {
  die(`playwright-core is not installed in ${here}/node_modules: run 'npm ci' there (the browser.npm_ci test does): ${e.message}`);
}

const out = process.env.PRECPROBE_BROWSER_OUT;
fs.mkdirSync(out, { recursive: true });
const run = (exe, args) => execFileSync(exe, args, { cwd: out, stdio: ["ignore", "pipe", "inherit"] }).toString();

// Dumps from the real DumpWriter, reports from the real CLI.
const mk = process.env.PRECPROBE_MAKE_DUMP, cli = process.env.PRECPROBE_CLI;
run(mk, ["run_a", "--steps", "60", "--overflow-step", "30"]);
run(mk, ["run_b", "--steps", "60", "--overflow-step", "30", "--perturb", "0.2", "--diverge-seq", "5"]);
run(mk, ["run_big", "--steps", "100000", "--op-steps", "20", "--params", "6", "--overflow-step", "50000"]);
run(cli, ["report", "run_a", "-o", "report_a.html"]);
run(cli, ["report", "run_a", "--compare", "run_b", "-o", "report_compare.html"]);
run(cli, ["report", "run_big", "-o", "report_big.html"]);
run(mk, ["run_empty", "--steps", "0"]);
const golden = process.env.PRECPROBE_GOLDEN;
run(cli, ["report", path.join(golden, "overflow"), "-o", "golden_overflow.html"]);
run(cli, ["report", path.join(golden, "diverged_1pct"), "--compare", path.join(golden, "clean"), "-o", "golden_compare.html"]);
run(cli, ["report", path.join(golden, "truncated"), "-o", "golden_truncated.html"]);
run(cli, ["report", path.join(golden, "range"), "-o", "golden_range.html"]);
run(cli, ["report", "run_empty", "-o", "report_empty.html"]);
fs.rmSync(path.join(out, "run_anomaly"), { recursive: true, force: true });
run(process.env.PRECPROBE_MAKE_ANOMALY_DUMP, [path.join(out, "run_anomaly")]);
run(cli, ["report", "run_anomaly", "-o", "report_anomaly.html"]);

async function open(file) {
  const html = fs.readFileSync(path.join(out, file), "utf8");
  check(!/<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?(https?:)?\/\//i.test(html) && !/@import|url\(\s*["']?https?:/i.test(html),
        `${file}: no external references (${(html.length / 1024).toFixed(0)} KiB)`);
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "precprobe-chromium-"));
  const ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM, headless: true, offline: true,
    viewport: { width: 1400, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--disable-quic"],
  });
  const errors = [], requests = [];
  const page = ctx.pages()[0] || (await ctx.newPage());
  page.on("console", (m) => { if (m.type() === "error") errors.push(`console: ${m.text()}`); });
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  page.on("request", (r) => { if (!r.url().startsWith("file:")) requests.push(r.url()); });
  const t0 = Date.now();
  await page.goto(pathToFileURL(path.join(out, file)).href);
  await page.waitForSelector("body[data-rendered='1']", { timeout: 30000 }).catch((e) => errors.push(`not rendered: ${e.message}`));
  console.log(`${file}: rendered in ${Date.now() - t0} ms`);
  const close = async () => {
    await page.screenshot({ path: path.join(out, file.replace(/\.html$/, ".png")), fullPage: true });
    check(errors.length === 0, `${file}: no console/page errors ${errors.length ? JSON.stringify(errors) : ""}`);
    check(requests.length === 0, `${file}: no network requests ${requests.length ? JSON.stringify(requests) : ""}`);
    await ctx.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  };
  return { page, close };
}
const attr = (page, sel, name) => page.$eval(sel, (e, n) => e.dataset[n], name).catch(() => undefined);
const num = async (page, sel, name) => Number(await attr(page, sel, name));
// Points of a uPlot series counted from the instance itself, not from our data-* attribute.
const uplotPoints = (page, id, series) =>
  page.evaluate(([i, s]) => { const u = window.precprobeReport.charts[i]; return u ? u.data[s].filter((v) => v !== null && v !== undefined).length : -1; }, [id, series]);

// ---- single run --------------------------------------------------------------------
{
  const { page, close } = await open("report_a.html");
  check((await num(page, "#chart-scale", "points")) > 0, "scale chart has points");
  check((await uplotPoints(page, "chart-scale", 1)) === 60, "scale chart: 60 steps, one point each");
  check((await uplotPoints(page, "chart-scale", 5)) === 1, "scale chart: one skipped step marked");
  check((await uplotPoints(page, "chart-scale", 3)) === 1, "scale chart: one backoff marked");
  check((await uplotPoints(page, "chart-scale", 4)) === 0, "scale chart: no growth in 60 steps");
  check((await uplotPoints(page, "chart-loss", 1)) === 60, "loss chart: 60 points");
  // Every other logged scalar gets its chart: the lr, halved every 20 steps.
  check((await page.$eval("#scalars h3", (e) => e.textContent).catch(() => "")) === "lr", "scalars: the lr charted");
  check((await uplotPoints(page, "chart-scalar-0", 1)) === 60, "lr chart: 60 points");
  check((await page.evaluate(() => window.precprobeReport.charts["chart-scalar-0"].data[1][59])) === 1e-3 * 0.25,
        "lr chart: 1e-3 / 4 at step 59");
  // The verdict comes first, the run's details last.
  const ids = await page.$$eval("main > section", (ss) => ss.map((x) => x.id));
  check(ids[0] === "verdict" && ids[1] === "loss" && ids[ids.length - 1] === "run",
        `sections: verdict, loss first, run details last (${ids.join(", ")})`);
  check((await num(page, "#heatmap", "rows")) === 4 && (await num(page, "#heatmap", "cols")) === 60, "heat map 4 params x 60 steps");
  check((await num(page, "#heatmap", "points")) === 240, "heat map: 240 cells drawn");
  check((await num(page, "#heatmap", "nonfinite")) === 2, "heat map: the 2 non-finite cells of step 30 marked");
  check((await uplotPoints(page, "chart-nonfinite", 1)) === 1 && (await uplotPoints(page, "chart-nonfinite", 2)) === 59,
        "non-finite timeline: 60 steps, 1 with NaN/Inf");
  check((await page.evaluate(() => window.precprobeReport.charts["chart-nonfinite"].data[1][30])) === 10,
        "non-finite timeline: 10 ops with NaN/Inf at step 30 (seq 4..13)");
  // The op watchpoints: the +Inf of aten::mul at step 30 is the one hit (tensor_overflow); the
  // mul runs after fc2, the forward's last parameter: outside the modules, "(top level)".
  const opWatch = await page.$$eval("#verdict tr", (rs) => rs.map((r) => [r.querySelector("th")?.textContent, r.querySelector("td")?.textContent])
    .filter((x) => x[0] === "op watch").map((x) => x[1])[0] || "");
  check(opWatch === "1 hit (earliest: tensor_overflow in (top level) at step 30)", `verdict: the op watch hit named (${opWatch})`);
  check((await num(page, "#table-op-watch", "rows")) === 1, "op watchpoints: one hit listed");
  const hitRow = await page.$eval("#table-op-watch tbody tr", (e) => e.textContent).catch(() => "");
  check(/aten::mul\.\d+\.forward/.test(hitRow) && /tensor_overflow/.test(hitRow), `op watchpoints: the hit's record and rule (${hitRow})`);
  const origin = await page.$eval("#origin-op", (e) => e.textContent).catch(() => "");
  check(/aten::mul/.test(origin) && /model\/head/.test(origin), "origin op aten::mul with scope model/head shown");
  // Sorting: the top-ops table sorted by abs_max descending, then ascending on a click.
  const col = await page.$$eval("#table-top-absmax th", (ths) => ths.findIndex((t) => t.dataset.key === "abs_max"));
  const colValues = () => page.$$eval(`#table-top-absmax tbody tr td:nth-child(${col + 1})`, (tds) => tds.map((t) => Number(t.textContent)));
  let v = await colValues();
  check(v.length > 0 && v.every((x, i) => i === 0 || v[i - 1] >= x), "top ops sorted by abs_max, descending");
  await page.click(`#table-top-absmax th[data-key="abs_max"]`);
  v = await colValues();
  check(v.length > 0 && v.every((x, i) => i === 0 || v[i - 1] <= x), "click sorts ascending");
  await page.fill("#table-top-absmax input[type=search]", "nll_loss_backward");
  const shown = await page.$$eval("#table-top-absmax tbody tr", (trs) => trs.map((t) => t.textContent));
  check(shown.length > 0 && shown.every((t) => t.includes("nll_loss_backward")), "filter keeps matching rows only");
  await page.fill("#table-top-absmax input[type=search]", "");
  // A watchpoint hit links to its heat map cell (none in 60 steps: checked on the big run).
  await close();
}

// ---- compare -------------------------------------------------------------------------
{
  const { page, close } = await open("report_compare.html");
  const pts = await num(page, "#chart-compare", "points");
  check(pts > 0, `compare chart has points (${pts})`);
  check(/^[0-9]+$/.test((await attr(page, "#chart-compare", "first")) || ""), "compare chart marks the first divergent op");
  check((await uplotPoints(page, "chart-compare", 2)) === 1, "exactly one first-divergent marker");
  check((await num(page, "#table-compare", "rows")) > 0, "compare table has rows");
  const first = await page.$eval("#compare .card", (e) => e.textContent).catch(() => "");
  check(/aten::log_softmax\.0\.forward/.test(first), "first divergent op aten::log_softmax.0.forward (seq 5, where run B was perturbed) shown");
  check((await attr(page, "#chart-compare", "first")) === "5", "marker at op #5 of the step");
  await close();
}

// ---- 100 000 steps ---------------------------------------------------------------------
{
  const size = fs.statSync(path.join(out, "report_big.html")).size;
  check(size < 4 * 1024 * 1024, `100k-step report is ${(size / 1048576).toFixed(2)} MiB (< 4 MiB)`);
  const { page, close } = await open("report_big.html");
  const n = await uplotPoints(page, "chart-scale", 1);
  check(n > 100 && n <= 2000, `scale history downsampled to ${n} buckets`);
  check((await uplotPoints(page, "chart-scale", 3)) === 13, "all 13 backoffs survive downsampling");
  check((await uplotPoints(page, "chart-scale", 4)) === 38, "all 38 growths survive downsampling");
  const maxLoss = await page.evaluate(() => Math.max(...window.precprobeReport.charts["chart-loss"].data[1]));
  check(maxLoss > 5, `the loss spike at step 50000 survives downsampling (max ${maxLoss.toFixed(2)})`);
  check((await num(page, "#heatmap", "nonfinite")) > 0, "non-finite gradient cells marked on the 100k heat map");
  const links = await page.$$("#watch-hits a");
  check(links.length === 19, `19 watchpoint hits listed (${links.length})`);
  if (links.length) {
    await links[0].click();
    const want = `${await links[0].getAttribute("data-row")},${await links[0].getAttribute("data-col")}`;
    check((await attr(page, "#heatmap", "highlight")) === want, `watch hit link highlights its cell (${want})`);
  }
  await close();
}

// ---- a dump with meta.json only: every section absent, still no error --------------------
{
  const { page, close } = await open("report_empty.html");
  check((await page.$$(".chart")).length === 0, "empty dump: no charts");
  check((await page.$("#run")) !== null, "empty dump: run header shown");
  await close();
}

// ---- a replayed anomaly ("record": "on_anomaly"; tests/cli/anomaly_dump.h) ----
{
  const { page, close } = await open("report_anomaly.html");
  const rows = await page.$$eval("#verdict table.verdict tr", (trs) => trs.map((t) => [t.children[0].textContent, t.children[1].textContent]));
  const at = rows.findIndex((r) => r[0] === "replay");
  check(at >= 0 && rows[at][1] === "anomaly at step 37 (loss = nan): replayed, reproduced; origin aten::exp \u2014 range: " +
        "float64 result reaches 1.2e+39, beyond float32's max", "anomaly: the verdict's replay row names the step, trigger and origin");
  check(at >= 0 && at < rows.findIndex((r) => r[0] === "loss"), "anomaly: the replay row comes before the loss");
  const scalars = await page.evaluate(() => window.precprobeReport.data.scalars.map((c) => c.name));
  check(!scalars.includes("anomaly"), "anomaly: no scalar chart for the anomaly event");
  await close();
}

// ---- the CLI's golden dumps (tests/data/cli; expected answers in tests/cli/test_cli.cpp) ----
{
  const { page, close } = await open("golden_overflow.html");
  const origin = await page.$eval("#origin-op", (e) => e.textContent).catch(() => "");
  check(/aten::addmm\.1\.forward/.test(origin) && /mlp\/fc2/.test(origin) && /fc2\.weight/.test(origin),
        "golden overflow: origin aten::addmm.1.forward (inside aten::linear), scope and parameters shown");
  check((await page.evaluate(() => window.precprobeReport.data.overflow.step)) === 1, "golden overflow: origin at step 1");
  check((await page.$$eval("#run h3", (hs) => hs.length)) >= 1, "golden overflow: run header");
  const verdict = await page.$eval("#verdict", (e) => e.textContent).catch(() => "");
  check(/aten::addmm\.1\.forward/.test(verdict) && /1 problem\(s\)/.test(verdict),
        "golden overflow: the verdict names the origin and one checklist problem");
  // Activations: fc1's and fc2's ops x 3 steps; fc2's output overflows at step 1 (x 1e38).
  check((await num(page, "#activations-heatmap", "rows")) === 2 && (await num(page, "#activations-heatmap", "cols")) === 3,
        "golden overflow: activations, 2 parameter-reading ops x 3 steps");
  check((await num(page, "#activations-heatmap", "nonfinite")) === 1, "golden overflow: one non-finite activation cell");
  const act = await page.evaluate(() => window.precprobeReport.data.activations);
  check(act.rows[1] === "fc2.weight · aten::linear" && act.bad[1][1] === 1 && act.abs_max[1][1] > 1e38,
        "golden overflow: fc2's output at step 1 is non-finite, its finite part near 3e38");
  const causes = await page.$$eval("#likely-causes li", (ls) => ls.map((l) => l.textContent));
  check(causes.length === 1 && causes[0].startsWith("mp.overflow"), "golden overflow: the likely cause is mp.overflow");
  check((await page.$eval("#run details.run-details", (d) => d.open).catch(() => true)) === false,
        "golden overflow: meta.json, config and counters collapsed");
  await close();
}
{
  const { page, close } = await open("golden_compare.html");
  const first = await page.$eval("#first-divergent", (e) => e.textContent).catch(() => "");
  check(/aten::mul\.0\.forward/.test(first), "golden compare: first divergent op aten::mul.0.forward");
  check((await uplotPoints(page, "chart-compare", 2)) === 1, "golden compare: first divergent op marked");
  const hl = await page.$$eval("#table-compare tr.hl", (trs) => trs.map((t) => t.textContent));
  check(hl.length === 1 && hl[0].includes("aten::mul.0.forward"), "golden compare: its table row highlighted");
  await close();
}
{
  const { page, close } = await open("golden_truncated.html");
  const run = await page.$eval("#run", (e) => e.textContent);
  check(/truncated frame/.test(run), "golden truncated: the truncation is reported in the run header");
  await close();
}

{
  // Range statistics: the module x format view of precprobe precision (test_cli_precision has
  // the figures: the aten::mul in the model's own forward, "(root)", and fc2's aten::linear
  // pass fp16's 65504).
  const { page, close } = await open("golden_range.html");
  const rows = await page.$$eval("#table-precision tr", (trs) => trs.map((t) => t.textContent));
  check(rows.length === 6 && /^modulefp16bf16e4m3e5m2/.test(rows[0]), `golden range: module x format table, 4 modules (${rows})`);
  check(rows.some((r) => r.startsWith("(root)fits_with_scaling \u2022fits")),
        "golden range: (root) fits fp16 only with scaling, the plan keeps it in fp32, fits bf16");
  check((await page.$$eval("#precision", (s) => s.length)) === 1, "golden range: precision section present");
  await close();
}
{
  const { page, close } = await open("golden_overflow.html");
  check((await page.$$eval("#precision", (s) => s.length)) === 0, "golden overflow: no range statistics, no precision section");
  await close();
}

console.log(`\n${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
