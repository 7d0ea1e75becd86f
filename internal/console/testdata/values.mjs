// The console's page with values that are not finite numbers (headless
// Chromium driven by playwright-core): run by TestBadValuesInABrowser,
// which passes where the console is in CONSOLE_TEST (JSON). Any failed
// check throws (exit 1).
import { createRequire } from "node:module";

const t = JSON.parse(process.env.CONSOLE_TEST);
const require = createRequire(t.playwright + "/");
const { chromium } = require("playwright-core");

function check(ok, what) {
  if (!ok) throw new Error("check failed: " + what);
}

const browser = await chromium.launch({
  executablePath: t.chromium,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(t.base + "?token=" + t.token);
  await page.waitForSelector("body[data-ready='1']", { timeout: 10000 }).catch(async (e) => {
    throw new Error(`the first view: ${e.message}; errors: ${errors.join("; ")}; page: ${(await page.content()).slice(0, 2000)}`);
  });

  // The bad cell: amber, each value dropped named, its rates "bad value".
  await page.waitForSelector("#cells [data-cell='c1'][data-health='warn']", { timeout: 10000 });
  await page.waitForFunction(() => /req\/s\s+bad value/.test(document.querySelector("#cells [data-cell='c1']").innerText), null, { timeout: 10000 });
  const c1 = await page.innerText("#cells [data-cell='c1']");
  for (const want of ["Dropped, not a finite number:", 'cellkit_cell_intake_requests_total{code="200",route="inquiries"} = NaN',
    'cellkit_cell_intake_shed_total{reason="queue"} = -Inf', "process_start_time_seconds is NaN"]) {
    check(c1.includes(want), `c1's card shows "${want}": ${c1}`);
  }
  check(/5xx\/s\s+bad value/.test(c1) && /shed\/s\s+bad value/.test(c1), "c1's 5xx/s and shed/s read bad value: " + c1);
  // The good cell: green, its rates shown.
  await page.waitForFunction(() => /req\/s\s+[1-9]/.test(document.querySelector("#cells [data-cell='c2']").innerText), null, { timeout: 10000 });
  check(await page.getAttribute("#cells [data-cell='c2']", "data-health") === "ok", "c2's card is green");
  await page.locator("#cells-section").screenshot({ path: t.out + "/console-bad-values.png" });
  check(errors.length === 0, "no errors in the page: " + errors.join("; "));
} finally {
  await browser.close();
}
