// The report of `bmas plan --html` in a real browser (Debian's headless Chromium through
// puppeteer-core), opened from disk with every request but the file itself refused: the
// sample report draws its four plots (canvases with the series' colours on them), its verdict
// and tables; the jobs-only report puts notes where inference and cost would be; a report
// whose strings are markup shows them as text. Saves a screenshot of each. Exits non-zero
// when a check fails, naming it.
// Usage: plan_html_browser_test.mjs RENDER DATA_DIR WORK_DIR
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import puppeteer from "puppeteer-core";

const [render, dataDir, work] = process.argv.slice(2);
if (!work) {
  console.error("usage: plan_html_browser_test.mjs RENDER DATA_DIR WORK_DIR");
  process.exit(2);
}
const shots = path.join(work, "shots");
fs.mkdirSync(shots, { recursive: true });

const PLOTS = ["plot-timeline", "plot-ttft-cdf", "plot-wait-cdf", "plot-cost"];
const readJson = (f) => JSON.parse(fs.readFileSync(f, "utf8"));

// A report with markup in every string a person could have written.
const hostile = readJson(path.join(dataDir, "plan-report-sample.json"));
hostile.verdict = "</script><img src=\"https://example.invalid/x.png\" onerror=\"window.pwned=1\">" +
  "<script>window.pwned=2</script> & done";
hostile.scenario.source = "<!-- not a comment";
hostile.scenario.cohorts = ["<b id=\"bold\">students</b>", "researchers"];
hostile.jobs.by_cohort[0].cohort = "<b id=\"bold\">students</b>";
hostile.cost.currency = "<i>";  // not a currency code: plan.js must still print the numbers
fs.writeFileSync(path.join(work, "plan-report-hostile.json"), JSON.stringify(hostile));

function renderReport(json, name) {
  const out = path.join(work, `${name}.html`);
  execFileSync(render, [json, out], { stdio: "inherit" });
  return out;
}
const reports = {
  sample: renderReport(path.join(dataDir, "plan-report-sample.json"), "plan-report-sample"),
  jobsOnly: renderReport(path.join(dataDir, "plan-report-jobs-only.json"), "plan-report-jobs-only"),
  hostile: renderReport(path.join(work, "plan-report-hostile.json"), "plan-report-hostile"),
};

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  // As root (the tests run as root) Chromium needs --no-sandbox.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

// Opens `file` with request interception: the file itself loads, anything else is refused and
// recorded (data: URLs are no request: the favicon is one). Collects script errors.
async function open(file) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const url = pathToFileURL(file).href;
  page.errors = [];
  page.foreign = [];
  page.on("pageerror", (e) => page.errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") page.errors.push(m.text()); });
  await page.setRequestInterception(true);
  page.on("request", (req) => {
    if (req.url() === url || req.url().startsWith("data:")) {
      req.continue();
    } else {
      page.foreign.push(req.url());
      req.abort();
    }
  });
  await page.goto(url, { waitUntil: "load" });
  await page.waitForFunction(() => window.bmasPlan !== undefined, { timeout: 10000 });
  return page;
}

// In the page: the plot's canvas, its size, how many of its pixels are painted, and for each
// series how many pixels have that series' colour exactly (fills, or the middle of lines).
function canvasFacts(id) {
  const canvas = document.querySelector(`#${id} canvas`);
  const u = window.bmasPlan.plots[id];
  if (!canvas || !u) return null;
  const rgb = (css) => {
    const c = document.createElement("canvas").getContext("2d");
    c.fillStyle = css;
    c.fillRect(0, 0, 1, 1);
    return Array.from(c.getImageData(0, 0, 1, 1).data.slice(0, 3));
  };
  const colors = u.series.slice(1).map((s, i) => rgb((s.fill && s.fill(u, i + 1)) || s.stroke(u, i + 1)));
  const { data } = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height);
  let painted = 0;
  const counts = colors.map(() => 0);
  for (let p = 0; p < data.length; p += 4) {
    if (data[p + 3] === 0) continue;
    painted++;
    if (data[p + 3] < 250) continue;
    colors.forEach((c, k) => {
      if (Math.abs(data[p] - c[0]) + Math.abs(data[p + 1] - c[1]) + Math.abs(data[p + 2] - c[2]) <= 12) counts[k]++;
    });
  }
  const box = canvas.getBoundingClientRect();
  return { width: box.width, height: box.height, pixels: canvas.width * canvas.height, painted,
           series: u.series.slice(1).map((s) => s.label), counts };
}

// `without`: the labels of series with nothing to draw (no inference GPUs in a jobs-only run).
async function expectDrawn(page, id, without = []) {
  const f = await page.evaluate(canvasFacts, id);
  assert.ok(f, `${id} holds a uPlot canvas`);
  assert.ok(f.width > 100 && f.height > 100, `${id}'s canvas is ${f.width}x${f.height}`);
  assert.ok(f.painted > f.pixels * 0.01, `${id}: ${f.painted} of ${f.pixels} pixels painted`);
  f.series.forEach((label, k) => {
    if (without.includes(label)) return;
    assert.ok(f.counts[k] >= 40, `${id}: series "${label}" has ${f.counts[k]} pixels of its colour`);
  });
}

