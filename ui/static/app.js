// The coordinator's operator console: plain JavaScript, no dependency. Every page reads the
// API of the coordinator that serves it (same origin) and follows its event streams, read
// with fetch so that the token travels in the Authorization header, never in a URL. The
// token is kept in sessionStorage: for this tab only, gone when it closes.

const TOKEN_KEY = "twophase.console.token";
let token = sessionStorage.getItem(TOKEN_KEY) || "";

// ---- DOM helpers: text is always set as text, never parsed as HTML.

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "href") el.setAttribute("href", v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

const statusBadge = (st) => h("span", { class: `status ${st}` }, st);
const jobHref = (job) => `#/jobs/${encodeURIComponent(job)}`;
const cpHref = (job, id) => `#/jobs/${encodeURIComponent(job)}/checkpoints/${id}`;

function fmtMs(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  if (ms < 86400000) return `${Math.floor(ms / 3600000)} h ${Math.round((ms % 3600000) / 60000)} min`;
  return `${Math.floor(ms / 86400000)} d ${Math.round((ms % 86400000) / 3600000)} h`;
}
const since = (t) => (t ? Date.now() - Date.parse(t) : null);
const between = (a, b) => (a && b ? Date.parse(b) - Date.parse(a) : null);
const fmtTime = (t) => (t ? new Date(t).toLocaleString() : "–");

// ---- The API.

class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

let tokenAsked = null;
// askToken shows the token form and resolves once a token was entered.
function askToken(why) {
  if (tokenAsked) return tokenAsked;
  const dialog = document.getElementById("token-dialog");
  const form = document.getElementById("token-form");
  const input = document.getElementById("token-input");
  document.getElementById("token-why").textContent = why || "";
  input.value = "";
  tokenAsked = new Promise((resolve) => {
    form.onsubmit = (e) => {
      e.preventDefault();
      token = input.value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      dialog.close();
      tokenAsked = null;
      resolve();
    };
  });
  dialog.addEventListener("cancel", (e) => e.preventDefault(), { once: true });
  if (!dialog.open) dialog.showModal();
  input.focus();
  return tokenAsked;
}

async function api(path, { method = "GET", body, signal } = {}) {
  for (;;) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const resp = await fetch(path, { method, headers, signal, cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (resp.status === 401) {
      await askToken(token ? "That token was refused: " + ((data && data.detail) || "unauthenticated") : "");
      continue;
    }
    if (!resp.ok) throw new ApiError(resp.status, data);
    return data;
  }
}

// listAll follows next_cursor, up to max items.
async function listAll(path, signal, max = 100000) {
  const items = [];
  let url = path;
  for (;;) {
    const page = await api(url, { signal });
    items.push(...page.items);
    if (!page.next_cursor || items.length >= max) return items;
    url = path + (path.includes("?") ? "&" : "?") + "cursor=" + encodeURIComponent(page.next_cursor);
  }
}

// ---- Event streams, read with fetch (EventSource cannot send a token).

const liveEl = () => document.getElementById("live");
function setLive(on, text) {
  const el = liveEl();
  el.className = "live " + (on ? "on" : "off");
  el.textContent = text || (on ? "live" : "reconnecting…");
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal && signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
});

async function follow(path, onEvent, signal) {
  let lastId = null;
  let delay = 1000;
  while (!signal.aborted) {
    try {
      const headers = { Accept: "text/event-stream" };
      if (token) headers.Authorization = `Bearer ${token}`;
      if (lastId) headers["Last-Event-ID"] = lastId;
      const resp = await fetch(path, { headers, signal, cache: "no-store" });
      if (resp.status === 401) { await askToken("The token was refused."); continue; }
      if (!resp.ok) {
        const p = await resp.json().catch(() => null);
        setLive(false, `not live: ${(p && p.detail) || resp.status}`);
        if (resp.status === 403 || resp.status === 404) return;
        throw new Error(String(resp.status));
      }
      setLive(true);
      delay = 1000;
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      let ev = { event: "message", data: [], id: null };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          let line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line.endsWith("\r")) line = line.slice(0, -1);
          if (line === "") {
            if (ev.id !== null) lastId = ev.id;
            if (ev.data.length) onEvent(ev.event, ev.data.join("\n"));
            ev = { event: "message", data: [], id: null };
            continue;
          }
          if (line.startsWith(":")) continue;
          const c = line.indexOf(":");
          const field = c < 0 ? line : line.slice(0, c);
          let v = c < 0 ? "" : line.slice(c + 1);
          if (v.startsWith(" ")) v = v.slice(1);
          if (field === "data") ev.data.push(v);
          else if (field === "event") ev.event = v;
          else if (field === "id") ev.id = v;
        }
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    if (signal.aborted) return;
    setLive(false);
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 15000);
  }
}

