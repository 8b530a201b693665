// The dashboard in a real browser (Debian's headless Chromium through puppeteer-core): sign in
// with a key, see the map with a running job's GPUs marked (and how it draws a node that is
// down, its agent unreachable), a pending job's reason in words, every page, live refresh, and
// a non-admin refused another user's details. Saves a screenshot of each page. Exits non-zero
// on the first failed check, naming it.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import puppeteer from "puppeteer-core";

const [url, userKey, adminKey, runningJob, runningGpus, pendingJob, otherUser, shots] =
  process.argv.slice(2);
if (!shots) {
  console.error("usage: dashboard_browser_test.mjs URL USER_KEY ADMIN_KEY RUNNING_JOB " +
    "RUNNING_GPUS PENDING_JOB OTHER_USER SHOTS_DIR");
  process.exit(2);
}
fs.mkdirSync(shots, { recursive: true });

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  // As root (the tests run as root) Chromium needs --no-sandbox.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

async function shot(page, name) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

async function signIn(context, key) {
  const page = await context.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.errors = errors;
  await page.goto(`${url}/cluster`, { waitUntil: "networkidle0" });
  assert.match(page.url(), /\/login\?next=\/cluster$/, "a page without a session goes to /login");
  await page.type("#key", key);
  await Promise.all([page.waitForNavigation({ waitUntil: "networkidle0" }), page.click("button[type=submit]")]);
  assert.match(page.url(), /\/cluster$/, "signing in lands on the cluster map");
  return page;
}

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
  const userContext = await browser.createBrowserContext();
  let page;
  await check("a wrong key is refused with a reason", async () => {
    const p = await userContext.newPage();
    await p.goto(`${url}/login`, { waitUntil: "networkidle0" });
    await shot(p, "login");
    await p.type("#key", "sk-bmas-000000000000-nope");
    await p.click("button[type=submit]");
    await p.waitForFunction(() => document.getElementById("error").textContent.length > 0);
    const text = await p.$eval("#error", (e) => e.textContent);
    assert.match(text, /not valid/);
    await p.close();
  });
  await check("sign in; the session cookie is HttpOnly, SameSite=Strict and expires", async () => {
    page = await signIn(userContext, userKey);
    const cookie = (await page.cookies()).find((c) => c.name === "bmas_session");
    assert.ok(cookie, "a bmas_session cookie");
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, "Strict");
    assert.ok(cookie.expires > Date.now() / 1000, "it expires");
    assert.equal(await page.evaluate(() => document.cookie.includes("bmas_session")), false);
  });
  await check("the map marks the running job's GPUs", async () => {
    await page.waitForSelector(`.gpu[data-job="${runningJob}"]`, { timeout: 15000 });
    const cells = await page.$$eval(`.gpu[data-job="${runningJob}"]`,
      (es) => es.map((e) => ({ cls: e.className, title: e.title })));
    assert.equal(cells.length, Number(runningGpus), `${runningGpus} GPUs of job ${runningJob}`);
    for (const c of cells) {
      assert.match(c.cls, /training/);
      assert.match(c.cls, /mine/);
    }
    await shot(page, "cluster");
  });
  await check("each node says it serves; a node down with its agent unreachable says so", async () => {
    const states = await page.$$eval(".node", (es) => es.map((e) => e.dataset.status));
    assert.ok(states.length > 0 && states.every((s) => s === "up"), `every node up: ${states}`);
    // The map as /api/cluster gives it, with one idle node as the bed's fault test sees a node
    // whose link is cut (tests/cluster/node_fault_test.cc): how the page draws it.
    const map = await page.evaluate(async () => (await fetch("/api/cluster")).json());
    const down = map.nodes.find((n) => n.gpus.every((g) => !g.job_id));
    assert.ok(down, "a node without jobs");
    Object.assign(down, {
      state: "down", reason: "Not responding", telemetry: false, status: "down", responding: false,
      agent: "unreachable",
      agent_error: `connect to the agent at https://${down.name}:9400 failed: no answer within 2000 ms`,
    });
    down.status_text = "down: Not responding. No job runs there; it serves again by itself once " +
      "its slurmd answers (ReturnToService=2): check its network and slurmd; its agent does not " +
      `answer (${down.agent_error}): check the node's network and its bmas agent`;
    for (const g of down.gpus) Object.assign(g, { state: "down", util: null, mem_total_mb: 0 });
    map.totals.down = down.gpus.length;
    map.totals.idle -= down.gpus.length;
    const p = await userContext.newPage();
    await p.setViewport({ width: 1280, height: 900 });
    await p.setRequestInterception(true);
    p.on("request", (r) => (new URL(r.url()).pathname === "/api/cluster"
      ? r.respond({ status: 200, contentType: "application/json", body: JSON.stringify(map) })
      : r.continue()));
    await p.goto(`${url}/cluster`, { waitUntil: "networkidle0" });
    const card = `.node[data-node="${down.name}"]`;
    await p.waitForSelector(`${card}[data-status="down"][data-agent="unreachable"]`, { timeout: 15000 });
    assert.equal(await p.$eval(`${card} h4 .status`, (e) => e.textContent), "down · agent unreachable");
    assert.equal(await p.$eval(`${card} .status-text`, (e) => e.textContent), down.status_text);
    assert.equal(await p.$eval(card, (e) => e.title), down.status_text);
    assert.equal((await p.$$(`${card} .gpu.down`)).length, down.gpus.length);
    assert.equal((await p.$$(".node .status-text")).length, 1, "only the down node has words");
    await shot(p, "node-down");
    await p.close();
  });
  await check("the page refreshes itself without reloading", async () => {
    const before = await page.$eval("#updated", (e) => e.textContent);
    await page.evaluate(() => { window.__same_document = true; });
    await page.waitForFunction((b) => document.getElementById("updated").textContent !== b,
      { timeout: 15000 }, before);
    assert.equal(await page.evaluate(() => window.__same_document), true);
  });
  await check("the queue gives the pending job's reason in words", async () => {
    await page.goto(`${url}/queue`, { waitUntil: "networkidle0" });
    const sel = `.reason[data-job="${pendingJob}"]`;
    await page.waitForSelector(sel, { timeout: 15000 });
    const reason = await page.$eval(sel, (e) => e.textContent);
    assert.match(reason, /^waiting for \d+ GPUs?/);
    await shot(page, "queue");
  });
  for (const name of ["inference", "users", "mode"]) {
    await check(`the ${name} page draws`, async () => {
      await page.goto(`${url}/${name}`, { waitUntil: "networkidle0" });
      await page.waitForFunction(() => document.querySelector("#page h2"), { timeout: 15000 });
      await page.waitForSelector("#plot-gpus .uplot", { timeout: 15000 });
      await shot(page, name);
    });
  }
  await check("a user is refused another user's details", async () => {
    await page.goto(`${url}/users/${otherUser}`, { waitUntil: "networkidle0" });
    await page.waitForSelector("#refused", { timeout: 15000 });
    const text = await page.$eval("#refused", (e) => e.textContent);
    assert.match(text, /only an admin/);
    const status = await page.evaluate(async (u) => (await fetch(`/api/users/${u}`)).status, otherUser);
    assert.equal(status, 403);
    await shot(page, "refused");
  });
  await check("no script errors on the user's pages", async () => {
    assert.deepEqual(page.errors.filter((e) => !/403|Forbidden/.test(e)), []);
  });
  await check("signing out ends the session", async () => {
    await page.goto(`${url}/cluster`, { waitUntil: "networkidle0" });
    await Promise.all([page.waitForNavigation({ waitUntil: "networkidle0" }), page.click("#logout button")]);
    assert.match(page.url(), /\/login$/);
    const status = await page.evaluate(async () => (await fetch("/api/cluster")).status);
    assert.equal(status, 401);
  });
  await check("signing in never sends the browser off the dashboard", async () => {
    const context = await browser.createBrowserContext();
    const p = await context.newPage();
    await p.goto(`${url}/login?next=${encodeURIComponent("/\\example.org/x")}`, { waitUntil: "networkidle0" });
    await p.type("#key", userKey);
    await Promise.all([p.waitForNavigation({ waitUntil: "networkidle0" }), p.click("button[type=submit]")]);
    assert.equal(new URL(p.url()).origin, new URL(url).origin);
    assert.match(p.url(), /\/cluster$/);
    await context.close();
  });
  await check("an admin sees that user's details", async () => {
    const adminContext = await browser.createBrowserContext();
    const admin = await signIn(adminContext, adminKey);
    await admin.goto(`${url}/users/${otherUser}`, { waitUntil: "networkidle0" });
    await admin.waitForFunction((u) => document.querySelector("#page h2")?.textContent.includes(`User ${u}`),
      { timeout: 15000 }, otherUser);
    await shot(admin, "admin-user");
    await admin.goto(`${url}/users`, { waitUntil: "networkidle0" });
    await admin.waitForFunction(() => document.querySelectorAll("#page tbody tr").length >= 2, { timeout: 15000 });
    await shot(admin, "admin-users");
  });
} finally {
  await browser.close();
}
console.log(failed ? "dashboard_browser_test: FAILED" : "dashboard_browser_test: all passed");
process.exit(failed ? 1 : 0);
