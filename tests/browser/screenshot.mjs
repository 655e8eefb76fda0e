// Full-page screenshot of an HTML report in Debian's headless Chromium, offline:
//   node tests/browser/screenshot.mjs report.html out.png [width] [first-screen]
// (run `npm ci` in tests/browser once). Used for docs/report.png; with `first-screen`, only
// what the browser shows before scrolling (1280 x 900): docs/report-first-screen*.png.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { chromium } from "playwright-core";

const [file, png, width, first] = process.argv.slice(2);
if (!file || !png) {
  console.error("usage: node screenshot.mjs report.html out.png [width]");
  process.exit(2);
}
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "precprobe-chromium-"));
const ctx = await chromium.launchPersistentContext(dir, {
  executablePath: process.env.PRECPROBE_CHROMIUM || "/usr/bin/chromium", headless: true, offline: true,
  viewport: { width: Number(width || 1280), height: 900 },
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-quic"],
});
const page = ctx.pages()[0] || (await ctx.newPage());
await page.goto(pathToFileURL(path.resolve(file)).href);
await page.waitForSelector("body[data-rendered='1']");
await page.screenshot({ path: png, fullPage: first !== "first-screen" });
await ctx.close();
fs.rmSync(dir, { recursive: true, force: true });