// debounce runs fn at most once per ms, after the last call.
function debounce(fn, ms) {
  let t = null;
  return () => { clearTimeout(t); t = setTimeout(fn, ms); };
}

// ---- Notices and operator actions.

function notice(text) {
  const el = document.getElementById("notice");
  el.textContent = text;
  el.hidden = !text;
  if (text) setTimeout(() => { if (el.textContent === text) el.hidden = true; }, 8000);
}

function problemText(e) {
  if (e instanceof ApiError) {
    const code = e.problem && e.problem.code ? ` (${e.problem.code})` : "";
    return `${e.message}${code}`;
  }
  return String(e && e.message ? e.message : e);
}

// canOperate tells whether the token may take operator actions: the audit is read by
// operators and admins only.
async function canOperate(job, signal) {
  try {
    await api(`/v1/audit?job=${encodeURIComponent(job)}&limit=1`, { signal });
    return true;
  } catch (e) {
    if (e instanceof ApiError && e.status === 403) return false;
    throw e;
  }
}

// confirmAction asks for a reason, then POSTs it; resolves with the checkpoint or null.
function confirmAction(what, path) {
  const dialog = document.getElementById("action-dialog");
  const form = document.getElementById("action-form");
  const reason = document.getElementById("action-reason");
  const error = document.getElementById("action-error");
  document.getElementById("action-title").textContent = what.title;
  document.getElementById("action-what").textContent = what.text;
  document.getElementById("action-confirm").textContent = what.title;
  reason.value = "";
  error.textContent = "";
  return new Promise((resolve) => {
    document.getElementById("action-cancel").onclick = () => { dialog.close(); resolve(null); };
    dialog.oncancel = () => resolve(null);
    form.onsubmit = async (e) => {
      e.preventDefault();
      if (!reason.value.trim()) { error.textContent = "A reason is required."; return; }
      try {
        const cp = await api(path, { method: "POST", body: { reason: reason.value.trim() } });
        dialog.close();
        resolve(cp);
      } catch (err) {
        error.textContent = problemText(err);
      }
    };
    dialog.showModal();
    reason.focus();
  });
}

// ---- Pages.

function setTitle(main, text) {
  document.title = `${text} · Coordinator console`;
  main.append(h("h1", {}, text));
}

function tableOf(headers, rows) {
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, headers.map(([label, cls]) => h("th", { class: cls, scope: "col" }, label)))),
    h("tbody", {}, rows)));
}