async function expectNote(page, id) {
  const f = await page.$eval(`#${id}`, (e) => ({ canvases: e.querySelectorAll("canvas").length,
    note: e.querySelector(".note")?.textContent || "" }));
  assert.equal(f.canvases, 0, `${id} draws nothing`);
  assert.match(f.note, /No /, `${id} says why it is empty`);
}

async function expectClean(page) {
  // Requests first: a refused one is also a console error, and the URL says more.
  assert.deepEqual(page.foreign, [], "no request but the file itself");
  assert.deepEqual(page.errors, [], "no script errors");
  const words = await page.evaluate(() => document.body.innerText.match(/\b(null|undefined|NaN)\b/g));
  assert.equal(words, null, "no null, undefined or NaN printed");
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

let failed = false;
async function check(name, f) {
  try {
    await f();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed = true;
    console.log(`FAIL ${name}: ${e.message}`);
  }
}

try {
  const sample = readJson(path.join(dataDir, "plan-report-sample.json"));
  const page = await open(reports.sample);
  await page.screenshot({ path: path.join(shots, "sample.png"), fullPage: true });
  await check("the sample report loads without errors or requests", () => expectClean(page));
  await check("its verdict is shown", async () => {
    assert.equal(await text(page, "#verdict"), sample.verdict);
    assert.ok(await page.$eval("#verdict", (e) => e.offsetHeight > 0), "the verdict is visible");
  });
  for (const id of PLOTS) await check(`${id} is drawn`, () => expectDrawn(page, id));
  await check("the SLO misses are marked on the timeline", async () => {
    const caption = await page.$eval("#plot-timeline", (e) => e.parentElement.textContent);
    assert.match(caption, /missed the SLOs/);
  });
  await check("the tables hold the report's figures", async () => {
    assert.match(await text(page, "#jobs"), /940 jobs: 938 ran, 2 could not run/);
    assert.equal(await page.$$eval("#jobs table", (t) => t.length), 3, "overall, by GPUs, by cohort");
    assert.match(await text(page, "#inference"), /SLOs met in 97\.0% of the 117 hours with load/);
    assert.match(await text(page, "#inference"), /researchers/);
    assert.match(await text(page, "#cost"), /this cluster, per user-month\$165(?!\d)/);
    const rows = await page.$$eval("#sweep tbody tr", (rs) => rs.map((r) => r.className));
    assert.equal(rows.length, sample.sweep.results.length, "a row per swept value");
    assert.equal(rows.filter((c) => c === "best").length, 1, "the smallest meeting is marked");
    assert.match(await text(page, "#sim"), /4,000,000/);
  });
  await check("the plots follow the window's width", async () => {
    await page.setViewport({ width: 900, height: 900 });
    await page.waitForFunction(() => document.querySelector("#plot-timeline canvas").getBoundingClientRect().width < 900);
    await expectClean(page);
  });
  await page.close();

  const jobsOnly = readJson(path.join(dataDir, "plan-report-jobs-only.json"));
  const jp = await open(reports.jobsOnly);
  await jp.screenshot({ path: path.join(shots, "jobs-only.png"), fullPage: true });
  await check("the jobs-only report loads without errors or requests", () => expectClean(jp));
  await check("its verdict is shown", async () => assert.equal(await text(jp, "#verdict"), jobsOnly.verdict));
  await check("its timeline and wait CDF are drawn", async () => {
    await expectDrawn(jp, "plot-timeline", ["inference"]);
    await expectDrawn(jp, "plot-wait-cdf");
  });
  await check("its TTFT and cost plots are notes", async () => {
    await expectNote(jp, "plot-ttft-cdf");
    await expectNote(jp, "plot-cost");
  });
  await check("its inference and cost sections are notes, and there is no sweep", async () => {
    assert.match(await text(jp, "#inference .note"), /No inference/);
    assert.match(await text(jp, "#cost .note"), /No cost/);
    assert.equal(await jp.$("#sweep"), null);
  });
  await jp.close();

  const hp = await open(reports.hostile);
  await hp.screenshot({ path: path.join(shots, "hostile.png"), fullPage: true });
  await check("markup in the report's strings is shown as text", async () => {
    await expectClean(hp);
    assert.equal(await text(hp, "#verdict"), hostile.verdict);
    assert.match(await text(hp, "#scenario"), /<!-- not a comment/);
    assert.match(await text(hp, "#jobs"), /<b id="bold">students<\/b>/);
    assert.equal(await hp.$("#bold"), null, "no element made from a string");
    assert.equal(await hp.$$eval("img", (i) => i.length), 0);
    assert.equal(await hp.evaluate(() => window.pwned), undefined);
    for (const id of PLOTS) await expectDrawn(hp, id);
  });
  await hp.close();
} finally {
  await browser.close();
}
console.log(failed ? "plan_html_browser_test: FAILED" : "plan_html_browser_test: all passed");
process.exit(failed ? 1 : 0);
