// The report of `bmas plan --html`: reads the JSON embedded in the page (#report) and draws it
// as tables and uPlot plots, all inside this one file (its CSP forbids any fetch). Text from
// the report goes in as text (textContent), never as HTML: cohort names and the scenario's
// path come from files anyone may have written. A section the report has as null (a jobs-only
// run has no inference and no cost) becomes a short note; a section that fails to draw says
// so in place and on the console, and the others still draw.
"use strict";

const COLORS = { inference: "#1f9d6b", training: "#2f6fdf", idle: "#c3cad3", other: "#9aa3ad",
                 missed: "#c0392b", slo: "#c58b14" };
const DASH = "—";
const plots = {};  // id -> uPlot, kept on window.bmasPlan for tests and curious readers

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

// A two-column table of figures, as wide as its contents.
function kv(head, rows) {
  const t = table(["", head], rows);
  t.className = "kv";
  return t;
}

const note = (text) => el("p", { class: "note" }, text);
const isNum = (v) => typeof v === "number" && Number.isFinite(v);
const list = (v) => (Array.isArray(v) ? v : []);
const obj = (v) => (v && typeof v === "object" && !Array.isArray(v) ? v : null);

// Fixed locale and digits: the same report reads the same on every machine.
function fixed(v, digits = 0) {
  return isNum(v) ? v.toLocaleString("en-US", { minimumFractionDigits: digits,
                                                maximumFractionDigits: digits }) : DASH;
}
const pct = (v) => (isNum(v) ? `${(v * 100).toFixed(1)}%` : DASH);
function secs(v) {
  if (!isNum(v)) return DASH;
  const a = Math.abs(v);
  if (a === 0) return "0 s";
  if (a < 1) return `${Math.round(v * 1000)} ms`;
  if (a < 120) return `${v.toFixed(a < 10 ? 2 : 1)} s`;
  if (a < 7200) return `${(v / 60).toFixed(1)} min`;
  if (a < 172800) return `${(v / 3600).toFixed(1)} h`;
  return `${(v / 86400).toFixed(1)} d`;
}
// An axis tick: three significant digits at most, no trailing zeros ("1 s", "16.7 min"); a log
// axis passes null for the ticks it leaves unlabelled.
function tick(v) {
  if (!isNum(v)) return "";
  const a = Math.abs(v);
  const short = (x, unit) => `${Number(x.toPrecision(3))} ${unit}`;
  if (a === 0) return "0";
  if (a < 1) return short(v * 1000, "ms");
  if (a < 120) return short(v, "s");
  if (a < 7200) return short(v / 60, "min");
  if (a < 172800) return short(v / 3600, "h");
  return short(v / 86400, "d");
}
function money(v, currency) {
  if (!isNum(v)) return DASH;
  try {
    const digits = Math.abs(v) < 10 ? 2 : 0;  // cents only where they matter
    return v.toLocaleString("en-US", { style: "currency", currency: currency || "USD",
                                       minimumFractionDigits: digits, maximumFractionDigits: digits });
  } catch {
    return `${fixed(v, 2)} ${currency}`;  // not an ISO 4217 code: the number and the word
  }
}

const STATS_HEAD = ["", "count", "mean", "p50", "p95", "p99"];
const statsRow = (label, s) => [label, fixed(stat(s, "count")),
  ...times(s, "mean", "p50", "p95", "p99")];
const stat = (s, key) => (obj(s) ? s[key] : null);
const times = (s, ...keys) => keys.map((k) => secs(stat(s, k)));  // ("p50", "p95") -> cells

function section(id, title, build) {
  let body;
  try {
    body = build();
  } catch (e) {
    console.error(`plan report, ${id}: ${e.message}`);
    body = [el("p", { class: "error" }, `This section could not be drawn: ${e.message}`)];
  }
  return el("section", { id }, el("h2", {}, title), body);
}

// ---- tables --------------------------------------------------------------------------------