// The overview: every job, what needs attention first.
async function overviewPage(main, signal) {
  setTitle(main, "Jobs");
  const summary = h("ul", { class: "summary", "aria-label": "Summary" });
  const body = h("div");
  main.append(summary, body);
  let shown = 50;
  const committedAt = new Map(); // job -> time of its last committed checkpoint
  let jobs = [];
  let open = [];

  const load = async () => {
    [jobs, open] = await Promise.all([
      listAll("/v1/jobs?limit=1000", signal),
      listAll("/v1/checkpoints?status=preparing,committing&limit=1000", signal),
    ]);
    draw();
  };

  const draw = () => {
    const byJob = new Map();
    for (const cp of open) {
      const o = byJob.get(cp.job) || { preparing: 0, committing: 0, oldest: null };
      o[cp.status]++;
      if (!o.oldest || cp.created_at < o.oldest) o.oldest = cp.created_at;
      byJob.set(cp.job, o);
    }
    const rows = jobs.map((j) => {
      const o = byJob.get(j.name) || { preparing: 0, committing: 0, oldest: null };
      const age = since(o.oldest);
      const attention = age !== null && (age > (j.checkpoint_timeout_ms || 60000) / 2 || (o.committing > 0 && age > 60000));
      return { j, o, age, attention };
    });
    rows.sort((a, b) => (b.attention - a.attention) || ((b.age || 0) - (a.age || 0)) || a.j.name.localeCompare(b.j.name));
    summary.replaceChildren(
      h("li", {}, `${jobs.length} jobs`),
      h("li", {}, `${open.filter((c) => c.status === "preparing").length} preparing`),
      h("li", {}, `${open.filter((c) => c.status === "committing").length} committing`),
      h("li", {}, `${rows.filter((r) => r.attention).length} need attention`));
    const visible = rows.slice(0, shown);
    const tbody = visible.map(({ j, o, age, attention }) => h("tr", { class: attention ? "attention" : null, "data-job": j.name },
      h("td", {}, h("a", { href: jobHref(j.name) }, j.name), attention ? h("span", { class: "muted" }, " · needs attention") : null),
      h("td", { class: "num" }, o.preparing),
      h("td", { class: "num" }, o.committing),
      h("td", { class: "num" }, age === null ? "–" : fmtMs(age)),
      h("td", {}, j.last_committed ? h("a", { href: cpHref(j.name, j.last_committed) }, `#${j.last_committed}`) : "none",
        committedAt.has(j.name) ? h("span", { class: "muted" }, ` ${fmtMs(since(committedAt.get(j.name)))} ago`) : null),
      h("td", { class: "num hide-narrow" }, (j.participants || []).length)));
    body.replaceChildren(
      tableOf([["Job"], ["Preparing", "num"], ["Committing", "num"], ["Oldest open", "num"], ["Last committed"], ["Participants", "num hide-narrow"]], tbody),
      rows.length > shown ? h("button", { class: "more", onclick: () => { shown += 100; draw(); fillTimes(visibleJobs()); } },
        `Show more (${rows.length - shown} more)`) : null);
    fillTimes(visible.map((r) => r.j));
  };
  const visibleJobs = () => Array.from(body.querySelectorAll("tr[data-job]")).map((tr) => jobs.find((j) => j.name === tr.dataset.job)).filter(Boolean);

  // The time of each visible job's last committed checkpoint, read for the rows on screen.
  const fillTimes = async (list) => {
    const missing = list.filter((j) => j.last_committed && !committedAt.has(j.name));
    await Promise.all(missing.map(async (j) => {
      try {
        const cp = await api(`/v1/jobs/${encodeURIComponent(j.name)}/checkpoints/${j.last_committed}`, { signal });
        committedAt.set(j.name, cp.completed_at || cp.decided_at);
      } catch { /* gone or unreadable: shown without a time */ }
    }));
    if (missing.length && !signal.aborted) draw();
  };

  await load();
  const refresh = debounce(() => { committedAt.clear(); load().catch(() => {}); }, 700);
  follow("/v1/events", () => refresh(), signal);
  const tick = setInterval(() => !signal.aborted && draw(), 5000);
  signal.addEventListener("abort", () => clearInterval(tick));
}

// The chart of a job's checkpoints: time to decision and to completion, by outcome.
function historyChart(cps, job) {
  const list = cps.slice().sort((a, b) => a.id - b.id).slice(-100);
  const W = 800, H = 220, P = 36;
  const value = (cp) => Math.max(between(cp.created_at, cp.completed_at || cp.decided_at) || 0, 0);
  const max = Math.max(1, ...list.map(value), ...list.filter((c) => !c.decided_at).map((c) => since(c.created_at) || 0));
  const bw = (W - P - 8) / Math.max(list.length, 1);
  const y = (ms) => H - 20 - (ms / max) * (H - 40);
  const bars = list.map((cp, i) => {
    const x = P + i * bw;
    const decision = cp.decided_at ? between(cp.created_at, cp.decided_at) : since(cp.created_at);
    const completion = cp.completed_at ? between(cp.created_at, cp.completed_at) : null;
    const label = `#${cp.id} ${cp.status}: decision ${fmtMs(decision)}${completion !== null ? `, completion ${fmtMs(completion)}` : ""}`;
    return s("a", { href: cpHref(job, cp.id), "aria-label": label },
      s("title", {}, label),
      completion !== null ? s("rect", { class: `bar pale ${cp.status}`, x: x + 1, y: y(completion), width: Math.max(bw - 2, 1), height: H - 20 - y(completion) }) : null,
      s("rect", { class: `bar ${cp.status}`, x: x + 1, y: y(decision), width: Math.max(bw - 2, 1), height: Math.max(H - 20 - y(decision), 1) }));
  });
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `Time to decision and to completion of the last ${list.length} checkpoints` },
    s("line", { x1: P, y1: H - 20, x2: W, y2: H - 20, stroke: "#d1d9e0" }),
    s("text", { x: 2, y: 14, "font-size": 11, fill: "#59636e" }, fmtMs(max)),
    s("text", { x: 2, y: H - 22, "font-size": 11, fill: "#59636e" }, "0"),
    list.length ? s("text", { x: P, y: H - 4, "font-size": 11, fill: "#59636e" }, `#${list[0].id}`) : null,
    list.length ? s("text", { x: W - 40, y: H - 4, "font-size": 11, fill: "#59636e" }, `#${list[list.length - 1].id}`) : null,
    bars);
  const legend = h("ul", { class: "legend" },
    ["preparing", "committing", "committed", "aborted"].map((st) => h("li", {}, h("span", { class: `status ${st}` }, " "), ` ${st}`)),
    h("li", { class: "muted" }, "solid: to decision · pale: to completion"));
  return [svg, legend];
}

