// The admin console in a real browser: Debian's Chromium, headless, driven by playwright-core
// (which never downloads a browser of its own here: executablePath is the system's).
//
// Usage: node console.cjs   with, in the environment:
//   CONSOLE_URL      the server's origin (http://127.0.0.1:PORT)
//   CHROMIUM         the browser to drive
//   ADMIN_TOKEN      a token of an admin
//   APPROVER_TOKEN   a token of an approver (eve)
//   APPROVER_TOKEN_ID  that token's public id
//   APPROVAL_ID      a pending approval whose arguments hold a <script> element
//   SCRIPT_NAME      a draft whose source holds one, reviewed (one intended write of kv_set)
//   (and an upstream `local` whose tool `echo` changed since it was pinned)
//   SHOTS            where to write a screenshot of each page
//
// Prints one JSON line: {"approved": ID, "created_token": TOKEN}; any failed check throws.

const assert = require("node:assert/strict");
const path = require("node:path");
const { chromium } = require("playwright-core");

const url = process.env.CONSOLE_URL;
const shots = process.env.SHOTS;
const approvalId = process.env.APPROVAL_ID;

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });

  // Any script that runs in a console page is a failure: the pages have none, and the CSP allows
  // none.
  async function person() {
    const context = await browser.newContext();
    const page = await context.newPage();
    page.on("dialog", (dialog) => {
      throw new Error(`a dialog opened: ${dialog.message()}`);
    });
    page.on("console", (message) => {
      // Pages answered 401 and 403 on purpose are logged as failed loads; anything else is not
    // expected.
    if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) {
        throw new Error(`a console error: ${message.text()}`);
      }
    });
    return { context, page };
  }

  // Every page of a signed-in person names them in its frame.
  async function signedInAs(page, name) {
    assert.match(await page.textContent("form.who span"), new RegExp(`^${name} `));
  }

  async function shot(page, name) {
    await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
  }

  async function signIn(page, token) {
    await page.goto(`${url}/admin`);
    assert.equal(new URL(page.url()).pathname, "/admin/sign-in");
    await page.fill("#token", token);
    await page.click("form.stacked button[type=submit]");
    await page.waitForURL(`${url}/admin/approvals`);
  }

  const approver = await person();
  const eve = approver.page;

  // Sign in: a wrong token is refused, the approver's is taken.
  await eve.goto(`${url}/admin`);
  await shot(eve, "sign-in");
  await eve.fill("#token", "lgt_not-a-token");
  await eve.click("form.stacked button[type=submit]");
  assert.match(await eve.textContent("[role=alert]"), /not valid/);
  await signIn(eve, process.env.APPROVER_TOKEN);

  // The pending approval shows its arguments; the <script> in them is text.
  const card = eve.locator(`#approval-${approvalId}`);
  const argumentsText = await card.locator("pre.arguments").textContent();
  assert.equal(JSON.parse(argumentsText).key, '<script>alert("pwned")</script>');
  assert.equal(await eve.evaluate(() => document.querySelectorAll("script").length), 0);
  assert.equal(await eve.evaluate(() => window.pwned), undefined);
  await shot(eve, "approvals");
  await signedInAs(eve, "eve");

  // A form posted without its CSRF token, or with another's, is refused; so is one from another
  // origin. Nothing is approved by them.
  for (const form of [{ decision: "approve" }, { decision: "approve", csrf: "forged" }]) {
    const answer = await eve.request.post(`${url}/admin/approvals/${approvalId}`, {
      form,
      headers: { Origin: url },
      maxRedirects: 0,
    });
    assert.equal(answer.status(), 403, JSON.stringify(form));
    assert.match(await answer.text(), /CSRF token/);
  }
  const csrf = await eve.getAttribute("form.decide input[name=csrf]", "value");
  const foreign = await eve.request.post(`${url}/admin/approvals/${approvalId}`, {
    form: { decision: "approve", csrf },
    headers: { Origin: "http://evil.example" },
    maxRedirects: 0,
  });
  assert.equal(foreign.status(), 403);
  await eve.reload();
  assert.equal(await card.locator(".status").textContent(), "pending");

  // Approved, with a reason: the page says so and lists it under approved.
  await card.locator("input[name=reason]").fill("the key is retired");
  await card.locator("button[value=approve]").click();
  await eve.waitForURL(`${url}/admin/approvals`);
  assert.match(await eve.textContent(".flash.ok"), new RegExp(`Approved ${approvalId}`));
  await shot(eve, "approved");
  await eve.goto(`${url}/admin/approvals?status=approved`);
  assert.match(await eve.textContent(`#approval-${approvalId}`), /the key is retired/);

  // An approver may not open the tokens page, nor the administrators' others.
  const refused = await eve.goto(`${url}/admin/tokens`);
  assert.equal(refused.status(), 403);
  assert.match(await eve.textContent("[role=alert]"), /admin role/);
  await shot(eve, "tokens-refused");
  for (const page of ["audit", "scripts", "runs", "upstreams"]) {
    assert.equal((await eve.goto(`${url}/admin/${page}`)).status(), 403, page);
  }
  assert.equal(await eve.locator("a[href='/admin/audit']").count(), 0);

  // An admin: principals and tokens; a new token is shown once; eve's token is revoked.
  const administrator = await person();
  const admin = administrator.page;
  await signIn(admin, process.env.ADMIN_TOKEN);
  await admin.goto(`${url}/admin/tokens`);
  await shot(admin, "tokens");
  await admin.selectOption("#principal", "wes");
  await admin.click("form.inline button[type=submit]");
  await admin.waitForURL(`${url}/admin/tokens`);
  const created = (await admin.textContent("#new-token")).trim();
  assert.match(created, /^lgt_/);
  await shot(admin, "token-created");
  await admin.reload();
  assert.equal(await admin.locator("#new-token").count(), 0, "a new token is shown once");
  // The audit chain, verified.
  await admin.goto(`${url}/admin/audit`);
  assert.ok((await admin.locator("table.audit tbody tr").count()) > 3);
  await admin.click("button[name=verify]");
  assert.match(await admin.textContent("#verified"), /The chain is intact/);
  await signedInAs(admin, "root");
  await shot(admin, "audit");

  // A draft whose source holds a <script> element: shown as text, with its review run's
  // intended writes; published from here.
  const script = process.env.SCRIPT_NAME;
  await admin.goto(`${url}/admin/scripts`);
  await shot(admin, "scripts");
  await signedInAs(admin, "root");
  await admin.click(`a[href='/admin/scripts/${script}']`);
  const source = await admin.textContent("#source");
  assert.ok(source.includes('value = "<script>alert(\\"pwned\\")</script>"'), source);
  assert.equal(await admin.evaluate(() => document.querySelectorAll("script").length), 0);
  assert.match(await admin.textContent("#intended-writes"), /kv_set/);
  await shot(admin, "script");
  await signedInAs(admin, "root");
  await admin.click("form[action$='/publish'] button");
  assert.match(await admin.textContent(".flash.ok"), new RegExp(`Published ${script} version 1`));

  // Runs, and one run whole.
  await admin.goto(`${url}/admin/runs`);
  await shot(admin, "runs");
  await signedInAs(admin, "root");
  await admin.click("table a[href^='/admin/runs/']");
  assert.match(await admin.textContent("h1"), /Run run-/);
  await shot(admin, "run");
  await signedInAs(admin, "root");

  // An upstream whose tool changed since it was pinned: quarantined, with the diff; approved.
  await admin.goto(`${url}/admin/upstreams`);
  const upstream = admin.locator("#upstream-local");
  assert.match(await upstream.textContent(), /local__echo is quarantined \(a changed tool\)/);
  assert.match(await upstream.locator("pre.diff").textContent(), /~\/.ssh\/id_ed25519/);
  await shot(admin, "upstreams");
  await signedInAs(admin, "root");
  await upstream.locator("form button").click();
  await admin.waitForURL(`${url}/admin/upstreams`);
  assert.match(await admin.textContent(".flash.ok"), /Approved local__echo/);

  await admin.goto(`${url}/admin/tokens`);
  await admin.click(`#token-${process.env.APPROVER_TOKEN_ID} button`);
  await admin.waitForURL(`${url}/admin/tokens`);
  assert.match(await admin.textContent(`#token-${process.env.APPROVER_TOKEN_ID}`), /revoked/);

  // eve's console session ends at her next click.
  await eve.goto(`${url}/admin/approvals`);
  assert.equal(new URL(eve.url()).pathname, "/admin/sign-in");
  assert.match(await eve.textContent("[role=status]"), /session ended/);
  await shot(eve, "session-ended");

  // Signing out ends the admin's session.
  await admin.click("form.who button");
  await admin.waitForURL(`${url}/admin/sign-in`);
  await admin.goto(`${url}/admin/tokens`);
  assert.equal(new URL(admin.url()).pathname, "/admin/sign-in");

  await browser.close();
  console.log(JSON.stringify({ approved: approvalId, created_token: created }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