function header(r) {
  const s = obj(r.scenario);
  const facts = [];
  if (s) {
    if (s.source) facts.push(String(s.source));
    if (isNum(s.users)) facts.push(`${fixed(s.users)} users`);
    if (isNum(s.gpus)) facts.push(`${fixed(s.gpus)} GPUs${isNum(s.nodes) ? ` on ${s.nodes} nodes` : ""}`);
    if (isNum(s.days)) facts.push(`${s.days} days simulated`);
    if (isNum(s.seed)) facts.push(`seed ${s.seed}`);
    if (list(s.cohorts).length) facts.push(`cohorts: ${list(s.cohorts).join(", ")}`);
  } else {
    facts.push("a job trace on a cluster (no scenario: no inference, no cost)");
  }
  document.title = s && s.source ? `bmas plan: ${s.source}` : "bmas plan: jobs";
  const slo = obj(r.slo);
  return [
    el("h1", {}, "bmas plan"),
    el("p", { class: "muted", id: "scenario" }, facts.join(" · ")),
    el("p", { id: "verdict", class: "verdict" },
      r.verdict ? String(r.verdict) : "No verdict in this report."),
    slo && el("p", { class: "muted", id: "slo" },
      `SLOs: TTFT p95 ≤ ${secs(slo.ttft_p95_s)}, p99 ≤ ${secs(slo.ttft_p99_s)}; job wait p95 ≤ ` +
      `${secs(slo.job_wait_p95_s)}; met in at least ${pct(slo.hours_met_fraction)} of the hours.`),
  ];
}

function gpusSection(g) {
  if (!obj(g)) return [note("No GPU figures in this report.")];
  return [
    el("p", {}, `${fixed(g.total)} GPUs; the share of their time over the simulation:`),
    kv("fraction", [["allocated", pct(g.allocated_fraction)],
      ["to inference", pct(g.inference_fraction)], ["to training jobs", pct(g.training_fraction)],
      ["busy (computing)", pct(g.busy_fraction)]]),
  ];
}

function jobsSection(j) {
  if (!obj(j)) return [note("No jobs in this report.")];
  const out = [
    el("p", {}, `${fixed(j.count)} jobs: ${fixed(j.started)} ran, ${fixed(j.cannot_run)} could ` +
      `not run on this cluster, ${fixed(j.requeues)} requeued by preemption; all done in ` +
      `${secs(j.makespan_s)}.`),
    table(STATS_HEAD, [statsRow("wait", j.wait_s), statsRow("completion", j.completion_s)]),
  ];
  const byGpus = list(j.by_gpus).filter(obj);
  if (byGpus.length) {
    out.push(el("h3", {}, "By GPUs per job"), table(
      ["GPUs", "jobs", "wait p50", "wait p95", "wait p99", "completion p50", "completion p95"],
      byGpus.map((b) => [fixed(b.gpus), fixed(stat(b.wait_s, "count")),
        ...times(b.wait_s, "p50", "p95", "p99"), ...times(b.completion_s, "p50", "p95")])));
  }
  const byCohort = list(j.by_cohort).filter(obj);
  if (byCohort.length) {
    out.push(el("h3", {}, "By cohort"), table(
      ["cohort", "jobs", "wait p50", "wait p95", "wait p99", "completion p95", "GPU-hours"],
      byCohort.map((c) => [String(c.cohort ?? DASH), fixed(stat(c.wait_s, "count")),
        ...times(c.wait_s, "p50", "p95", "p99"), ...times(c.completion_s, "p95"),
        fixed(c.gpu_hours, 1)])));
  }
  return out;
}

function inferenceSection(inf, slo) {
  if (!obj(inf)) return [note("No inference in this report (a jobs-only run): no TTFT or ITL.")];
  const target = obj(slo) ? ` (target ${pct(slo.hours_met_fraction)})` : "";
  const out = [
    el("p", {}, `${fixed(inf.requests)} requests: ${fixed(inf.completed)} completed, ` +
      `${fixed(inf.failed)} failed; ${fixed(inf.tokens_served)} tokens served; at most ` +
      `${fixed(inf.replicas_max)} replicas, ${fixed(inf.gpu_hours, 1)} GPU-hours; ` +
      `${fixed(inf.preemptions)} preemptions, ${fixed(inf.resumed_streams)} streams resumed.`),
    el("p", { id: "slo-hours" }, `SLOs met in ${pct(inf.slo_hours_met_fraction)} of the ` +
      `${fixed(inf.hours_with_load)} hours with load${target}.`),
    table(STATS_HEAD, [statsRow("time to first token", inf.ttft_s),
      statsRow("inter-token latency", inf.itl_s), statsRow("end to end", inf.e2e_s)]),
  ];
  const byCohort = list(inf.by_cohort).filter(obj);
  if (byCohort.length) {
    out.push(el("h3", {}, "By cohort"), table(
      ["cohort", "requests", "TTFT p50", "TTFT p95", "TTFT p99", "ITL p95", "e2e p95"],
      byCohort.map((c) => [String(c.cohort ?? DASH), fixed(c.requests),
        ...times(c.ttft_s, "p50", "p95", "p99"), ...times(c.itl_s, "p95"),
        ...times(c.e2e_s, "p95")])));
  }
  return out;
}

