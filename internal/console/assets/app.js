// The cellkit console's page: renders the view the console collects
// (GET /api/view, then each new one from /api/events), the map's slots
// (GET /api/map) and its history. Every value is written as text, never
// as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  view: null,          // the last view received
  receivedAt: 0,       // when (this page's clock)
  table: null,         // {version, slots, cells, owners: Uint16Array, overrides}
  moved: null,         // Uint8Array: slots that changed owner at the last map change
  movedUntil: 0,
  highlight: -1,       // the slot of the last lookup
  historyVersion: 0,   // the map version the history list was read at
  first: true,
};

// PALETTE colours cells by their position in the map.
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#8cd17d"];
const NO_OWNER = 0xffff;

function color(i) {
  return i === NO_OWNER ? "#d5d8de" : PALETTE[i % PALETTE.length];
}

// el makes an element: el("td", {class: "x"}, "text", child...).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "bg") e.style.background = v; // CSSOM: the policy allows no style attributes
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const fmt = {
  rate: (r, k) => (r && r.bad && r.bad.includes(k) ? "bad value" : r && r.known ? r[k].toFixed(r[k] >= 100 ? 0 : 1) + "/s" : "–"),
  int: (n) => (n === undefined || n === null ? "–" : Number(n).toLocaleString("en-US")),
  pct: (x) => (x * 100).toFixed(1) + " %",
  secs: (s) => {
    if (s === undefined || s === null) return "–";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 120) return s.toFixed(s < 10 ? 1 : 0) + " s";
    if (s < 7200) return (s / 60).toFixed(0) + " min";
    return (s / 3600).toFixed(1) + " h";
  },
  ago: (t) => {
    if (!t) return "never";
    const s = Math.max(0, (viewNow() - Date.parse(t)) / 1000);
    return s < 1.5 ? "just now" : fmt.secs(s) + " ago";
  },
  time: (t) => new Date(t).toLocaleTimeString("en-GB"),
};

// viewNow is the collector's clock now: the view's time plus what passed
// since it arrived (the page's clock may differ from the console's).
function viewNow() {
  if (!state.view) return Date.now();
  return Date.parse(state.view.at) + (Date.now() - state.receivedAt);
}

function badge(text, cls) {
  return el("span", { class: "badge " + (cls || text) }, text);
}

