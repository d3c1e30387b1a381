// The lambdaline dashboard: booth traffic with the horizon, alerts, status and SQL,
// kept live by GET /v1/stream. No library and nothing from another host: it ships with
// the API. The key is asked once and kept in this tab's sessionStorage; it travels
// only in the X-API-Key header (the stream is read with fetch, since EventSource
// cannot send a header), never in a URL.
"use strict";

const KEY_STORE = "lambdaline.key";
const HOUR = 3600e3;
const state = {
  key: sessionStorage.getItem(KEY_STORE),
  booth: "",
  from: null, to: null,
  rows: new Map(),      // booth_stats rows shown, by booth|window_start
  alerts: new Map(),    // expired_registrations rows, by plate|entry_time
  horizon: null, watermark: null, finalBefore: {}, finalColumn: {},
  lastEventId: null, stream: null, drawQueued: false,
};
const $ = (id) => document.getElementById(id);

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options, headers: { "X-API-Key": state.key, ...(options.headers || {}) },
  });
  if (response.status === 401) { forgetKey("the API refused the key"); throw new Error("401"); }
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || response.statusText);
  return body;
}

function forgetKey(why) {
  sessionStorage.removeItem(KEY_STORE);
  state.key = null;
  if (state.stream) state.stream.abort();
  $("board").hidden = true; $("key-form").hidden = false; $("key-error").textContent = why;
}

const iso = (ms) => new Date(ms).toISOString();
const shown = (text) => text ? text.replace("T", " ").replace(".000Z", "Z") : "–";

async function loadStatus() {
  const status = await api("/v1/status");
  state.horizon = status.horizon; state.watermark = status.speed_watermark;
  $("generation").textContent = describeGenerations(status);
  $("batch-version").textContent = status.batch_version ?? "none published";
  $("horizon").textContent = shown(status.horizon);
  $("watermark").textContent = shown(status.speed_watermark);
  $("lag").textContent = status.speed_lag_records ?? "–";
  $("consumer").textContent = status.errors.length ? status.errors.join("; ")
    : status.speed_caught_up ? "following, caught up" : "catching up";
  const versions = await api("/v1/versions");
  const current = versions.versions.find((v) => v.current);
  $("corrections").textContent = describeCorrections(current);
}

// the served generation's view settings, and any other one catching up beside it
function describeGenerations(status) {
  const settings = (g) => Object.entries(g.view_settings)
    .filter(([name]) => ["window", "session_gap", "max_trip"].includes(name))
    .map(([name, value]) => `${name}=${value}`).join(", ");
  return status.generations.map((g) => g.served ? `${g.generation} (${settings(g)})`
    : `; ${g.generation} beside it (${settings(g)}): ${g.ready ? "ready"
      : (g.waiting_for[0] || "materialising")}`).join("");
}

function describeCorrections(version) {
  if (!version || !version.corrections) return "nothing compared yet";
  const views = Object.entries(version.corrections.views || {});
  const equal = views.reduce((sum, [, c]) => sum + c.equal, 0);
  const changed = views.filter(([, c]) => c.corrected + c.only_in_batch + c.only_in_speed > 0)
    .map(([view, c]) => `${view}: ${c.corrected} corrected, ${c.only_in_batch} only in batch, `
      + `${c.only_in_speed} only in speed`);
  const late = Object.values(version.corrections.late_rows_since_previous || {})
    .reduce((a, b) => a + b, 0);
  return `v${version.version}: ${changed.join("; ") || "no speed row corrected"}; `
    + `${equal} rows equal; ${late} late rows dropped by the speed layer`;
}

function chooseRange() {
  const marks = [state.horizon, state.watermark].filter(Boolean).map((t) => Date.parse(t));
  const end = (marks.length ? Math.max(...marks) : Date.now()) + 2 * HOUR;
  state.to = Math.ceil(end / HOUR) * HOUR;
  state.from = state.to - 26 * HOUR;
}

async function loadRows() {
  chooseRange();
  const range = `from=${iso(state.from)}&to=${iso(state.to)}&limit=100000`;
  const path = state.booth ? `/v1/booths/${encodeURIComponent(state.booth)}/stats?${range}`
    : `/v1/stats?${range}`;
  const [stats, alerts] = await Promise.all([
    api(path).catch((error) => (error.message === "booth not found" ? { rows: [] } : Promise.reject(error))),
    api(`/v1/alerts/expired-registrations?${range.replace("100000", "200")}`),
  ]);
  state.rows = new Map(stats.rows.map((row) => [`${row.booth_id}|${row.window_start}`, row]));
  state.alerts = new Map(alerts.rows.map((row) => [`${row.license_plate}|${row.entry_time}`, row]));
  draw(); drawAlerts();
}