// A job: its chart, its checkpoints and participants, and the checkpoint selected.
async function jobPage(main, signal, job, selected) {
  setTitle(main, job);
  const j = await api(`/v1/jobs/${encodeURIComponent(job)}`, { signal });
  const cps = new Map();
  for (const cp of await listAll(`/v1/jobs/${encodeURIComponent(job)}/checkpoints?limit=100`, signal, 100)) cps.set(cp.id, cp);
  if (selected && !cps.has(selected)) {
    try { cps.set(selected, await api(`/v1/jobs/${encodeURIComponent(job)}/checkpoints/${selected}`, { signal })); } catch (e) { notice(problemText(e)); }
  }
  let participants = (await api(`/v1/jobs/${encodeURIComponent(job)}/participants`, { signal })).items;
  const operator = await canOperate(job, signal).catch(() => false);

  const facts = h("dl", { class: "facts" });
  const chart = h("section", { "aria-labelledby": "h-history" });
  const detail = h("section", { "aria-labelledby": "h-detail", id: "detail" });
  const list = h("section", { "aria-labelledby": "h-checkpoints" });
  const people = h("section", { "aria-labelledby": "h-participants" });
  main.append(facts, detail, chart, people, list);

  const drawFacts = () => facts.replaceChildren(
    h("dt", {}, "Participants"), h("dd", {}, (j.participants || []).join(", ")),
    h("dt", {}, "Checkpoint timeout"), h("dd", {}, fmtMs(j.checkpoint_timeout_ms)),
    h("dt", {}, "Concurrent checkpoints"), h("dd", {}, j.max_concurrent_checkpoints),
    h("dt", {}, "Last committed"), h("dd", {}, j.last_committed ? h("a", { href: cpHref(job, j.last_committed) }, `#${j.last_committed}`) : "none"));

  const draw = () => {
    drawFacts();
    const all = Array.from(cps.values()).sort((a, b) => b.id - a.id);
    chart.replaceChildren(h("h2", { id: "h-history" }, "Checkpoint history"), ...historyChart(all, job));
    list.replaceChildren(h("h2", { id: "h-checkpoints" }, "Checkpoints"), tableOf(
      [["Checkpoint"], ["Status"], ["Opened"], ["To decision", "num"], ["To completion", "num hide-narrow"], ["Cause", "hide-narrow"]],
      all.map((cp) => h("tr", { "data-checkpoint": cp.id },
        h("td", {}, h("a", { href: cpHref(job, cp.id), "aria-current": cp.id === selected ? "true" : null }, `#${cp.id}`)),
        h("td", {}, statusBadge(cp.status)),
        h("td", {}, fmtTime(cp.created_at)),
        h("td", { class: "num" }, fmtMs(between(cp.created_at, cp.decided_at))),
        h("td", { class: "num hide-narrow" }, fmtMs(between(cp.created_at, cp.completed_at))),
        h("td", { class: "hide-narrow" }, cp.decision_cause || "–")))));
    people.replaceChildren(h("h2", { id: "h-participants" }, "Participants"), tableOf(
      [["Participant"], ["Epoch", "num"], ["Registered", "hide-narrow"], ["Last vote"], ["Vote after opening", "num"], ["Last ack", "hide-narrow"], ["Owes", "num"]],
      participants.map((p) => h("tr", {},
        h("td", {}, p.name), h("td", { class: "num" }, p.epoch),
        h("td", { class: "hide-narrow" }, fmtTime(p.registered_at)), h("td", {}, fmtTime(p.last_vote_at)),
        h("td", { class: "num" }, fmtMs(p.last_vote_ms)), h("td", { class: "hide-narrow" }, fmtTime(p.last_ack_at)),
        h("td", { class: "num" }, p.owed)))));
    drawDetail();
  };

  const drawDetail = () => {
    const cp = selected && cps.get(selected);
    if (!cp) {
      detail.replaceChildren(h("h2", { id: "h-detail" }, "Select a checkpoint"),
        h("p", { class: "muted" }, "Choose one in the chart or the list to see each participant's vote, committables and ack."));
      return;
    }
    const actions = h("div", { class: "actions" });
    if (operator) {
      const act = (title, verb, text) => h("button", { type: "button", "data-action": verb, onclick: async () => {
        const done = await confirmAction({ title, text }, `/v1/jobs/${encodeURIComponent(job)}/checkpoints/${cp.id}/${verb}`);
        if (done) { cps.set(done.id, done); draw(); notice(""); }
      } }, title);
      if (cp.status === "preparing") {
        actions.append(act("Abort", "abort", `Abort checkpoint #${cp.id} of ${job}: every participant rolls back.`));
        actions.append(act("Commit", "commit", `Commit checkpoint #${cp.id} of ${job}: only if every participant voted prepared.`));
      }
      if (cp.status === "committing" || cp.status === "aborted") {
        const owed = cp.participants.some((p) => !p.acked_at && (cp.status === "committing" || p.vote === "prepared"));
        if (owed) actions.append(act("Complete", "complete", `Record the missing acks of checkpoint #${cp.id} of ${job} as given: for participants gone for good.`));
      }
    }
    detail.replaceChildren(
      h("h2", { id: "h-detail" }, `Checkpoint #${cp.id} `, statusBadge(cp.status)),
      h("dl", { class: "facts" },
        h("dt", {}, "Opened"), h("dd", {}, fmtTime(cp.created_at)),
        h("dt", {}, "Deadline"), h("dd", {}, fmtTime(cp.deadline)),
        h("dt", {}, "Decided"), h("dd", {}, cp.decided_at ? `${fmtTime(cp.decided_at)} (after ${fmtMs(between(cp.created_at, cp.decided_at))})` : "not yet"),
        h("dt", {}, "Cause"), h("dd", {}, cp.decision_cause || "–"),
        h("dt", {}, "Decided by"), h("dd", {}, cp.decided_by || (cp.decided_at ? "the protocol (no token)" : "–")),
        cp.abort_reason ? [h("dt", {}, "Abort reason"), h("dd", { "data-abort-reason": "" }, cp.abort_reason)] : null,
        h("dt", {}, "Completed"), h("dd", {}, cp.completed_at ? fmtTime(cp.completed_at) : "not yet")),
      actions,
      tableOf([["Participant"], ["Epoch", "num"], ["Vote"], ["Vote after opening", "num"], ["Committables"], ["Ack"]],
        cp.participants.map((p) => h("tr", {},
          h("td", {}, p.name), h("td", { class: "num" }, p.epoch || "–"),
          h("td", {}, p.vote || h("span", { class: "muted" }, "not voted"), p.reason ? h("span", { class: "muted" }, ` (${p.reason})`) : null),
          h("td", { class: "num" }, fmtMs(between(cp.created_at, p.voted_at))),
          h("td", {}, p.committables ? h("pre", {}, JSON.stringify(p.committables, null, 2)) : "–"),
          h("td", {}, p.acked_at ? `${fmtTime(p.acked_at)} by ${p.acked_by}` : h("span", { class: "muted" }, "not acked"))))));
  };

  draw();
  const refreshPeople = debounce(async () => {
    try {
      participants = (await api(`/v1/jobs/${encodeURIComponent(job)}/participants`, { signal })).items;
      Object.assign(j, await api(`/v1/jobs/${encodeURIComponent(job)}`, { signal }));
      draw();
    } catch { /* the next change tries again */ }
  }, 1000);
  const redraw = debounce(draw, 150);
  follow(`/v1/jobs/${encodeURIComponent(job)}/events`, (type, data) => {
    if (type === "checkpoint") {
      const cp = JSON.parse(data);
      cps.set(cp.id, cp);
      redraw();
      refreshPeople();
    } else if (type === "reset") {
      api(`/v1/jobs/${encodeURIComponent(job)}/checkpoints?limit=100`, { signal }).then((page) => {
        for (const cp of page.items) cps.set(cp.id, cp);
        draw();
      }).catch(() => {});
    }
  }, signal);
  if (selected) document.getElementById("detail").scrollIntoView({ block: "start" });
}