function costSection(c) {
  if (!obj(c)) return [note("No cost in this report (a jobs-only run has no prices).")];
  const m = (v) => money(v, c.currency);
  return [kv(c.currency ? String(c.currency) : "", [
    ["this cluster, per month", m(c.cluster_per_month)],
    ["this cluster, per GPU-hour", m(c.per_gpu_hour)],
    ["this cluster, per user-month", m(c.per_user_month)],
    ["cloud on demand, per user-month", m(c.cloud_on_demand_per_user_month)],
    ["cloud reserved, per user-month", m(c.cloud_reserved_per_user_month)],
    ["one GPU per user, per user-month", m(c.gpu_per_user_per_user_month)]])];
}

function sweepSection(sw, currency) {
  const rows = list(sw.results).filter(obj);
  const key = String(sw.key ?? "value");
  const best = sw.smallest_meeting;
  return [
    el("p", {}, isNum(best) ? `The smallest ${key} that meets the SLOs: ${fixed(best)}.`
                            : `None of these values of ${key} meets the SLOs.`),
    table([key, "SLOs met", "hours met", "job wait p95", "TTFT p99", "per user-month"],
      rows.map((x) => [fixed(x.value), x.met === true ? "yes" : x.met === false ? "no" : DASH,
        pct(x.slo_hours_met_fraction), secs(x.job_wait_p95_s), secs(x.ttft_p99_s),
        money(x.per_user_month, currency)]),
      (i) => (isNum(best) && rows[i].value === best ? "best" : null)),
  ];
}

function simSection(s) {
  if (!obj(s)) return [note("No simulation figures in this report.")];
  return [kv("", [["wall time", secs(s.wall_s)], ["simulated time", secs(s.simulated_s)],
    ["events", fixed(s.events)],
    ["simulated seconds per wall second", fixed(s.simulated_s_per_wall_s)],
    ["events per second", fixed(s.events_per_s)]])];
}

// ---- plots ---------------------------------------------------------------------------------

const PLOT_HEIGHT = 240;
const pctAxis = { label: "fraction",
                  values: (u, splits) => splits.map((v) => (isNum(v) ? `${Math.round(v * 100)}%` : "")) };
const plotBox = (id, title) => el("div", { class: "plot" }, el("h3", {}, title), el("div", { id }));
// A legend's value: `values[i]` formatted, where uPlot gives the point's index i (null when the
// cursor is off the plot). For series whose drawn value is not the one to read (sums, stand-ins).
const legendAt = (values, fmt) => (u, v, si, i) => (isNum(i) ? fmt(values[i]) : DASH);

// A draw hook: a dashed vertical line at x = v (an SLO's threshold), when on the scale.
function verticalLine(v, color) {
  return (u) => {
    if (!isNum(v) || v < u.scales.x.min || v > u.scales.x.max) return;
    const x = u.valToPos(v, "x", true);
    const { ctx } = u;
    ctx.save();
    ctx.strokeStyle = color;
    ctx.lineWidth = 2 * devicePixelRatio;
    ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
    ctx.beginPath();
    ctx.moveTo(x, u.bbox.top);
    ctx.lineTo(x, u.bbox.top + u.bbox.height);
    ctx.stroke();
    ctx.restore();
  };
}

function draw(id, build) {
  const target = document.getElementById(id);
  try {
    const made = build();
    if (typeof made === "string") {
      target.replaceChildren(note(made));
      return;
    }
    const [opts, data, caption] = made;
    const width = Math.max(320, target.clientWidth || 480);
    plots[id] = new uPlot({ width, height: PLOT_HEIGHT, ...opts }, data, target);
    if (caption) target.after(el("p", { class: "muted caption" }, caption));
  } catch (e) {
    console.error(`plan report, ${id}: ${e.message}`);
    target.replaceChildren(el("p", { class: "error" },
      `This plot could not be drawn: ${e.message}`));
  }
}

