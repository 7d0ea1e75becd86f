// The console in a real browser (Debian's Chromium driven by
// playwright-core), against a real local stack: run by
// TestConsoleInABrowser, which passes what to expect in CONSOLE_TEST (JSON)
// and serves the steps that change the stack (drain a cell, kill one).
// Prints one JSON line of figures; any failed check throws (exit 1).
import { createRequire } from "node:module";

const t = JSON.parse(process.env.CONSOLE_TEST);
const require = createRequire(t.playwright + "/");
const { chromium } = require("playwright-core");

function check(ok, what) {
  if (!ok) throw new Error("check failed: " + what);
}

const figures = {};
const browser = await chromium.launch({
  executablePath: t.chromium,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  const foreign = []; // every byte comes from the console itself
  page.on("request", (r) => { const u = new URL(r.url()); if (/^https?:$/.test(u.protocol) && u.origin !== new URL(t.base).origin) foreign.push(r.url()); });

  // Without the token: 401, the sign-in page, no data.
  const denied = await page.goto(t.base);
  check(denied.status() === 401, `GET / without the token: ${denied.status()}, want 401`);
  const deniedText = await page.content();
  check(deniedText.includes("needs its token"), "the sign-in page says the console needs its token");
  for (const id of t.cells) check(!deniedText.includes(`>${id}<`) && !deniedText.includes(`"${id}"`), `no cell (${id}) on the sign-in page`);
  check((await page.locator("[data-cell]").count()) === 0, "no cell card on the sign-in page");
  const api = await page.request.get(t.base + "api/view");
  check(api.status() === 401, `GET /api/view without the token: ${api.status()}, want 401`);
  await page.screenshot({ path: t.out + "/console-signin.png" });
  errors.length = 0; // the 401s above are the browser's console errors

  // With it: the first view, its time and weight.
  const bytes = {};
  page.on("response", async (r) => {
    const u = new URL(r.url());
    if (u.origin !== new URL(t.base).origin) return;
    try { bytes[u.pathname] = (await r.body()).length; } catch { /* a stream */ }
  });
  await page.goto(t.base + "?token=" + t.token);
  await page.waitForSelector("body[data-ready='1']", { timeout: 10000 });
  check(new URL(page.url()).search === "", "the token is gone from the address bar: " + page.url());
  figures.first_view_ms = await page.evaluate(() => performance.getEntriesByName("console-first-view")[0].startTime);
  await page.waitForLoadState("networkidle").catch(() => {});

  // The cells, with the stack's real values.
  await page.waitForFunction((n) => document.querySelectorAll("#cells [data-cell]").length === n, t.cells.length, { timeout: 10000 });
  for (const id of t.cells) {
    const card = page.locator(`#cells [data-cell='${id}']`);
    await page.waitForFunction((id) => document.querySelector(`#cells [data-cell='${id}']`).dataset.health === "ok", id, { timeout: 15000 })
      .catch(async () => { throw new Error(`${id}'s card is ${await card.getAttribute("data-health")}: ${await card.innerText()}`); });
    const text = await card.innerText();
    check(text.includes(t.release[id]), `${id}'s card names its release ${t.release[id]}: ${text}`);
    check(/req\/s\s+\d/.test(text), `${id}'s card shows a request rate: ${text}`);
    for (const ag of t.agencies) check(text.includes(ag), `${id}'s card shows agency ${ag}`);
  }
  // Rates need two reads: wait until some traffic shows.
  await page.waitForFunction(() => [...document.querySelectorAll("#cells [data-cell]")].some((c) => /req\/s\s+[1-9]/.test(c.innerText)), null, { timeout: 10000 });
  const routerCards = await page.locator("#routers [data-router]").count();
  check(routerCards === t.routers, `${routerCards} router cards, want ${t.routers}`);
  await page.waitForFunction(() => /hot user/.test(document.getElementById("routers").innerText), null, { timeout: 10000 });
  const router = await page.innerText("#routers [data-router]");
  check(new RegExp("map version\\s+" + t.version + "\\b").test(router) && /map\s+current/.test(router) && /req\/s\s+[1-9]/.test(router),
    `the router's card shows its map version ${t.version}, current, and its rate: ${router}`);
  check(/quotas\s+shared by 1 router, lease/.test(router), `the router's card shows how it shares the quotas: ${router}`);
  // The clients' quotas: the load's client, asked for at its rate, held
  // whole by the one router.
  await page.waitForFunction((c) => { const r = document.querySelector(`#quotas [data-client='${c}']`); return r && /[1-9][0-9.]*\/s/.test(r.cells[2].innerText); },
    t.client, { timeout: 10000 });
  const quota = await page.innerText(`#quotas [data-client='${t.client}']`);
  check(/100\.0 %/.test(quota), `the load's client's quota row shows it held whole: ${quota}`);

  // The map: the legend's slot counts are the map's, the grid is drawn.
  for (const [id, n] of Object.entries(t.slots)) {
    const got = await page.getAttribute(`#legend [data-cell='${id}']`, "data-slots");
    check(Number(got) === n, `${id} has ${got} slots in the legend, the map says ${n}`);
  }
  const painted = await page.evaluate(() => {
    const c = document.getElementById("grid");
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n / (c.width * c.height);
  });
  check(painted > 0.95, `the grid is drawn (${(painted * 100).toFixed(1)} % of its pixels)`);
  await page.screenshot({ path: t.out + "/console.png", fullPage: true });

  // A lookup: where the user goes, and why.
  await page.fill("#q", t.lookup.user);
  await page.click("#lookup button");
  await page.waitForSelector("#lookup-result[data-cell]", { timeout: 5000 });
  const found = await page.$eval("#lookup-result", (e) => ({ cell: e.dataset.cell, slot: Number(e.dataset.slot), text: e.innerText }));
  check(found.cell === t.lookup.cell && found.slot === t.lookup.slot,
    `lookup ${t.lookup.user}: ${found.cell} slot ${found.slot}, the map says ${t.lookup.cell} slot ${t.lookup.slot}`);
  check(found.text.includes("hashes to slot " + t.lookup.slot), "the lookup says why: " + found.text);
  await page.locator("#map-section").screenshot({ path: t.out + "/console-map.png" });

  // A drain moves slots on the page.
  const drain = await (await fetch(t.hooks + "/drain")).json();
  const drainStart = Date.now();
  await page.waitForSelector(`#legend [data-cell='${drain.cell}'][data-slots='0']`, { timeout: 10000 });
  await page.waitForSelector(`#moving[data-version='${drain.version}']`, { timeout: 10000 });
  const moved = Number(await page.getAttribute("#moving", "data-moved"));
  check(moved === drain.moved, `the page shows ${moved} slots moved, the drain moved ${drain.moved}`);
  check(await page.locator(`#drains [data-drain='${drain.cell}']`).count() === 1, `the drains panel lists ${drain.cell}`);
  figures.drain_shown_ms = Date.now() - drainStart;
  await page.waitForSelector(`#history [data-version='${drain.version}']`, { timeout: 10000 });
  await page.click(`#history [data-version='${drain.version}']`);
  await page.waitForFunction((n) => document.querySelector("#diff").innerText.includes(n.toLocaleString("en-US") + " slots moved"), drain.moved, { timeout: 5000 });
  await page.locator("#map-section").screenshot({ path: t.out + "/console-drain.png" });

  // A rollout in progress: wave by wave, the gates, the time left.
  const ro = await (await fetch(t.hooks + "/rollout")).json();
  await page.waitForFunction((id) => document.getElementById("rollout").innerText.includes("Rollout " + id), ro.id, { timeout: 10000 });
  const rollout = await page.innerText("#rollout");
  for (const want of ["running", "wave 1", "wave 2", "baking", "not reached", "left of 30 s", "wait time to done: 120 of 200 samples", "pass intake 5xx"]) {
    check(rollout.includes(want), `the rollout panel shows "${want}": ${rollout}`);
  }
  const left = Number((rollout.match(/(\d+(?:\.\d+)?) s left of 30 s/) || [])[1]);
  check(left > 10 && left <= 20, `the bake's time left ${left} s, about 20 s`);

  // A map change's data moves under way: each move, its step and data.
  const mv = await (await fetch(t.hooks + "/moves")).json();
  await page.waitForFunction((id) => document.getElementById("moves").innerText.includes(id), mv.id, { timeout: 10000 });
  const moves = await page.innerText("#moves");
  for (const want of ["Data moves of map version 99", "preparing", "weight c3 2", "c1 → c3", "1,465 slots, 0 users", "copying", "48,210 copied"]) {
    check(moves.includes(want), `the moves panel shows "${want}": ${moves}`);
  }
  await page.locator("#rollout-section").screenshot({ path: t.out + "/console-rollout.png" });

  // A killed cell turns red within seconds.
  const kill = await (await fetch(t.hooks + "/kill")).json();
  const killStart = Date.now();
  await page.waitForSelector(`#cells [data-cell='${kill.cell}'][data-health='down']`, { timeout: 10000 });
  figures.red_after_kill_ms = Date.now() - killStart + kill.ms;
  const red = await page.locator(`#cells [data-cell='${kill.cell}']`).innerText();
  check(/refused|unreachable|no answer/.test(red), `the red card says why: ${red}`);
  check(red.includes("last good figures"), `the red card keeps its last good figures with their age: ${red}`);
  await page.locator("#cells-section").screenshot({ path: t.out + "/console-down.png" });

  // A registry that cannot be read: said so, the last map kept.
  await fetch(t.hooks + "/break-registry");
  await page.waitForSelector("#banner.down:not([hidden])", { timeout: 10000 });
  const banner = await page.innerText("#banner");
  check(banner.includes("cannot be read") && banner.includes("Showing the map read"), "the banner: " + banner);
  check((await page.locator("#legend [data-cell]").count()) === t.cells.length, "the last map stays on the page");
  await page.screenshot({ path: t.out + "/console-registry-down.png" });
  await fetch(t.hooks + "/mend-registry");
  await page.waitForSelector("#banner.down", { state: "detached", timeout: 10000 }).catch(() => {});
  await page.waitForFunction(() => document.getElementById("banner").hidden, null, { timeout: 10000 });

  // A router announced at an admin URL the console does not trust: listed
  // as not asked, its card red, and its URL never called.
  await fetch(t.hooks + "/rogue");
  await page.waitForSelector("#refused:not([hidden]) [data-refused='router rogue']", { timeout: 10000 });
  const refused = await page.innerText("#refused");
  check(/plain http and not a trusted admin endpoint/.test(refused), "the list of endpoints not asked says why: " + refused);
  check(await page.locator("#routers [data-router='rogue'][data-health='down']").count() === 1, "the rogue router's card is red");
  await page.locator("#cells-section").screenshot({ path: t.out + "/console-refused.png" });
  const rogueCalls = (await (await fetch(t.hooks + "/rogue-calls")).json()).calls;
  check(rogueCalls === 0, `the rogue router's admin URL was called ${rogueCalls} times`);

  // Another browser signs in, then out: its session ends, the first one's
  // goes on. Then wrong tokens in the sign-in form: 10 compared, then even
  // the right one is refused with 429 and Retry-After.
  const other = await browser.newContext({ viewport: { width: 1000, height: 700 } });
  try {
    const page2 = await other.newPage();
    await page2.goto(t.base + "?token=" + t.token);
    await page2.waitForSelector("body[data-ready='1']", { timeout: 10000 });
    const signedOut = page2.waitForResponse((r) => new URL(r.url()).pathname === "/" && r.status() === 401);
    await page2.click("#signout button");
    await signedOut;
    check((await page2.content()).includes("needs its token"), "Sign out leads to the sign-in page");
    const after = await page2.request.get(t.base + "api/view");
    check(after.status() === 401, `GET /api/view after Sign out: ${after.status()}, want 401`);
    check((await other.cookies()).every((c) => c.name !== "cellkit_console"), "the session cookie is gone after Sign out");
    const submit = async (token) => {
      if ((await page2.locator("input[name=token]").count()) === 0) await page2.goto(t.base); // from a 429's problem back to the form
      await page2.fill("input[name=token]", token);
      const answer = page2.waitForResponse((r) => new URL(r.url()).pathname === "/login" && r.request().method() === "POST");
      await page2.click("form[action='/login'] button");
      return answer;
    };
    // Wrong ones until refused for a while (one comes back every 6 s: a
    // slow run may see one or two more compared than the 10).
    let compared = 0;
    for (let i = 1; ; i++) {
      check(i <= 30, `30 wrong tokens and no 429 with Retry-After of 3 s or more (${compared} compared)`);
      const r = await submit("wrong-token-" + i);
      if (r.status() === 401) compared++;
      else if (r.status() === 429 && Number(r.headers()["retry-after"]) >= 3) break;
      else check(r.status() === 429, `wrong token ${i}: ${r.status()}, want 401 or 429`);
    }
    check(compared >= 10, `${compared} wrong tokens compared before a 429, want 10`);
    const limited = await submit(t.token);
    check(limited.status() === 429 && Number(limited.headers()["retry-after"]) > 0,
      `the right token after ${compared} wrong ones: ${limited.status()} (Retry-After ${limited.headers()["retry-after"]}), want 429`);
  } finally {
    await other.close();
  }
  check((await page.request.get(t.base + "api/view")).status() === 200, "the first browser's session goes on");

  check(errors.length === 0, "no errors in the page: " + errors.join("; "));
  check(foreign.length === 0, "no request beyond the console: " + foreign.join(", "));

  // The console itself stops: the page keeps its last view and says how
  // old it is (the browser logs the stream's end as an error: expected).
  await fetch(t.hooks + "/stop-console");
  await page.waitForFunction(() => /has not sent a new view/.test(document.getElementById("banner").innerText), null, { timeout: 15000 });
  check((await page.locator("#cells [data-cell]").count()) === t.cells.length, "the cards stay when the console is gone");
  await page.screenshot({ path: t.out + "/console-gone.png" });

  figures.assets_bytes = Object.entries(bytes).filter(([p]) => p === "/" || p.startsWith("/assets/")).reduce((a, [, n]) => a + n, 0);
  figures.view_bytes = bytes["/api/view"] || 0;
  figures.map_bytes = bytes["/api/map"] || 0;
  console.log(JSON.stringify(figures));
} finally {
  await browser.close();
}