// What hangs, across jobs, oldest first.
async function inDoubtPage(main, signal) {
  setTitle(main, "In doubt");
  main.append(h("p", { class: "muted" }, "Checkpoints preparing or committing, oldest first, with who has not voted or acked."));
  const body = h("div");
  main.append(body);
  const load = async () => {
    const open = await listAll("/v1/checkpoints?status=preparing,committing&limit=1000", signal);
    body.replaceChildren(open.length === 0 ? h("p", {}, "Nothing is in doubt.") : tableOf(
      [["Checkpoint"], ["Status"], ["Open for", "num"], ["Not voted"], ["Not acked"]],
      open.map((cp) => {
        const notVoted = cp.participants.filter((p) => !p.vote).map((p) => p.name);
        const notAcked = cp.status === "committing" ? cp.participants.filter((p) => !p.acked_at).map((p) => p.name) : [];
        return h("tr", {},
          h("td", {}, h("a", { href: cpHref(cp.job, cp.id) }, `${cp.job} #${cp.id}`)),
          h("td", {}, statusBadge(cp.status)),
          h("td", { class: "num" }, fmtMs(since(cp.created_at))),
          h("td", {}, notVoted.join(", ") || "–"),
          h("td", {}, notAcked.join(", ") || "–"));
      })));
  };
  await load();
  const refresh = debounce(() => load().catch(() => {}), 500);
  follow("/v1/events", () => refresh(), signal);
}