function kv(pairs) {
  return el("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function replace(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

// badList names the values dropped from a card: not finite numbers.
function badList(bad) {
  if (!bad || !bad.length) return null;
  return el("div", { class: "bad" }, el("strong", {}, "Dropped, not a finite number:"),
    el("ul", {}, bad.slice(0, 8).map((b) => el("li", {}, b)), bad.length > 8 ? el("li", {}, `and ${bad.length - 8} more`) : null));
}

// ---- cells

function cellCard(c, colorIndex) {
  const s = c.status;
  const title = el("h3", {}, el("span", { class: "swatch", bg: color(colorIndex) }), c.id,
    badge(c.state), c.release ? el("span", { class: "muted", title: "release" }, c.release) : null);
  const parts = [title];
  if (c.why) parts.push(el("div", { class: "why" }, c.why));
  if (!c.reachable && c.error && c.why !== c.error) parts.push(el("div", { class: "why error" }, c.error));
  parts.push(badList(c.bad));
  if (s) {
    const stale = !c.reachable || (c.as_of && viewNow() - Date.parse(c.as_of) > 3000);
    if (stale) parts.push(el("div", { class: "muted" }, "last good figures, " + fmt.ago(c.as_of)));
    const depth = s.queue && s.queue.depth ? s.queue.depth : {};
    parts.push(kv([
      ["ready", s.ready ? "yes" : "no"],
      ["intake", s.intake],
      ["req/s", fmt.rate(c.rates, "requests")],
      ["5xx/s", fmt.rate(c.rates, "errors")],
      ["shed/s", fmt.rate(c.rates, "shed")],
      ["queue", `high ${fmt.int(depth.high || 0)} · normal ${fmt.int(depth.normal || 0)}`],
      ["oldest", fmt.secs(s.queue ? s.queue.oldest_age_seconds : null)],
      ["in flight", fmt.int(s.inflight)],
      ["failed / DLQ", `${fmt.int(s.failed)} / ${fmt.int(s.dlq)}`],
      s.store ? ["store", fmt.pct(s.store.used) + (s.store.refusing ? " (refusing)" : "")] : null,
    ]));
    const ags = Object.values(s.agencies || {}).sort((a, b) => a.agency.localeCompare(b.agency));
    if (ags.length) {
      parts.push(el("table", {},
        el("tr", {}, el("th", {}, "agency"), el("th", {}, "sessions"), el("th", {}, "waiting"), el("th", {}, "breaker")),
        ags.map((a) => el("tr", {}, el("td", {}, a.agency), el("td", {}, `${a.pool.in_use} / ${a.pool.size}`),
          el("td", {}, a.waiting), el("td", {}, badge(a.breaker || "?", a.breaker === "closed" ? "ok" : "warn"))))));
    }
  } else if (c.reachable === false && c.state !== "drained") {
    parts.push(el("div", { class: "muted" }, "no figures read yet"));
  }
  if (c.instances && c.instances.length) {
    parts.push(el("table", { class: "instances" },
      el("tr", {}, el("th", {}, "instance"), el("th", {}, "state"), el("th", {}, "req/s"), el("th", {}, "release")),
      c.instances.map((i) => el("tr", { dataset: { instance: i.id } }, el("td", {}, i.id),
        el("td", {}, i.untrusted ? badge("not asked", "down") : !i.reachable ? badge("unreachable", "down") : i.drained ? badge("drained", "off") : i.ready ? badge("ready", "ok") : badge("not ready", "warn")),
        el("td", {}, fmt.rate(i.rates, "requests")), el("td", { class: "muted" }, i.release || "")))));
  }
  return el("article", { class: "card " + c.health, dataset: { cell: c.id, health: c.health, untrusted: c.untrusted ? "1" : null }, title: c.error || "" }, parts);
}

// renderRefused lists the admin endpoints the console did not ask: their
// URLs (from the map or an announcement) are not ones it trusts with its
// credentials.
function renderRefused(v) {
  const box = $("refused");
  const refused = v.refused || [];
  box.hidden = !refused.length;
  if (!refused.length) return replace(box);
  replace(box, el("strong", {}, `Not asked: ${refused.length} admin endpoint${refused.length > 1 ? "s" : ""} the console does not trust with its credentials`),
    el("table", {}, el("tr", {}, el("th", {}, "for"), el("th", {}, "admin URL"), el("th", {}, "why")),
      refused.map((r) => el("tr", { dataset: { refused: r.what } }, el("td", {}, r.what), el("td", {}, el("code", {}, r.admin)), el("td", {}, r.why)))));
}

function renderCells(v) {
  const pos = new Map(((v.map && v.map.cells) || []).map((c, i) => [c.id, i]));
  if (!v.cells.length) {
    replace($("cells"), el("p", { class: "muted" }, v.map ? "The map has no cells." : "No map read yet."));
    return;
  }
  replace($("cells"), v.cells.map((c) => cellCard(c, pos.has(c.id) ? pos.get(c.id) : NO_OWNER)));
}

// ---- rollout and drains

function gateClass(g) {
  return g.startsWith("fail") ? "fail" : g.startsWith("wait") ? "wait" : "pass";
}

function renderRollout(v) {
  const r = v.rollout;
  const box = $("rollout");
  if (!r) {
    replace(box, el("p", { class: v.rollout_error ? "error" : "muted" },
      v.rollout_error ? "The rollout's record cannot be read: " + v.rollout_error : "No rollout."));
    return;
  }
  const reached = Object.assign({}, r.cells || {}, r.routers || {});
  const waves = (r.waves || []).map((w, i) => {
    const units = w.routers && w.routers.length ? w.routers : w.cells || [];
    const status = i < r.wave ? "done" : i === r.wave && r.state !== "done" ? r.state : i > r.wave ? "pending" : "done";
    return el("tr", { dataset: { wave: i + 1 } }, el("td", {}, "wave " + (i + 1)), el("td", {}, badge(status, status === "pending" ? "off" : status)),
      el("td", {}, units.map((u) => [u + " ", reached[u] ? badge(reached[u].phase) : badge("not reached", "off"), " "])),
      el("td", {}, "bake " + fmt.secs(w.bake_ns / 1e9)));
  });
  const parts = [
    el("h3", {}, "Rollout " + r.id, badge(r.state)),
    kv([
      ["release", (r.from ? r.from + " → " : "") + r.release],
      r.router_release ? ["routers", (r.router_from ? r.router_from + " → " : "") + r.router_release] : null,
      ["held by", r.holder],
      ["started", fmt.ago(r.started)],
      ["updated", fmt.ago(r.updated)],
    ]),
    el("table", { class: "waves" }, waves),
  ];
  if (r.bake) {
    const left = Math.max(0, r.bake_left_seconds - (Date.now() - state.receivedAt) / 1000);
    parts.push(el("div", { class: "bake" }, "Wave " + (r.bake.wave + 1) + " bake: ", badge(r.bake.decision),
      r.state === "running" ? " " + fmt.secs(left) + " left of " + fmt.secs(r.bake.bake_ns / 1e9) : ""));
    parts.push(el("ul", { class: "gates" }, (r.bake.gates || []).map((g) => el("li", { class: gateClass(g) }, g))));
  }
  if (r.reason) parts.push(el("p", { class: "why error" }, r.reason));
  const events = (r.events || []).slice(-8).reverse();
  if (events.length) {
    parts.push(el("ol", { class: "changes" }, events.map((e) => el("li", {}, el("time", {}, fmt.time(e.at)), e.text))));
  }
  replace(box, parts);
}

function renderDrains(v) {
  const box = $("drains");
  if (!v.drains.length) {
    replace(box, el("p", { class: "muted" }, "No cell draining or drained, no instance out of rotation."));
    return;
  }
  replace(box, el("table", {},
    el("tr", {}, el("th", {}, "cell"), el("th", {}, "instance"), el("th", {}, "state"), el("th", {}, "work left"), el("th", {}, "intake")),
    v.drains.map((d) => el("tr", { dataset: { drain: d.cell } }, el("td", {}, d.cell), el("td", {}, d.instance || ""),
      el("td", {}, badge(d.state, d.state === "out of rotation" ? "warn" : d.state)),
      el("td", {}, d.pending < 0 ? "unknown" : fmt.int(d.pending)), el("td", {}, d.intake || "")))));
}

function renderMoves(v) {
  const box = $("moves");
  const r = v.moves;
  if (!r) {
    replace(box, el("p", { class: v.moves_error ? "error" : "muted" },
      v.moves_error ? "The data moves' record cannot be read: " + v.moves_error : "No data move under way."));
    return;
  }
  const rows = (r.moves || []).map((m) => {
    const s = m.spec;
    const verified = m.verified ? "yes (" + fmt.int(m.slots) + " slots, " + fmt.int(m.messages) + " messages)" : "no";
    return el("tr", { dataset: { move: s.id } }, el("td", {}, s.id), el("td", {}, s.from + " → " + s.to),
      el("td", {}, fmt.int((s.slots || []).length) + " slots, " + fmt.int((s.users || []).length) + " users"),
      el("td", {}, badge(m.step, m.step === "called-off" || m.step === "skipped" ? "warn" : m.step === "done" ? "ok" : "")),
      el("td", {}, fmt.int((m.copied || 0) + (m.again || 0)) + " copied, " + fmt.int(m.handed || 0) + " handed over"),
      el("td", {}, verified), el("td", { class: m.error ? "error" : "" }, m.error || ""));
  });
  replace(box, [
    el("h3", {}, "Data moves of map version " + r.version, badge(r.phase)),
    kv([["change", r.change], ["held by", r.holder], ["started", fmt.ago(r.started)], ["updated", fmt.ago(r.updated)]]),
    el("table", { class: "moves" },
      el("tr", {}, el("th", {}, "move"), el("th", {}, "cells"), el("th", {}, "carries"), el("th", {}, "step"), el("th", {}, "data"),
        el("th", {}, "verified"), el("th", {}, "")),
      rows),
  ]);
}

// ---- routers

function renderRouters(v) {
  const box = $("routers");
  const cards = v.routers.map((r) => {
    const rd = r.readiness;
    const parts = [el("h3", {}, r.id, badge(r.health === "ok" ? "ready" : r.health, r.health),
      rd && rd.release ? el("span", { class: "muted" }, rd.release.id) : null)];
    if (r.why) parts.push(el("div", { class: "why" }, r.why));
    parts.push(badList(r.bad));
    if (rd) {
      if (!r.reachable) parts.push(el("div", { class: "muted" }, "last good figures, " + fmt.ago(r.as_of)));
      parts.push(kv([
        ["map version", rd.map_version + (rd.follower_version && rd.follower_version !== rd.map_version ? " (registry " + rd.follower_version + ")" : "")],
        ["map", rd.stale ? "stale" : "current"],
        ["registry read", fmt.secs(rd.map_age_seconds) + " ago"],
        ["req/s", fmt.rate(r.rates, "requests")],
        ["5xx/s", fmt.rate(r.rates, "errors")],
        ["shed/s", fmt.rate(r.rates, "shed")],
        ["pid", rd.pid + " (generation " + rd.generation + ")"],
      ]));
    }
    if (r.quota) {
      parts.push(kv([["quotas", r.quota.even ? "split evenly: its lease lapsed" :
        "shared by " + r.quota.routers + " router" + (r.quota.routers === 1 ? "" : "s") + ", lease " + fmt.secs(r.quota.lease_age_seconds) + " ago"]]));
    }
    if (r.hot && r.hot.length) {
      parts.push(el("table", {}, el("tr", {}, el("th", {}, "hot user"), el("th", {}, "share"), el("th", {}, "cell")),
        r.hot.map((h) => el("tr", {}, el("td", {}, h.user_id), el("td", {}, fmt.pct(h.share)), el("td", {}, h.cell + (h.override ? " (pinned)" : ""))))));
    }
    return el("article", { class: "card " + r.health, dataset: { router: r.id, health: r.health } }, parts);
  });
  if (v.routers_error) cards.unshift(el("p", { class: "error" }, "The routers cannot be listed: " + v.routers_error));
  if (!cards.length) cards.push(el("p", { class: "muted" }, "No router announced in the registry."));
  replace(box, cards);
}

// ---- clients' quotas

function renderQuotas(v) {
  const qs = v.quotas || [];
  if (!qs.length) {
    replace($("quotas"), [el("p", { class: "muted" }, "No router reports its clients' quotas.")]);
    return;
  }
  const routers = [...new Set(qs.flatMap((q) => Object.keys(q.shares)))].sort();
  const head = el("tr", {}, el("th", {}, "client"), el("th", {}, "limit"), el("th", {}, "asked"), el("th", {}, "use"),
    el("th", {}, "held"), routers.map((r) => el("th", {}, r)));
  const rows = qs.map((q) => el("tr", { dataset: { client: q.client }, class: q.held > 1.001 ? "warn" : "" },
    el("td", {}, q.client), el("td", {}, q.rate + "/s, burst " + q.burst), el("td", {}, q.demand.toFixed(1) + "/s"),
    el("td", {}, fmt.pct(q.use)), el("td", {}, fmt.pct(q.held)),
    routers.map((r) => el("td", {}, r in q.shares ? fmt.pct(q.shares[r]) : "–"))));
  replace($("quotas"), [el("table", {}, head, rows)]);
}

// ---- changes, header, banner

function renderChanges(v) {
  const items = (v.changes || []).slice().reverse().map((c) => el("li", {}, el("time", { datetime: c.at }, fmt.time(c.at)), el("strong", {}, c.what), " ", c.text));
  replace($("changes"), items.length ? items : [el("li", { class: "muted" }, "Nothing changed while this console ran.")]);
}

function renderHeader() {
  const v = state.view;
  if (!v) return;
  const m = v.map;
  $("mapinfo").textContent = m
    ? `map v${m.version}${m.change ? " (" + m.change + ")" : ""} · ${m.cells.length} cells · ${fmt.int(m.slots)} slots · changed ${fmt.ago(m.updated)}`
    : "no map read yet";
  const age = (Date.now() - state.receivedAt) / 1000;
  const live = $("live");
  if (state.lost) {
    live.className = "live lost";
    live.textContent = "console unreachable, view from " + fmt.secs(age) + " ago";
  } else if (age > 5) {
    live.className = "live stale";
    live.textContent = "view " + fmt.secs(age) + " old";
  } else {
    live.className = "live ok";
    live.textContent = "live · collected in " + fmt.secs(v.collect_seconds);
  }
  const banner = $("banner");
  if (!v.registry.ok) {
    banner.hidden = false;
    banner.className = "banner down";
    banner.textContent = `The registry (${v.registry.describe}) cannot be read: ${v.registry.error}. ` +
      (v.registry.read_at ? `Showing the map read ${fmt.ago(v.registry.read_at)}.` : "No map read yet.");
  } else if (state.lost || age > 5) {
    banner.hidden = false;
    banner.className = "banner";
    banner.textContent = `The console has not sent a new view for ${fmt.secs(age)}: what you see is from ${fmt.time(state.view.at)}.`;
  } else if (v.bad && v.bad.length) {
    banner.hidden = false;
    banner.className = "banner";
    banner.textContent = "Dropped from the view, not finite numbers: " + v.bad.slice(0, 5).join("; ");
  } else {
    banner.hidden = true;
  }
}

function render(v) {
  state.view = v;
  state.receivedAt = Date.now();
  state.lost = false;
  renderHeader();
  renderCells(v);
  renderRefused(v);
  renderRollout(v);
  renderDrains(v);
  renderMoves(v);
  renderRouters(v);
  renderQuotas(v);
  renderChanges(v);
  renderLegend();
  if (v.map && (!state.table || state.table.version !== v.map.version)) loadMap();
  if (v.map && state.historyVersion !== v.map.version) loadHistory(v.map.version);
  if (state.first) {
    state.first = false;
    performance.mark("console-first-view");
    document.body.dataset.ready = "1";
  }
  document.body.dataset.seq = v.seq;
}

// ---- the map grid

function geometry() {
  const slots = state.table.slots;
  const cols = Math.ceil(Math.sqrt(slots));
  const canvas = $("grid");
  const size = Math.max(1, Math.floor(canvas.width / cols));
  return { cols, size, canvas };
}

function drawGrid() {
  const t = state.table;
  if (!t) return;
  const { cols, size, canvas } = geometry();
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  for (let s = 0; s < t.slots; s++) {
    ctx.fillStyle = color(t.owners[s]);
    ctx.fillRect((s % cols) * size, Math.floor(s / cols) * size, size, size);
  }
  if (state.moved && Date.now() < state.movedUntil) {
    ctx.fillStyle = "rgba(0,0,0,0.55)";
    for (let s = 0; s < t.slots; s++) {
      if (state.moved[s]) ctx.fillRect((s % cols) * size + 1, Math.floor(s / cols) * size + 1, Math.max(1, size - 2), Math.max(1, size - 2));
    }
  }
  ctx.fillStyle = "#fff";
  for (const o of t.overrides) {
    const x = (o.slot % cols) * size, y = Math.floor(o.slot / cols) * size;
    ctx.fillRect(x + size / 2 - 1, y + size / 2 - 1, 2, 2);
  }
  if (state.highlight >= 0) {
    const s = state.highlight;
    ctx.strokeStyle = "#000";
    ctx.lineWidth = 2;
    ctx.strokeRect((s % cols) * size - 3, Math.floor(s / cols) * size - 3, size + 6, size + 6);
  }
}

function decodeOwners(b64) {
  const bin = atob(b64);
  const out = new Uint16Array(bin.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = bin.charCodeAt(2 * i) | (bin.charCodeAt(2 * i + 1) << 8);
  return out;
}

async function loadMap() {
  const want = state.view.map.version;
  if (state.loadingMap === want) return;
  state.loadingMap = want;
  try {
    const t = await getJSON("/api/map");
    t.owners = decodeOwners(t.owners);
    const prev = state.table;
    if (prev && prev.slots === t.slots && prev.version !== t.version) showMoves(prev, t);
    state.table = t;
    renderLegend();
    renderOverrides();
    drawGrid();
  } catch (e) {
    replace($("overrides"), el("p", { class: "error" }, "The map cannot be read: " + e.message));
  } finally {
    state.loadingMap = 0;
  }
}

// showMoves marks the slots that changed owner from prev to t and says
// where they went.
function showMoves(prev, t) {
  const moved = new Uint8Array(t.slots);
  const pairs = new Map();
  let n = 0;
  for (let s = 0; s < t.slots; s++) {
    const a = prev.owners[s] === NO_OWNER ? "none" : prev.cells[prev.owners[s]];
    const b = t.owners[s] === NO_OWNER ? "none" : t.cells[t.owners[s]];
    if (a !== b) {
      moved[s] = 1;
      n++;
      const k = a + " → " + b;
      pairs.set(k, (pairs.get(k) || 0) + 1);
    }
  }
  const box = $("moving");
  box.hidden = false;
  box.dataset.moved = n;
  box.dataset.version = t.version;
  const list = [...pairs.entries()].sort((x, y) => y[1] - x[1]).map(([k, c]) => el("li", {}, k + ": " + fmt.int(c) + " slots"));
  replace(box, el("strong", {}, `v${prev.version} → v${t.version}: ${fmt.int(n)} slots moved`), el("ul", {}, list));
  state.moved = moved;
  state.movedUntil = Date.now() + 15000;
  setTimeout(drawGrid, 15100);
}

function renderLegend() {
  const v = state.view;
  if (!v || !v.map) return;
  replace($("legend"), v.map.cells.map((c, i) => el("li", { dataset: { cell: c.id, slots: c.slots } },
    el("span", { class: "swatch", bg: color(i) }), el("strong", {}, c.id), badge(c.state),
    `${fmt.int(c.slots)} slots · ${c.users_pct.toFixed(1)} % of users`)));
}

function renderOverrides() {
  const t = state.table;
  const box = $("overrides");
  if (!t.overrides_total) {
    replace(box, el("p", { class: "muted" }, "No overrides."));
    return;
  }
  replace(box, el("h3", {}, `Overrides (${fmt.int(t.overrides_total)}, white dots on the grid)`),
    el("table", {}, el("tr", {}, el("th", {}, "user"), el("th", {}, "pinned to"), el("th", {}, "slot")),
      t.overrides.slice(0, 50).map((o) => el("tr", {}, el("td", {}, o.user), el("td", {}, o.cell), el("td", {}, o.slot)))));
}

function slotAt(ev) {
  const t = state.table;
  if (!t) return -1;
  const { cols, size, canvas } = geometry();
  const r = canvas.getBoundingClientRect();
  const x = Math.floor(((ev.clientX - r.left) * canvas.width) / r.width / size);
  const y = Math.floor(((ev.clientY - r.top) * canvas.height) / r.height / size);
  const s = y * cols + x;
  return x < cols && s >= 0 && s < t.slots ? s : -1;
}

// ---- lookup and history

async function lookup(q) {
  const box = $("lookup-result");
  box.hidden = false;
  try {
    const l = await getJSON("/api/lookup?q=" + encodeURIComponent(q));
    box.dataset.cell = l.cell;
    box.dataset.slot = l.slot;
    replace(box, el("strong", {}, l.kind === "user" ? `${l.user} → ${l.cell || "no cell"}` : `slot ${l.slot} → ${l.cell || "no cell"}`),
      l.override ? badge("override", "warn") : null, el("p", {}, l.why), el("p", { class: "muted" }, "map v" + l.version));
    state.highlight = l.slot;
    drawGrid();
  } catch (e) {
    delete box.dataset.cell;
    replace(box, el("p", { class: "error" }, e.message));
  }
}

async function loadHistory(version) {
  state.historyVersion = version;
  try {
    const h = await getJSON("/api/history");
    const items = h.versions.map((e) => el("li", { dataset: { version: e.version }, onclick: () => showDiff(e.version) },
      el("strong", {}, "v" + e.version), " · ", e.updated ? fmt.ago(e.updated) : "", " · ", e.change || "",
      e.moved_slots > 0 ? ` · ${fmt.int(e.moved_slots)} slots moved (` + e.moves.slice(0, 4).map((m) => `${m.from || "none"}→${m.to || "none"} ${fmt.int(m.slots)}`).join(", ") + ")" : "",
      e.error ? el("span", { class: "error" }, " " + e.error) : null));
    replace($("history"), items.length ? items : [el("li", { class: "muted" }, h.where)]);
  } catch (e) {
    state.historyVersion = 0;
    replace($("history"), el("li", { class: "error" }, "The history cannot be read: " + e.message));
  }
}

async function showDiff(version) {
  const box = $("diff");
  box.hidden = false;
  for (const li of $("history").children) li.classList.toggle("sel", li.dataset.version === String(version));
  try {
    const d = await getJSON("/api/history/" + version);
    const p = d.plan;
    const cells = (p.cells || []).filter((c) => c.state_before !== c.state_after || c.slots_before !== c.slots_after || c.weight_before !== c.weight_after);
    replace(box, el("strong", {}, `v${d.from} → v${d.to}: ${fmt.int(p.moved_slots)} slots moved (dark on the grid)`),
      el("table", {}, el("tr", {}, el("th", {}, "cell"), el("th", {}, "state"), el("th", {}, "slots"), el("th", {}, "weight")),
        cells.map((c) => el("tr", {}, el("td", {}, c.id), el("td", {}, (c.state_before || "–") + " → " + (c.state_after || "–")),
          el("td", {}, fmt.int(c.slots_before) + " → " + fmt.int(c.slots_after)), el("td", {}, (c.weight_before || "–") + " → " + (c.weight_after || "–"))))),
      (p.overrides || []).length ? el("p", {}, "Overrides: " + p.overrides.map((o) => `${o.user} ${o.from || "none"}→${o.to || "none"}`).join(", ")) : null);
    if (state.table) {
      const moved = new Uint8Array(state.table.slots);
      for (const m of p.moves || []) for (let s = m.from; s <= m.to && s < moved.length; s++) moved[s] = 1;
      state.moved = moved;
      state.movedUntil = Date.now() + 15000;
      drawGrid();
      setTimeout(drawGrid, 15100);
    }
  } catch (e) {
    replace(box, el("p", { class: "error" }, e.message));
  }
}

// ---- fetching

async function getJSON(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (r.status === 401) {
    location.reload(); // the sign-in page
    throw new Error("signed out");
  }
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new Error((body && (body.detail || body.title)) || r.status + " " + r.statusText);
  return body;
}

function listen() {
  const es = new EventSource("/api/events");
  es.addEventListener("view", (ev) => render(JSON.parse(ev.data)));
  es.onerror = () => {
    state.lost = true;
    renderHeader();
    // EventSource reconnects by itself; a 401 or a closed console ends
    // it: look again in a while.
    if (es.readyState === EventSource.CLOSED) setTimeout(() => getJSON("/api/view").then(render).then(listen).catch(() => {
      state.lost = true;
      renderHeader();
      setTimeout(listen, 3000);
    }), 2000);
  };
}

function start() {
  $("lookup").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = $("q").value.trim();
    if (q) lookup(q);
  });
  const grid = $("grid");
  grid.addEventListener("mousemove", (ev) => {
    const s = slotAt(ev);
    if (s < 0) return;
    const o = state.table.owners[s];
    $("hover").textContent = `slot ${s} → ${o === NO_OWNER ? "no cell" : state.table.cells[o]}`;
  });
  grid.addEventListener("click", (ev) => {
    const s = slotAt(ev);
    if (s >= 0) {
      $("q").value = String(s);
      lookup(String(s));
    }
  });
  setInterval(() => {
    renderHeader();
    if (state.view && state.view.rollout) renderRollout(state.view);
  }, 1000);
  getJSON("/api/view").then(render).catch((e) => {
    $("banner").hidden = false;
    $("banner").textContent = "The console's view cannot be read: " + e.message;
  }).finally(listen);
}

start();
