// The operator console in a real browser: Debian's chromium driven by Playwright against
// real coordinators that TestConsole (e2e/console_test.go) started on PostgreSQL:
//
//   CONSOLE_URL  a coordinator without authentication: jobs orders (a, b) and payments (a),
//                with a few rounds done
//   AUTH_URL     a coordinator with authentication on; ADMIN_TOKEN and READ_TOKEN (read on
//                every job) are its tokens; it has the job orders
//   MANY_URL     a coordinator with 1,000 jobs
//   SCREENSHOTS  where each page's screenshot goes
//   CHROMIUM     the browser
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through go test ./e2e -run TestConsole`);
  return v;
};
const CONSOLE = env("CONSOLE_URL");
const AUTH = env("AUTH_URL");
const MANY = env("MANY_URL");
const ADMIN = env("ADMIN_TOKEN");
const READER = env("READ_TOKEN");
const SHOTS = env("SCREENSHOTS");
mkdirSync(SHOTS, { recursive: true });

let browser;
before(async () => {
  browser = await chromium.launch({
    executablePath: env("CHROMIUM"),
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
});
after(async () => { await browser?.close(); });

// open returns a page of a new context that records what leaves the coordinator's origin
// and every script error; check() asserts there was none.
async function open(origin, { viewport = { width: 1280, height: 900 } } = {}) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const problems = [];
  const expected = new Set(); // statuses a test provokes on purpose (401 before the token, 403)
  page.on("request", (req) => {
    const url = new URL(req.url());
    if (url.protocol !== "data:" && url.origin !== new URL(origin).origin) problems.push(`request to ${req.url()}`);
  });
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    const m = msg.text().match(/status of (\d+)/);
    if (m && expected.has(Number(m[1]))) return;
    problems.push(`console error: ${msg.text()}`);
  });
  return {
    page, context, expected,
    check() { assert.deepEqual(problems, [], "requests outside the origin or script errors"); },
  };
}

async function call(base, method, path, body, token) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const resp = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  if (!resp.ok) throw new Error(`${method} ${path}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const noSideScroll = async (page) => page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth);

test("the overview lists every job, what needs attention first", async () => {
  const { page, context, check } = await open(CONSOLE);
  await page.goto(`${CONSOLE}/ui/`);
  await page.locator('tr[data-job="orders"] a', { hasText: "orders" }).waitFor();
  await page.locator('tr[data-job="payments"]').waitFor();
  assert.match(await page.locator(".summary").innerText(), /2 jobs/);
  // Everything is keyboard-reachable with a visible focus.
  await page.keyboard.press("Tab");
  await page.keyboard.press("Tab");
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, "none", "the focused element has no visible outline");
  await page.screenshot({ path: join(SHOTS, "overview.png"), fullPage: true });
  check();
  await context.close();
});

test("a checkpoint opened and committed by another client is followed live", async () => {
  const { page, context, check } = await open(CONSOLE);
  await page.goto(`${CONSOLE}/ui/#/jobs/orders`);
  await page.locator("#live.on").waitFor();
  // The history chart: a bar to decision for each checkpoint, coloured by outcome, and a
  // pale one to completion for each completed.
  assert.ok(await page.locator("svg.chart rect.bar.committed:not(.pale)").count() >= 5, "committed bars in the chart");
  assert.equal(await page.locator("svg.chart rect.bar.aborted:not(.pale)").count(), 1, "one aborted bar in the chart");
  const cp = await call(CONSOLE, "POST", "/v1/jobs/orders/checkpoints");
  const row = page.locator(`tr[data-checkpoint="${cp.id}"]`);
  await row.locator(".status", { hasText: "preparing" }).waitFor();
  await call(CONSOLE, "PUT", `/v1/jobs/orders/checkpoints/${cp.id}/votes/a`, { epoch: 1, vote: "prepared", committables: [{ txn: `a-${cp.id}` }] });
  await call(CONSOLE, "PUT", `/v1/jobs/orders/checkpoints/${cp.id}/votes/b`, { epoch: 1, vote: "prepared", committables: [{ file: `/out/.part-${cp.id}` }] });
  await row.locator(".status", { hasText: "committing" }).waitFor();
  await call(CONSOLE, "PUT", `/v1/jobs/orders/checkpoints/${cp.id}/acks/a`, { epoch: 1 });
  await call(CONSOLE, "PUT", `/v1/jobs/orders/checkpoints/${cp.id}/acks/b`, { epoch: 1 });
  await row.locator(".status", { hasText: "committed" }).waitFor();
  // Selected: each participant's vote, committables and ack, the cause.
  await row.locator("a").click();
  const detail = page.locator("#detail");
  await detail.getByText(`Checkpoint #${cp.id}`).waitFor();
  await detail.getByText(`a-${cp.id}`).waitFor();
  assert.match(await detail.innerText(), /all_prepared/);
  assert.match(await detail.innerText(), /by a/);
  await page.screenshot({ path: join(SHOTS, "job.png"), fullPage: true });
  check();
  await context.close();
});