async function loadBooths() {
  const answer = await api("/v1/sql", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ query: "SELECT DISTINCT booth_id FROM booth_stats ORDER BY 1" }) });
  const select = $("booth");
  for (const [booth] of answer.rows) addBooth(select, booth);
}

function addBooth(select, booth) {
  if ([...select.options].some((o) => o.value === booth)) return;
  const option = document.createElement("option");
  option.value = option.textContent = booth;
  select.append(option);
}

function kindOf(row) {
  return row.source === "batch" ? "batch" : row.final ? "final" : "provisional";
}

function queueDraw() {
  if (state.drawQueued) return;
  state.drawQueued = true;
  requestAnimationFrame(() => { state.drawQueued = false; draw(); });
}

function draw() {
  const svg = $("chart");
  const width = 960, height = 260, left = 36, bottom = 22;
  const windows = new Map();   // window_start ms -> {batch, final, provisional}
  for (const row of state.rows.values()) {
    const at = Date.parse(row.window_start);
    if (at < state.from || at >= state.to) continue;
    const bar = windows.get(at) || { batch: 0, final: 0, provisional: 0 };
    bar[kindOf(row)] += row.vehicle_count;
    windows.set(at, bar);
  }
  const top = Math.max(1, ...[...windows.values()].map((b) => b.batch + b.final + b.provisional));
  const x = (ms) => left + ((ms - state.from) / (state.to - state.from)) * (width - left - 4);
  const y = (n) => (height - bottom) * (1 - n / top);
  const barWidth = Math.max(1, x(state.from + 5 * 60e3) - x(state.from) - 0.5);
  const parts = [];
  for (const [at, bar] of windows) {
    let base = 0;
    for (const kind of ["batch", "final", "provisional"]) {
      if (!bar[kind]) continue;
      parts.push(`<rect class="${kind}" x="${x(at).toFixed(1)}" y="${y(base + bar[kind]).toFixed(1)}"`
        + ` width="${barWidth.toFixed(1)}" height="${(y(base) - y(base + bar[kind])).toFixed(1)}"/>`);
      base += bar[kind];
    }
  }
  for (let t = state.from; t <= state.to; t += 4 * HOUR) {
    parts.push(`<text x="${x(t)}" y="${height - 6}">${iso(t).slice(5, 16).replace("T", " ")}</text>`);
  }
  parts.push(`<text x="2" y="12">${top}</text><text x="2" y="${height - bottom}">0</text>`);
  if (state.horizon) {
    const h = x(Date.parse(state.horizon));
    parts.push(`<line class="horizon" x1="${h}" x2="${h}" y1="0" y2="${height - bottom}"/>`
      + `<text x="${h + 4}" y="24">horizon</text>`);
  }
  svg.innerHTML = parts.join("");
  const counts = { batch: 0, final: 0, provisional: 0 };
  for (const row of state.rows.values()) counts[kindOf(row)] += 1;
  $("chart-note").textContent = `${state.booth || "all booths"}, ${shown(iso(state.from))} to `
    + `${shown(iso(state.to))}: ${counts.batch} batch, ${counts.final} speed final, `
    + `${counts.provisional} speed provisional rows`;
}

function drawAlerts() {
  const list = $("alert-list");
  const newest = [...state.alerts.values()].sort((a, b) => b.entry_time.localeCompare(a.entry_time));
  list.replaceChildren(...newest.slice(0, 50).map((row) => {
    const item = document.createElement("li");
    item.textContent = `${shown(row.entry_time)} · ${row.license_plate} at ${row.booth_id} `
      + `(registration ${row.registration_id}) · ${row.source}${row.final ? "" : ", provisional"}`;
    if (row.fresh) item.className = "fresh";
    return item;
  }));
}

function onRow(data) {
  const row = data.row;
  if (data.view === "booth_stats") {
    addBooth($("booth"), row.booth_id);
    if (state.booth && row.booth_id !== state.booth) return;
    state.rows.set(`${row.booth_id}|${row.window_start}`, row);
    queueDraw();
  } else if (data.view === "expired_registrations") {
    const key = `${row.license_plate}|${row.entry_time}`;
    if (data.shown) state.alerts.set(key, { ...row, fresh: true });
    else state.alerts.delete(key);
    drawAlerts();
  }
}

