// An approver approves one pending call in the admin console, in Debian's Chromium driven by
// playwright-core: signs in, sees the request (and the pending count in the navigation),
// approves it with a reason.
//
// Usage: node console_approve.cjs   with, in the environment:
//   CONSOLE_URL      the server's origin (http://127.0.0.1:PORT)
//   CHROMIUM         the browser to drive
//   APPROVER_TOKEN   a token of an approver
//   APPROVAL_ID      the pending approval
//   SHOTS            where to write a screenshot of the page before and after
//
// Prints one JSON line: {"approved": ID}; any failed check throws.

const assert = require("node:assert/strict");
const path = require("node:path");
const { chromium } = require("playwright-core");

const url = process.env.CONSOLE_URL;
const id = process.env.APPROVAL_ID;

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  const page = await (await browser.newContext()).newPage();
  await page.goto(`${url}/admin`);
  await page.fill("#token", process.env.APPROVER_TOKEN);
  await page.click("form.stacked button[type=submit]");
  await page.waitForURL(`${url}/admin/approvals`);
  const card = page.locator(`#approval-${id}`);
  assert.equal(await card.locator(".status").textContent(), "pending");
  await page.screenshot({ path: path.join(process.env.SHOTS, "held-call-pending.png"), fullPage: true });
  await card.locator("input[name=reason]").fill("looked at it while the agent waited");
  await card.locator("button[value=approve]").click();
  await page.waitForURL(`${url}/admin/approvals`);
  assert.match(await page.textContent(".flash.ok"), new RegExp(`Approved ${id}`));
  await page.screenshot({ path: path.join(process.env.SHOTS, "held-call-approved.png"), fullPage: true });
  await browser.close();
  console.log(JSON.stringify({ approved: id }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
