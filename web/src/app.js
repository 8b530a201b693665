// The dashboard's pages: each reads its JSON twin under /api/ and draws it, again every few
// seconds, without reloading. Everything from the cluster is put in the page as text
// (textContent), never as HTML: job names and user names come from users.
"use strict";

const REFRESH_MS = 5000;
const path = location.pathname.replace(/\/+$/, "") || "/cluster";
const parts = path.split("/").filter(Boolean);
const page = parts[0] || "cluster";
const detail = parts[1] ? decodeURIComponent(parts[1]) : null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function table(headers, rows, rowClass) {
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length === 0
      ? el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, "none"))
      : rows.map((r, i) => el("tr", { class: rowClass ? rowClass(i) : null },
          r.map((c) => el("td", {}, c))))));
}

const clock = (t) => (t > 0 ? new Date(t * 1000).toLocaleTimeString() : "");
function duration(s) {
  if (s === null || s === undefined) return "";
  if (s < 60) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
const hours = (h) => (h || 0).toFixed(2);
const jobLabel = (j) => (j.id ? String(j.id) : "another user's");
// "2", or for MIG slices "2x1g.10gb".
const gpusText = (j) => (j.slice ? `${j.gpus}x${j.slice}`
  : !j.gpus && j.shards ? `${j.shards} shard${j.shards === 1 ? "" : "s"}` : String(j.gpus));

async function api(p) {
  const r = await fetch(p, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (r.status === 401) {
    // A session whose key was revoked: the sign-in page says so.
    const body = await r.json().catch(() => ({}));
    const ended = body.error && body.error.param === "revoked" ? "&ended=revoked" : "";
    location.assign(`/login?next=${encodeURIComponent(location.pathname)}${ended}`);
    throw new Error("signed out");
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = new Error((body.error && body.error.message) || `HTTP ${r.status}`);
    e.status = r.status;
    throw e;
  }
  return body;
}

// ---- pages ---------------------------------------------------------------------------------

const GPU_STATES = ["training", "inference", "idle", "reserved", "drained", "down"];
// A node's condition in a few words, beside its name (dashboard/node_health.h has the rest).
const STATUS_WORDS = { up: "", not_responding: "not responding", down: "down",
  draining: "draining", drained: "drained", unknown: "" };
const AGENT_WORDS = { ok: "", none: "no telemetry", no_telemetry: "no telemetry",
  unreachable: "agent unreachable" };

function nodeLabel(n) {
  const words = [STATUS_WORDS[n.status] === "" ? n.state : STATUS_WORDS[n.status] || n.state,
    AGENT_WORDS[n.agent]].filter(Boolean);
  return words.join(" · ");
}

function clusterPage(c) {
  const t = c.totals;
  return [
    el("h2", {}, `Cluster map · ${c.mode} mode`),
    el("p", { class: "totals" },
      el("span", {}, `${t.gpus} GPUs`), el("span", {}, `${t.training} training`),
      el("span", {}, `${t.inference} inference`), el("span", {}, `${t.idle} idle`),
      el("span", {}, `${t.reserved} reserved`), el("span", {}, `${t.drained} drained`),
      el("span", {}, `${t.down} down`)),
    el("p", { class: "legend" }, GPU_STATES.map((s) =>
      el("span", {}, el("i", { class: `gpu ${s}` }), s)), el("span", {}, "outlined: yours")),
    el("div", { class: "nodes" }, c.nodes.map((n) =>
      el("div", { class: `node ${n.status} agent-${n.agent}`, "data-node": n.name,
        "data-status": n.status, "data-agent": n.agent, title: n.status_text },
        el("h4", {}, el("span", {}, n.name), el("span", { class: "status" }, nodeLabel(n))),
        n.status !== "up" || n.agent === "unreachable" || n.agent === "no_telemetry"
          ? el("p", { class: "status-text" }, n.status_text) : null,
        el("div", { class: "gpus" }, n.gpus.map((g) =>
          el("div", {
            class: `gpu ${g.state}${g.mine ? " mine" : ""}`,
            "data-gpu": `${n.name}/${g.index}`, "data-state": g.state,
            "data-job": g.job_id || null,
            title: `${n.name} GPU ${g.index}: ${g.state}` +
              (g.slice ? ` · MIG slice ${g.slice}` : "") +
              (g.sharers ? ` · shared: ${g.shards} shards held by ${g.sharers} job(s)` : "") +
              (g.user ? ` · job ${g.job_id} (${g.user})` : "") +
              (g.util !== null ? ` · ${g.util}% busy` : ""),
          },
          el("div", {}, `#${g.index}` + (g.slice ? ` ${g.slice}` : "") +
            (g.sharers ? ` shared ×${g.sharers}` : "")),
          el("div", {}, g.job_id ? `job ${g.job_id}` : g.state === "idle" ? "" : g.state),
          el("div", {}, g.user || ""),
          el("div", {}, g.util !== null ? `${g.util}%` : ""))))))),
  ];
}

function queuePage(q) {
  return [
    el("h2", {}, `Queue · ${q.totals.pending} pending (${q.totals.pending_gpus} GPUs), ${q.totals.running} running`),
    el("h3", {}, "Pending"),
    table(["Job", "User", "Name", "Partition", "GPUs", "Waiting", "Why"],
      q.pending.map((j) => [jobLabel(j), j.user, j.name, j.partition, gpusText(j), duration(j.waiting_s),
        el("span", { class: "reason", "data-job": j.id || null }, j.reason_text)]),
      (i) => (q.pending[i].mine ? "mine" : null)),
    el("h3", {}, "Running"),
    table(["Job", "User", "Name", "Partition", "GPUs", "Nodes", "Started", "Ends by", ""],
      q.running.map((j) => [jobLabel(j), j.user, j.name, j.partition, gpusText(j), j.nodes.join(","),
        clock(j.started), j.time_limit_min > 0 ? clock(j.started + j.time_limit_min * 60) : "no limit",
        j.idle ? el("span", { class: "badge warn" },
          j.idle.kind === "warn" ? `GPUs idle since ${clock(j.idle.since)}` : "cancelled: GPUs idle") : ""]),
      (i) => (q.running[i].mine ? "mine" : null)),
    el("h3", {}, "Recently ended"),
    table(["Job", "User", "Name", "State", "GPUs", "Ended", "Reason"],
      q.recent.map((j) => [jobLabel(j), j.user, j.name, j.state, gpusText(j), clock(j.ended), j.reason])),
  ];
}

function inferencePage(inf) {
  return [
    el("h2", {}, "Inference"),
    inf.gateway.reachable ? null : el("p", { class: "error" }, `gateway: ${inf.gateway.error}`),
    el("p", { class: "totals" },
      el("span", {}, `${inf.tokens_last_hour} tokens in the last hour`),
      el("span", {}, `TTFT p95 ${inf.ttft_p95_s === null ? "–" : inf.ttft_p95_s.toFixed(3) + " s"}`)),
    table(["Model", "Ready replicas", "Queued", "Requests (1 h)", "Tokens (1 h)", "Replicas"],
      inf.models.map((m) => [m.model, m.ready, m.queued, m.requests_last_hour, m.tokens_last_hour,
        m.replicas.map((r) => el("div", {}, `${r.url} · ${r.state} · ${r.in_flight}/${r.capacity || "?"} in flight`))])),
    el("h3", {}, "Tokens per user, last hour"),
    table(["User", "Requests", "Prompt tokens", "Completion tokens"],
      inf.users.map((u) => [u.user, u.requests, u.prompt_tokens, u.completion_tokens])),
  ];
}

function userLink(name, me) {
  return me.admin || name === me.user ? el("a", { href: `/users/${encodeURIComponent(name)}` }, name) : name;
}

function usersPage(u, me) {
  return [
    el("h2", {}, me.admin ? "Users" : "Your usage"),
    el("p", { class: "totals" },
      el("span", {}, `${u.totals.users} users`),
      el("span", {}, `${hours(u.totals.gpu_hours_30d)} GPU-hours in 30 days`),
      el("span", {}, `${hours(u.totals.wasted_gpu_hours_30d)} GPU-hours wasted idle`),
      el("span", {}, `${u.totals.tokens_today} tokens today`)),
    table(["User", "GPU-hours (30 d)", "Wasted GPU-hours", "Tokens today", "Running", "Pending",
      "GPUs held", "Limits"],
      u.users.map((r) => [userLink(r.user, me), hours(r.gpu_hours_30d), hours(r.wasted_gpu_hours_30d),
        r.tokens_today, r.running_jobs, r.pending_jobs, r.gpus_held, limits(r.limits)]),
      (i) => (u.users[i].user === me.user ? "mine" : null)),
  ];
}

function limits(l) {
  if (!l) return "not a gateway user";
  const parts = [`weight ${l.weight}`];
  for (const k of ["rpm", "tpm", "tokens_per_day", "max_concurrent"]) if (l[k] !== null) parts.push(`${k} ${l[k]}`);
  return parts.join(", ");
}

function userPage(u) {
  return [
    el("h2", {}, `User ${u.user}${u.admin ? " (admin)" : ""}`),
    el("p", { class: "totals" },
      el("span", {}, `${hours(u.gpu_hours_30d)} GPU-hours in 30 days`),
      el("span", {}, `${hours(u.wasted_gpu_hours_30d)} wasted idle`),
      el("span", {}, `${u.tokens_today} tokens today`), el("span", {}, limits(u.limits))),
    el("h3", {}, "Jobs"),
    table(["Job", "Name", "State", "GPUs", "Why / nodes"],
      u.jobs.map((j) => [j.id, j.name, j.state, j.gpus, j.reason_text || j.nodes.join(",")])),
    el("h3", {}, "Idle-GPU actions"),
    table(["Job", "Action", "At", "Wasted GPU-hours", "Reason"],
      u.idle_actions.map((a) => [a.job, a.kind, clock(a.at), hours(a.wasted_gpu_hours), a.reason])),
  ];
}

function modePage(m) {
  return [
    el("h2", {}, `Mode: ${m.mode}`),
    m.mode === "research"
      ? el("p", {}, `Research mode since ${m.since}: ${m.nodes.join(", ")} belong to ${m.users.join(", ")}.`)
      : el("p", {}, "Lab mode: every node is shared by everyone."),
    table(["Node", "Owner"], m.owners.map((o) => [o.node, o.owner])),
  ];
}

// ---- plots ---------------------------------------------------------------------------------

const plots = {};
function plot(id, series, data) {
  const target = document.getElementById(id);
  const width = Math.max(300, target.clientWidth || 380);
  if (!plots[id]) {
    plots[id] = new uPlot({ width, height: 160, series: [{}, ...series], scales: { x: { time: true } } },
      data, target);
  } else {
    plots[id].setData(data);
  }
}

function drawPlots(h) {
  const p = h.points;
  const t = p.map((x) => x.t);
  plot("plot-gpus", [
    { label: "training", stroke: "#2f6fdf" }, { label: "inference", stroke: "#1f9d6b" },
    { label: "idle", stroke: "#9aa3ad" }],
  [t, p.map((x) => x.training), p.map((x) => x.inference), p.map((x) => x.idle)]);
  plot("plot-queue", [{ label: "queue", stroke: "#c58b14" }], [t, p.map((x) => x.queue)]);
  plot("plot-ttft", [{ label: "TTFT p95 (s)", stroke: "#8a3b3b" }], [t, p.map((x) => x.ttft_p95_s)]);
}

// ---- refresh -------------------------------------------------------------------------------

async function refresh() {
  const main = document.getElementById("page");
  try {
    const me = await api("/api/me");
    document.getElementById("who").textContent = `${me.user}${me.admin ? " (admin)" : ""}`;
    const warnings = Object.entries(me.sources).filter(([, s]) => s && s.ok === false)
      .map(([name, s]) => el("div", { class: "warn" }, `${name}: ${s.error || "not reachable"}`));
    document.getElementById("sources").replaceChildren(...warnings);
    let content;
    if (page === "cluster") content = clusterPage(await api("/api/cluster"));
    else if (page === "queue") content = queuePage(await api("/api/queue"));
    else if (page === "inference") content = inferencePage(await api("/api/inference"));
    else if (page === "users" && detail) content = userPage(await api(`/api/users/${encodeURIComponent(detail)}`));
    else if (page === "users") content = usersPage(await api("/api/users"), me);
    else if (page === "mode") content = modePage(await api("/api/mode"));
    else content = [el("p", { class: "error" }, `no page ${path}`)];
    main.replaceChildren(...content.filter((c) => c !== null && c !== undefined));
    drawPlots(await api("/api/history"));
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    if (e.message !== "signed out") {
      main.replaceChildren(el("p", { class: "error", id: "refused" }, e.message));
    }
  }
}

for (const a of document.querySelectorAll("nav a")) {
  if (a.dataset.page === page) a.classList.add("active");
}
refresh();
setInterval(refresh, REFRESH_MS);
