// Tessera dashboard: reads the JSON API with the visitor's token and renders one page.
// Everything shown is built with DOM nodes and textContent: nothing from the API is ever
// parsed as markup (job names, reasons and messages are tenant- or backend-controlled).
"use strict";

const TOKEN_KEY = "tessera-token";
const REFRESH_MS = 5000;
const PAGES = ["nodes", "queue", "services", "events"];

// Errors are shown on the page (and counted by the headless-browser test).
function reportError(message) {
  const box = document.getElementById("errors");
  if (box) {
    box.appendChild(el("div", {}, String(message)));
  }
}
window.addEventListener("error", (e) => reportError("script error: " + e.message));
window.addEventListener("unhandledrejection", (e) => reportError("unhandled: " + e.reason));

// A DOM element with attributes and children (strings become text nodes).
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    node.appendChild(typeof c === "object" && c.nodeType ? c : document.createTextNode(String(c)));
  }
  return node;
}

function table(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

function tag(text, cls) {
  return el("span", { class: "tag " + cls }, text);
}

// --- formatting -------------------------------------------------------------------------

const UNITS = [["Pi", 2 ** 50], ["Ti", 2 ** 40], ["Gi", 2 ** 30], ["Mi", 2 ** 20], ["Ki", 2 ** 10]];

// A byte quantity as the API sends it ("32Gi", "9765625Ki", "1000000000") in human units.
function bytes(q) {
  if (q === undefined || q === null) return "-";
  const m = String(q).match(/^([0-9.]+)([KMGTPE]i?)?$/);
  if (!m) return String(q);
  const mult = { K: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, Ki: 2 ** 10, Mi: 2 ** 20,
    Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50 };
  const n = parseFloat(m[1]) * (m[2] ? mult[m[2]] || 1 : 1);
  for (const [u, f] of UNITS) {
    if (n >= f) {
      const v = n / f;
      return v.toFixed(1).replace(/\.0$/, "") + " " + u + "B";
    }
  }
  return n + " B";
}

function ago(unix) {
  if (typeof unix !== "number") return "-";
  const s = Math.round(Date.now() / 1000 - unix);
  const a = Math.abs(s);
  const t = a < 60 ? a + "s" : a < 3600 ? Math.floor(a / 60) + "m " + (a % 60) + "s"
    : a < 86400 ? Math.floor(a / 3600) + "h " + Math.floor((a % 3600) / 60) + "m"
    : Math.floor(a / 86400) + "d " + Math.floor((a % 86400) / 3600) + "h";
  return s >= 0 ? t + " ago" : "in " + t;
}

function clock(unix) {
  if (typeof unix !== "number") return "-";
  return new Date(unix * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

// What part of a GPU a share holds: "whole", "mig 3g.40gb@4", "quota sm 300-500‰ 10 GiB".
function part(p) {
  if (!p) return "";
  if (p.kind === "mig") return "mig " + p.profile + "@" + p.start;
  if (p.kind === "quota") return "quota sm " + p.smRequest + "-" + p.smLimit + "\u2030, " + bytes(p.memory);
  return String(p.kind || "");
}

// A pending reason, whatever shape the API gives it: a string, or a structure (shown as
// key: value lines, nested structures as JSON text).
function reason(r) {
  if (r === undefined || r === null) return "-";
  if (typeof r !== "object") return String(r);
  if (Array.isArray(r)) return el("ul", { class: "plain" }, r.map((x) => el("li", {}, reason(x))));
  return el("ul", { class: "plain" }, Object.entries(r).map(([k, v]) =>
    el("li", {}, k + ": ", typeof v === "object" && v !== null ? JSON.stringify(v) : String(v))));
}

// A pending job's expected start (the daemon's forecast): "2026-11-28 19:05:00Z (in 1h 2m)",
// "after …" when beyond the forecast's horizon, "-" before the first forecast.
function expected(e) {
  if (!e || typeof e !== "object") return "-";
  if (typeof e.at === "number") {
    return e.at * 1000 <= Date.now() ? "now" : clock(e.at) + " (" + ago(e.at) + ")";
  }
  if (typeof e.notBefore === "number") return "after " + clock(e.notBefore);
  return "-";
}

// Why a pending job waits (the API's `reason`): its kind as a tag, then the whole reason
// (needs, free per node group, holders) as text.
function why(r) {
  if (r === undefined || r === null) return "-";
  return el("span", { class: "why", "data-kind": r.kind }, tag(r.kind, "why-kind"), " ", r.text);
}

function gpusOf(j) {
  return String(j.gpus) + (j.gpuType ? " " + j.gpuType : "");
}

// --- API --------------------------------------------------------------------------------

class Unauthorized extends Error {}

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const resp = await fetch(path, {
    headers: { Authorization: "Bearer " + token, Accept: "application/json" },
    credentials: "omit",
    cache: "no-store",
  });
  if (resp.status === 401) throw new Unauthorized("the daemon refused this token");
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    const msg = body && body.error ? body.error.code + ": " + body.error.message : "HTTP " + resp.status;
    throw new Error(path + ": " + msg);
  }
  return body;
}

// Every page of the job listing in one state.
async function jobs(state) {
  let out = [];
  let after = null;
  for (let i = 0; i < 100; i++) {
    const page = await api("/v1/jobs?state=" + state + (after ? "&after=" + after : ""));
    out = out.concat(page.jobs);
    if (!page.nextAfter) break;
    after = page.nextAfter;
  }
  return out;
}

// --- pages ------------------------------------------------------------------------------

async function renderNodes() {
  const [nodes, running, starting, services] = await Promise.all([
    api("/v1/nodes"), jobs("running"), jobs("starting"), api("/v1/services")]);
  // Who holds each GPU, as far as this token may see (others' jobs are counted, not named).
  const holders = new Map();
  const hold = (share, who) => {
    const d = share.devices;
    if (!d) return;
    for (const i of d.indices) {
      const key = share.node + "\u0000" + (share.gresType || "") + "\u0000" + i;
      if (!holders.has(key)) holders.set(key, []);
      holders.get(key).push(who + " " + part(d.part));
    }
  };
  for (const j of running.concat(starting)) {
    for (const s of j.allocation || []) hold(s, "job " + j.id + " " + j.name + " (" + j.tenant + ")");
  }
  for (const svc of services.services) {
    for (const inst of svc.instances || []) {
      for (const s of inst.allocation || []) {
        hold(s, "service " + svc.id + " " + svc.name + " #" + inst.id + " (" + svc.tenant + ")");
      }
    }
  }
  const cards = nodes.nodes.map((n) => {
    const rows = (n.devices || []).map((g) => {
      const key = n.name + "\u0000" + (n.gresType || "") + "\u0000" + g.index;
      const known = holders.get(key) || [];
      const layout = g.layout ? g.layout.map((m) => m.profile + "@" + m.start).join(" ") : "-";
      const who = known.length ? el("ul", { class: "plain" }, known.map((h) => el("li", {}, h))) : "-";
      const extra = [];
      if (g.smRequestedPermille) extra.push("sm requested " + g.smRequestedPermille + "\u2030");
      const hidden = (g.holders || 0) - known.length;
      if (g.mode === "whole" && known.length === 0) extra.push("held by another tenant");
      else if (hidden > 0) extra.push(hidden + " held by other tenants");
      if (g.reason) extra.push(g.reason);
      return [String(g.index), tag(g.mode, "mode-" + g.mode), layout, who, extra.join("; ") || ""];
    });
    return el("div", { class: "card node", "data-node": n.name },
      el("h2", {}, n.name + (n.gresType ? " / " + n.gresType : "") + " ",
        tag(n.health, "health-" + n.health)),
      el("p", { class: "muted" }, n.gpuModel + " \u00b7 GPUs " + n.gpusAllocated + "/" + n.gpus +
        " \u00b7 CPU " + n.cpuAllocated + "/" + n.cpu + " \u00b7 memory " + bytes(n.memoryAllocated) +
        " / " + bytes(n.memory)),
      table(["gpu", "mode", "MIG layout", "held by", "notes"], rows, { class: "gpus" }));
  });
  return [el("h1", {}, "Nodes (" + nodes.nodes.length + ")"), el("div", { class: "cards" }, cards)];
}

async function renderQueue() {
  const q = await api("/v1/queue");
  const summary = table(["queue", "pending", "running", "pending GPUs", "running GPUs"],
    q.queues.map((s) => [s.name, String(s.pending), String(s.running), String(s.pendingGpus),
      String(s.runningGpus)]));
  const pending = table(["#", "job", "name", "tenant", "queue", "gpus", "priority", "waiting", "reason", "why", "expected start"],
    q.pending.map((j) => [
      String(j.queuePosition ?? "-"), String(j.id), j.name, j.tenant, j.queue, gpusOf(j),
      String(j.priority), ago(j.submittedAt).replace(" ago", ""), reason(j.pendingReason),
      why(j.reason),
      expected(j.expectedStart),
    ]), { class: "pending" });
  return [el("h1", {}, "Queue"), el("p", {}, "policy: ", el("code", {}, q.policy)), summary,
    el("h2", {}, "Pending, in scheduling order (" + q.pending.length + ")"),
    q.pending.length ? pending : el("p", { class: "muted" }, "nothing pending")];
}

// SLO attainment over the instances' latest load reports: requests within the SLO over
// requests completed.
function attainment(svc) {
  let done = 0;
  let late = 0;
  for (const i of svc.instances || []) {
    if (i.load) {
      done += i.load.completed || 0;
      late += i.load.violations || 0;
    }
  }
  return done > 0 ? ((100 * (done - late)) / done).toFixed(1) + "% of " + done : "no report yet";
}

async function renderServices() {
  const l = await api("/v1/services");
  const rows = l.services.map((s) => [
    String(s.id), s.name, s.tenant, s.state, String((s.instances || []).length), attainment(s),
    el("ul", { class: "plain" }, (s.instances || []).map((i) => el("li", {},
      "#" + i.id + " " + i.state + " on " +
      (i.allocation || []).map((a) => a.node + "[" + (a.devices ? a.devices.indices.join(",") : "") + "] " +
        part(a.devices && a.devices.part)).join(", ") +
      (i.load ? " \u00b7 " + i.load.requestsPerSecond + " req/s, p99 " +
        (1000 * i.load.p99LatencySeconds).toFixed(1) + " ms, queue " + i.load.queueLength : "")))),
    String(s.restarts), s.message || "",
  ]);
  return [el("h1", {}, "Services (" + l.services.length + ")"),
    l.services.length ? table(["id", "name", "tenant", "state", "instances", "SLO attainment",
      "placement and load", "restarts", "message"], rows, { class: "services" })
      : el("p", { class: "muted" }, "no service")];
}

async function renderEvents() {
  const l = await api("/v1/events?limit=200");
  const rows = l.events.slice().reverse().map((e) => [
    clock(e.at), e.kind,
    e.job !== undefined ? "job " + e.job : e.service !== undefined ? "service " + e.service + " #" + e.instance : "",
    e.name || "", e.tenant || "", (e.nodes || []).join(", ") + (e.gpu !== undefined ? " gpu " + e.gpu : ""),
    e.detail,
  ]);
  return [el("h1", {}, "Recent events (" + l.events.length + ")"),
    l.events.length ? table(["at", "event", "what", "name", "tenant", "where", "detail"], rows,
      { class: "events" }) : el("p", { class: "muted" }, "no event yet")];
}

const RENDER = { nodes: renderNodes, queue: renderQueue, services: renderServices, events: renderEvents };

// --- shell ------------------------------------------------------------------------------

function currentPage() {
  const name = location.pathname.replace(/\/+$/, "").split("/").pop();
  return PAGES.includes(name) ? name : "nodes";
}

function showLogin(message) {
  document.getElementById("login").hidden = false;
  document.getElementById("logout").hidden = true;
  document.getElementById("content").replaceChildren();
  document.getElementById("login-error").textContent = message || "";
  document.body.dataset.state = "login";
}

let timer = null;

async function refresh() {
  const page = currentPage();
  try {
    const parts = await RENDER[page]();
    document.getElementById("content").replaceChildren(...parts);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString() +
      " \u00b7 refreshes every " + REFRESH_MS / 1000 + " s";
    document.body.dataset.state = "ready";
    timer = setTimeout(refresh, REFRESH_MS);
  } catch (e) {
    if (e instanceof Unauthorized) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(e.message + " (a tenant token, as for tessera --token)");
      return;
    }
    // The daemon may be restarting: say so and try again.
    document.getElementById("updated").textContent = "cannot read the API: " + e.message;
    document.body.dataset.state = "error";
    timer = setTimeout(refresh, REFRESH_MS);
  }
}

function start() {
  const page = currentPage();
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.page === page) a.classList.add("current");
  }
  document.title = "Tessera \u00b7 " + page;
  // A token in the fragment (never sent to the server) is taken and removed from the address.
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  document.getElementById("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = document.getElementById("token").value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    document.getElementById("login").hidden = true;
    document.getElementById("logout").hidden = false;
    refresh();
  });
  document.getElementById("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    if (timer) clearTimeout(timer);
    showLogin("");
  });
  if (!sessionStorage.getItem(TOKEN_KEY)) {
    showLogin("");
    return;
  }
  document.getElementById("logout").hidden = false;
  refresh();
}

start();