test("an abort with a reason typed in the console shows in the checkpoint and in the audit", async () => {
  const { page, context, check } = await open(CONSOLE);
  const cp = await call(CONSOLE, "POST", "/v1/jobs/payments/checkpoints");
  await page.goto(`${CONSOLE}/ui/#/in-doubt`);
  await page.getByRole("link", { name: `payments #${cp.id}` }).waitFor();
  await page.screenshot({ path: join(SHOTS, "in-doubt.png"), fullPage: true });
  await page.getByRole("link", { name: `payments #${cp.id}` }).click();
  await page.locator('button[data-action="abort"]').click();
  const dialog = page.locator("#action-dialog");
  await dialog.waitFor();
  await dialog.locator("#action-reason").fill("stuck: the sink's host was retired");
  await dialog.locator("#action-confirm").click();
  await page.locator("#detail .status", { hasText: "aborted" }).waitFor();
  await page.locator("#detail [data-abort-reason]", { hasText: "stuck: the sink's host was retired" }).waitFor();
  const after = await call(CONSOLE, "GET", `/v1/jobs/payments/checkpoints/${cp.id}`);
  assert.equal(after.status, "aborted");
  assert.equal(after.abort_reason, "stuck: the sink's host was retired");
  await page.goto(`${CONSOLE}/ui/#/audit`);
  await page.getByRole("cell", { name: "stuck: the sink's host was retired" }).waitFor();
  await page.screenshot({ path: join(SHOTS, "audit.png"), fullPage: true });
  check();
  await context.close();
});

test("with authentication on, the token is asked for and kept for the session only", async () => {
  const { page, context, check, expected } = await open(AUTH);
  expected.add(401).add(403);
  await page.goto(`${AUTH}/ui/`);
  const dialog = page.locator("#token-dialog");
  await dialog.waitFor();
  await page.screenshot({ path: join(SHOTS, "token.png") });
  await dialog.locator("#token-input").fill(READER);
  await dialog.locator("button[type=submit]").click();
  await page.locator('tr[data-job="orders"]').waitFor();
  // A reader sees no operator action, and is told which scope the audit needs.
  const cp = await call(AUTH, "POST", "/v1/jobs/orders/checkpoints", undefined, ADMIN);
  await page.goto(`${AUTH}/ui/#/jobs/orders/checkpoints/${cp.id}`);
  await page.locator("#detail .status", { hasText: "preparing" }).waitFor();
  assert.equal(await page.locator("button[data-action]").count(), 0, "a reader is offered operator actions");
  await page.goto(`${AUTH}/ui/#/audit`);
  await page.locator("main .error", { hasText: /operator|admin/ }).waitFor();
  // Never stored beyond the session.
  assert.equal(await page.evaluate(() => localStorage.length), 0);
  assert.equal(await page.evaluate(() => document.cookie), "");
  assert.deepEqual(await context.cookies(), []);
  check();
  await context.close();
  // A new browser session asks again; an admin gets the actions.
  const second = await open(AUTH);
  second.expected.add(401);
  await second.page.goto(`${AUTH}/ui/#/jobs/orders/checkpoints/${cp.id}`);
  await second.page.locator("#token-dialog").waitFor();
  await second.page.locator("#token-input").fill(ADMIN);
  await second.page.locator("#token-dialog button[type=submit]").click();
  await second.page.locator('button[data-action="abort"]').waitFor();
  second.check();
  await second.context.close();
});

test("every page fits a phone's width", async () => {
  const { page, context, check } = await open(CONSOLE, { viewport: { width: 375, height: 740 } });
  for (const route of ["#/", "#/jobs/orders", "#/jobs/orders/checkpoints/1", "#/in-doubt", "#/audit"]) {
    await page.goto(`${CONSOLE}/ui/${route}`);
    await page.locator("main h1").waitFor();
    await page.waitForTimeout(300);
    assert.ok(await noSideScroll(page), `${route} scrolls sideways at 375 px`);
    if (route === "#/jobs/orders") await page.screenshot({ path: join(SHOTS, "phone.png"), fullPage: false });
  }
  check();
  await context.close();
});

test("the overview of 1,000 jobs", async () => {
  const { page, context, check } = await open(MANY);
  const start = Date.now();
  await page.goto(`${MANY}/ui/`);
  await page.locator("tr[data-job]").first().waitFor();
  const firstScreen = Date.now() - start;
  const inPage = await page.evaluate(() => Math.round(performance.now()));
  assert.match(await page.locator(".summary").innerText(), /1000 jobs/);
  console.log(`# 1,000 jobs: first screen in ${firstScreen} ms from the test's navigation to the rows seen, ${inPage} ms by the page's own clock`);
  await page.screenshot({ path: join(SHOTS, "many.png") });
  check();
  await context.close();
});