function onWatermark(data) {
  state.watermark = data.speed_watermark;
  state.finalBefore = data.final_before; state.finalColumn = data.final_column;
  $("watermark").textContent = shown(data.speed_watermark);
  const cut = data.final_before.booth_stats, column = data.final_column.booth_stats;
  if (cut) for (const row of state.rows.values()) {
    if (row.source === "speed" && !row.final && row[column] <= cut) row.final = true;
  }
  queueDraw();
}

const handlers = {
  row: onRow,
  watermark: onWatermark,
  horizon: (data) => {
    const moved = data.horizon !== state.horizon;
    state.horizon = data.horizon;
    if (moved) loadStatus().then(loadRows).catch(showError);
  },
  heartbeat: (data) => {
    $("lag").textContent = data.speed_lag_records ?? "–";
    $("consumer").textContent = data.speed_error ? data.speed_error
      : data.speed_caught_up ? "following, caught up" : "catching up";
  },
  generation: (data) => {
    if (state.generation !== undefined && state.generation !== data.generation) {
      $("chart-note").textContent = `now serving generation ${data.generation}`;
    }
    state.generation = data.generation;
  },
  reset: () => { state.lastEventId = null; loadStatus().then(loadRows).catch(showError); },
};

async function follow() {
  while (state.key) {
    const controller = new AbortController();
    state.stream = controller;
    try {
      const headers = { "X-API-Key": state.key };
      if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
      const response = await fetch("/v1/stream?views=booth_stats,expired_registrations",
        { headers, signal: controller.signal });
      if (response.status === 401) { forgetKey("the API refused the key"); return; }
      if (!response.ok) throw new Error(`stream: ${response.status}`);
      setLive(true);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let pending = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        pending += value;
        let end;
        while ((end = pending.indexOf("\n\n")) >= 0) {
          dispatch(pending.slice(0, end));
          pending = pending.slice(end + 2);
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    setLive(false);
    await new Promise((resolve) => setTimeout(resolve, 2000));   // then resume from lastEventId
  }
}

function dispatch(text) {
  let kind = "message", data = "", id = null;
  for (const line of text.split("\n")) {
    const at = line.indexOf(": ");
    const name = at < 0 ? line.replace(":", "") : line.slice(0, at);
    const value = at < 0 ? "" : line.slice(at + 2);
    if (name === "event") kind = value;
    else if (name === "data") data += value;
    else if (name === "id") id = value;
  }
  if (id !== null) state.lastEventId = id || null;   // an empty id: start afresh next time
  if (handlers[kind] && data) handlers[kind](JSON.parse(data));
}

function setLive(on) {
  const badge = $("live");
  badge.textContent = on ? "live" : "reconnecting";
  badge.className = on ? "badge" : "badge off";
}

function showError(error) { $("chart-note").textContent = `error: ${error.message}`; }

async function runSql() {
  $("sql-error").textContent = "";
  try {
    const answer = await api("/v1/sql", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ query: $("sql").value }) });
    const table = document.createElement("table");
    const head = table.createTHead().insertRow();
    for (const column of answer.columns) head.insertCell().outerHTML = `<th>${escapeHtml(column.name)}</th>`;
    const body = table.createTBody();
    for (const row of answer.rows) {
      const line = body.insertRow();
      for (const value of row) line.insertCell().textContent = value === null ? "null" : String(value);
    }
    $("sql-result").replaceChildren(table);
    if (answer.truncated) $("sql-error").textContent = "truncated at the row limit";
  } catch (error) {
    $("sql-error").textContent = error.message;
  }
}

const escapeHtml = (text) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

async function start() {
  $("key-form").hidden = true; $("board").hidden = false;
  try {
    await loadStatus();
    await loadRows();
    await loadBooths();
  } catch (error) {
    if (state.key) showError(error);
    return;
  }
  follow();
}

document.addEventListener("DOMContentLoaded", () => {
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.key = $("key").value;
    $("key").value = "";
    sessionStorage.setItem(KEY_STORE, state.key);
    start();
  });
  $("booth").addEventListener("change", (event) => {
    state.booth = event.target.value;
    loadRows().catch(showError);
  });
  $("run-sql").addEventListener("click", runSql);
  if (state.key) start();
});