// uPlot does not stack: each series holds the sum of the paths below it, and a band fills the
// space between one and the next, so the top line is the cluster's GPUs. The legend shows the
// path's own GPUs, not the sum.
function timelinePlot(r) {
  const t = list(r.timeline).filter(obj);
  if (t.length === 0) return "No timeline in this report.";
  const paths = ["inference", "training", "idle"];
  const x = t.map((e, i) => (isNum(e.hour) ? e.hour : i));
  const own = paths.map((p) => t.map((e) => (isNum(e[p]) ? e[p] : 0)));
  let sum = x.map(() => 0);
  const stacked = own.map((col) => (sum = sum.map((s, i) => s + col[i])));
  const missed = t.map((e, i) => (e.slo_met === false ? x[i] : null)).filter((v) => v !== null);
  const redTicks = (u) => {
    const { ctx } = u;
    ctx.save();
    ctx.fillStyle = COLORS.missed;
    for (const h of missed) {
      const x0 = u.valToPos(h, "x", true);
      const w = Math.max(2, u.valToPos(h + 1, "x", true) - x0);
      ctx.fillRect(x0, u.bbox.top, w, 6 * devicePixelRatio);
    }
    ctx.restore();
  };
  const hourLabel = (h) => (h % 24 === 0 ? `day ${h / 24 + 1}` : `${h % 24}:00`);
  return [{
    scales: { x: { time: false }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
    series: [
      { label: "hour", value: (u, v) => (isNum(v) ? `day ${Math.floor(v / 24) + 1}, ${v % 24}:00` : DASH) },
      ...paths.map((p, k) => ({ label: p, stroke: COLORS[p], fill: COLORS[p], width: 1,
        points: { show: false }, value: legendAt(own[k], (v) => fixed(v, 1)) }))],
    bands: [{ series: [2, 1] }, { series: [3, 2] }],
    axes: [{ label: "hour of the simulation", incrs: [1, 2, 3, 6, 12, 24, 48, 72, 168],
             values: (u, splits) => splits.map(hourLabel) }, { label: "GPUs" }],
    hooks: { draw: [redTicks] },
  }, [x, ...stacked], missed.length ? "Red ticks on top: hours that missed the SLOs." : null];
}

// A CDF as steps. Values spanning two decades or more get a log x axis; a log axis has no 0,
// so zeros (jobs that started at once) are drawn one decade below the smallest value and the
// caption says so.
function cdfPlot(points, { label, color, slo }) {
  const pts = list(points).filter((p) => Array.isArray(p) && isNum(p[0]) && isNum(p[1]));
  if (pts.length === 0) return "No samples.";
  pts.sort((a, b) => a[0] - b[0]);
  const raw = pts.map((p) => p[0]);
  const positive = raw.filter((v) => v > 0);
  const max = Math.max(...raw);
  const log = positive.length > 0 && max / Math.min(...positive) >= 100;
  let x = raw;
  let zeroAt = null;
  if (log) {
    zeroAt = 10 ** (Math.ceil(Math.log10(Math.min(...positive))) - 1);
    x = raw.map((v) => (v > 0 ? v : zeroAt));
  }
  const opts = {
    scales: { x: log ? { time: false, distr: 3, log: 10 } : { time: false },
              y: { range: [0, 1] } },
    series: [{ label, value: legendAt(raw, secs) },
      { label: "fraction at or below", stroke: color, width: 2, points: { show: false },
        paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => (isNum(v) ? pct(v) : DASH) }],
    axes: [{ label: `${label}${log ? " (log scale)" : ""}`, values: (u, splits) => splits.map(tick) },
      pctAxis],
    hooks: { draw: [verticalLine(slo, COLORS.slo)] },
  };
  const caption = [isNum(slo) ? `Dashed: the SLO's p95, ${secs(slo)}.` : null,
    zeroAt !== null && raw.some((v) => v <= 0) ? `Zeros are drawn at ${tick(zeroAt)}.` : null]
    .filter(Boolean).join(" ");
  return [opts, [x, pts.map((p) => p[1])], caption];
}

// Cost per user-month as bars: this cluster in its own series (and colour) beside the others.
function costPlot(c) {
  if (!obj(c)) return "No cost in this report (a jobs-only run has no prices).";
  const labels = ["this cluster", "cloud on demand", "cloud reserved", "one GPU per user"];
  const vals = [c.per_user_month, c.cloud_on_demand_per_user_month, c.cloud_reserved_per_user_month,
    c.gpu_per_user_per_user_month].map((v) => (isNum(v) ? v : null));
  if (vals.every((v) => v === null)) return "No cost figures in this report.";
  const bars = uPlot.paths.bars({ size: [0.6, 120] });
  const barSeries = (label, color) => ({ label, fill: color, stroke: color, paths: bars,
    points: { show: false }, value: (u, v) => money(v, c.currency) });
  const valueLabels = (u) => {
    const { ctx } = u;
    ctx.save();
    ctx.fillStyle = "#1d232b";
    ctx.textAlign = "center";
    ctx.font = `${12 * devicePixelRatio}px system-ui, sans-serif`;
    vals.forEach((v, i) => {
      if (v === null) return;
      ctx.fillText(money(v, c.currency), u.valToPos(i, "x", true),
        u.valToPos(v, "y", true) - 4 * devicePixelRatio);
    });
    ctx.restore();
  };
  return [{
    scales: { x: { time: false, range: [-0.5, labels.length - 0.5] },
              y: { range: (u, min, max) => [0, Math.max(1, max) * 1.15] } },
    series: [{ label: "option", value: (u, v) => (isNum(v) ? labels[v] : DASH) },
      barSeries("this cluster", COLORS.training), barSeries("alternatives", COLORS.other)],
    axes: [{ splits: () => labels.map((_, i) => i), grid: { show: false },
             values: (u, splits) => splits.map((i) => labels[i] ?? "") },
      { label: `${c.currency ? String(c.currency) : ""} per user-month`, size: 60 }],
    hooks: { draw: [valueLabels] },
  }, [labels.map((_, i) => i), vals.map((v, i) => (i === 0 ? v : null)),
      vals.map((v, i) => (i === 0 ? null : v))]];
}

// ---- the page ------------------------------------------------------------------------------

function render() {
  const page = document.getElementById("page");
  let r;
  try {
    r = JSON.parse(document.getElementById("report").textContent);
  } catch (e) {
    console.error(`plan report: the embedded report is not JSON: ${e.message}`);
    page.replaceChildren(el("p", { class: "error" },
      `The embedded report is not JSON: ${e.message}`));
    return;
  }
  r = obj(r) || {};
  const inf = obj(r.inference);
  const cdf = obj(r.cdf) || {};
  const slo = obj(r.slo) || {};
  const parts = [
    ...header(r),
    el("div", { id: "plots" },
      plotBox("plot-timeline", "GPUs by path, hour by hour"),
      plotBox("plot-ttft-cdf", "Time to first token (CDF)"),
      plotBox("plot-wait-cdf", "Job wait (CDF)"),
      plotBox("plot-cost", "Cost per user-month")),
    section("gpus", "GPUs", () => gpusSection(r.gpus)),
    section("jobs", "Jobs", () => jobsSection(r.jobs)),
    section("inference", "Inference", () => inferenceSection(r.inference, r.slo)),
    section("cost", "Cost", () => costSection(r.cost)),
    obj(r.sweep) ? section("sweep", `Sweep over ${r.sweep.key ?? "a setting"}`,
      () => sweepSection(r.sweep, obj(r.cost) ? r.cost.currency : "USD")) : null,
    section("sim", "Simulation", () => simSection(r.sim))];
  page.replaceChildren(...parts.filter(Boolean));  // replaceChildren would print a null
  // Drawn once the boxes are in the page: uPlot sizes itself from them.
  draw("plot-timeline", () => timelinePlot(r));
  draw("plot-ttft-cdf", () => (inf
    ? cdfPlot(cdf.ttft_s, { label: "TTFT", color: COLORS.inference, slo: slo.ttft_p95_s })
    : "No inference in this report (a jobs-only run)."));
  draw("plot-wait-cdf", () => cdfPlot(cdf.wait_s,
    { label: "wait", color: COLORS.training, slo: slo.job_wait_p95_s }));
  draw("plot-cost", () => costPlot(r.cost));
  window.bmasPlan = { report: r, plots };
}

window.addEventListener("resize", () => {
  for (const [id, u] of Object.entries(plots)) {
    const width = Math.max(320, document.getElementById(id).clientWidth);
    u.setSize({ width, height: PLOT_HEIGHT });
  }
});
render();