// The audit: actions taken by request, newest first.
async function auditPage(main, signal) {
  setTitle(main, "Audit");
  const body = h("div");
  main.append(body);
  let items = [];
  let cursor = null;
  const more = async () => {
    const page = await api("/v1/audit?limit=100" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""), { signal });
    items = items.concat(page.items);
    cursor = page.next_cursor || null;
    body.replaceChildren(tableOf([["When"], ["Action"], ["Job"], ["Checkpoint", "num"], ["Token"], ["Reason"], ["Request", "hide-narrow"]],
      items.map((a) => h("tr", {},
        h("td", {}, fmtTime(a.at)), h("td", {}, a.action),
        h("td", {}, a.job ? h("a", { href: jobHref(a.job) }, a.job) : "–"),
        h("td", { class: "num" }, a.checkpoint && a.job ? h("a", { href: cpHref(a.job, a.checkpoint) }, `#${a.checkpoint}`) : "–"),
        h("td", {}, a.token || "–"), h("td", {}, a.reason || "–"), h("td", { class: "hide-narrow" }, a.request_id || "–")))),
      cursor ? h("button", { class: "more", onclick: () => more().catch((e) => notice(problemText(e))) }, "Older entries") : null);
  };
  try {
    await more();
  } catch (e) {
    if (e instanceof ApiError && e.status === 403) {
      body.replaceChildren(h("p", { class: "error" }, problemText(e)));
      return;
    }
    throw e;
  }
}

// ---- The router: the page is in the fragment.

let current = null;
async function route() {
  if (current) current.abort();
  const controller = new AbortController();
  current = controller;
  const main = document.getElementById("main");
  main.replaceChildren();
  const path = decodeURIComponent(location.hash.replace(/^#/, "")) || "/";
  for (const a of document.querySelectorAll("nav a")) {
    const target = a.getAttribute("href").replace(/^#/, "");
    a.toggleAttribute("aria-current", target === path || (target === "/" && path.startsWith("/jobs")));
    if (a.hasAttribute("aria-current")) a.setAttribute("aria-current", "page");
  }
  setLive(false, "not live");
  try {
    let m;
    if (path === "/" || path === "") await overviewPage(main, controller.signal);
    else if (path === "/in-doubt") await inDoubtPage(main, controller.signal);
    else if (path === "/audit") await auditPage(main, controller.signal);
    else if ((m = path.match(/^\/jobs\/([^/]+)\/checkpoints\/(\d+)$/))) await jobPage(main, controller.signal, m[1], Number(m[2]));
    else if ((m = path.match(/^\/jobs\/([^/]+)$/))) await jobPage(main, controller.signal, m[1], null);
    else main.append(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Back to the jobs")));
  } catch (e) {
    if (controller.signal.aborted) return;
    main.append(h("p", { class: "error", role: "alert" }, problemText(e)));
  }
}

window.addEventListener("hashchange", () => {
  route();
  document.getElementById("main").focus({ preventScroll: true });
});
route();
