// cadenza studio: the page. Plain JavaScript, no library: the server renders audio and scores.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  models: [], style: null, job: null, source: null, variation: 0,
  variations: [],          // per variation: {notes: [[start, end, pitch, velocity]], seconds}
  primer: null,            // {upload: id} or {job, variation}, plus notes and cut
  length: 12,
};
window.studio = state;     // the browser test reads the state from here

// ---- helpers ----------------------------------------------------------------------------------
async function api(path, options = {}) {
  const r = await fetch(path, options);
  const body = r.headers.get("content-type")?.includes("json") ? await r.json() : await r.text();
  if (!r.ok) {
    const d = body && body.detail;
    const msg = Array.isArray(d) ? d.map((x) => x.msg).join("; ") : (d || r.statusText);
    throw new Error(msg);
  }
  return body;
}
const say = (text) => { $("status").textContent = text; };
const fmt = (t) => `${Math.floor(t / 60)}:${(t % 60).toFixed(1).padStart(4, "0")}`;

// ---- the fast decoder ----------------------------------------------------------------------------
// After start the server builds its compiled decode step in the background (about 20 s a shape the
// first time; jobs decode eagerly meanwhile): say so, so a slow first generation is no surprise.
const SPEED = { ready: "fast decoding", building: "warming up the fast decoder…", eager: "eager decoding" };
async function watchSpeed() {
  let health;
  try { health = await api("/api/health"); } catch { return; }
  const s = health.compiled_step || "off", el = $("speed");
  const kind = s.startsWith("eager") ? "eager" : s;
  el.hidden = !(kind in SPEED);
  el.dataset.state = kind;
  el.textContent = SPEED[kind] || "";
  el.title = s.startsWith("eager: ") ? s.slice(7) : "";  // why it stays eager (no compiler, a GPU, ...)
  if (kind === "building") setTimeout(watchSpeed, 2000);
}

// ---- piano rolls --------------------------------------------------------------------------------
function drawRoll(canvas, notes, opts = {}) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const all = (opts.primer || []).concat(notes);
  const end = Math.max(opts.seconds || 1, ...all.map((n) => n[1]));
  let lo = Math.min(...all.map((n) => n[2]), 60) - 2, hi = Math.max(...all.map((n) => n[2]), 60) + 2;
  if (hi - lo < 24) { const m = (lo + hi) >> 1; lo = m - 12; hi = m + 12; }
  const x = (t) => 36 + (t / end) * (w - 44), rowH = (h - 16) / (hi - lo + 1);
  const y = (p) => 6 + (hi - p) * rowH;
  for (let p = lo; p <= hi; p++) {            // keyboard stripes, C labelled
    const black = [1, 3, 6, 8, 10].includes(p % 12);
    g.fillStyle = black ? "#0e1018" : "#12151f";
    g.fillRect(36, y(p), w - 44, rowH);
    if (p % 12 === 0) {
      g.fillStyle = "#8b91a7"; g.font = "10px system-ui"; g.fillText(`C${p / 12 - 1}`, 4, y(p) + rowH - 1);
      g.fillStyle = "#232838"; g.fillRect(36, y(p) + rowH - 1, w - 44, 1);
    }
  }
  for (let s = 0; s <= end; s += end > 40 ? 10 : end > 16 ? 5 : 1) {   // seconds grid
    g.fillStyle = "#1f2433"; g.fillRect(x(s), 0, 1, h);
    g.fillStyle = "#5d647a"; g.font = "10px system-ui"; g.fillText(`${s}s`, x(s) + 2, h - 3);
  }
  const paint = (n, primer) => {
    const v = n[3] / 127;
    g.fillStyle = primer ? "rgba(120,140,190,0.55)" : `hsl(${42 - 30 * v}, ${70 + 25 * v}%, ${45 + 20 * v}%)`;
    const r = Math.min(3, rowH / 2);
    const bx = x(n[0]), bw = Math.max(2, x(n[1]) - x(n[0])), by = y(n[2]) + 0.5, bh = Math.max(2, rowH - 1);
    g.beginPath(); g.roundRect(bx, by, bw, bh, r); g.fill();
  };
  (opts.primer || []).forEach((n) => paint(n, true));
  notes.forEach((n) => paint(n, false));
  if (opts.cut !== undefined) { g.fillStyle = "#6fd3c1"; g.fillRect(x(opts.cut) - 1, 0, 3, h); }
  if (opts.cursor !== undefined) { g.fillStyle = "#ffffff"; g.fillRect(x(opts.cursor), 0, 2, h); }
  canvas.dataset.notes = String(notes.length);
  canvas._x = x; canvas._end = end;
}

function redraw() {
  const v = state.variations[state.variation] || { notes: [] };
  const cut = state.jobCut || 0;   // a continuation: the primer's notes come first, drawn apart
  const a = $("audio");
  drawRoll($("roll"), v.notes.filter((n) => n[0] >= cut), {
    primer: v.notes.filter((n) => n[0] < cut), seconds: cut + state.length,
    cursor: a.src && (a.currentTime > 0 || !a.paused) ? a.currentTime : undefined,
  });
  $("empty").hidden = v.notes.length > 0;
}

function drawPrimer() {
  const c = $("primer-roll");
  if (!state.primer) { c.hidden = true; $("primer-info").hidden = true; $("drop-text").hidden = false; return; }
  c.hidden = false; $("primer-info").hidden = false; $("drop-text").hidden = true;
  drawRoll(c, state.primer.notes, { seconds: state.primer.seconds, cut: state.primer.cut });
  $("cut-time").textContent = state.primer.cut.toFixed(1);
}

// ---- models and styles ----------------------------------------------------------------------------
async function loadModels() {
  state.models = await api("/api/models");
  $("model").innerHTML = state.models.map((m) =>
    `<option value="${m.id}">${m.name}${m.kind === "run" ? " (your run)" : ""}</option>`).join("");
  if (!state.models.length) { say("no models: train one, or install cadenza with its shipped model"); return; }
  showStyles();
  say("ready");
}

function showStyles() {
  const m = state.models.find((x) => x.id === $("model").value) || state.models[0];
  const styles = m ? m.styles : [];
  state.style = styles.includes(state.style) ? state.style : (styles[0] || null);
  $("styles").innerHTML = (styles.length ? styles : ["(no styles)"]).map((s) =>
    `<button class="chip${s === state.style ? " on" : ""}" data-style="${s}" ${styles.length ? "" : "disabled"}>${s}</button>`).join("");
  $("styles").querySelectorAll(".chip").forEach((b) => b.onclick = () => { state.style = b.dataset.style; showStyles(); });
  $("guidance").disabled = !styles.length;
}

// ---- generating -------------------------------------------------------------------------------
function settings() {
  const s = {
    temperature: +$("temperature").value, top_p: +$("top_p").value, seconds: +$("seconds").value,
    seed: +$("seed").value, num_samples: +$("variations").value, stop_at_eos: false,
  };
  if (state.style) { s.style = state.style; s.guidance = +$("guidance").value; }
  return s;
}

async function generate() {
  stop();
  state.variations = []; state.variation = 0; state.length = +$("seconds").value;
  resetResult();
  const body = { model: $("model").value, settings: settings() };
  state.jobCut = 0;
  if (state.primer) {
    body.primer = state.primer.upload || { job: state.primer.job, variation: state.primer.variation };
    body.primer_seconds = state.primer.cut;
    state.jobCut = state.primer.cut;
  }
  try {
    state.job = await api("/api/jobs", { method: "POST", headers: { "content-type": "application/json" },
                                         body: JSON.stringify(body) });
  } catch (e) { say(`could not start: ${e.message}`); return; }
  running(true);
  say("queued…");
  const source = new EventSource(`/api/jobs/${state.job.id}/events`);
  state.source = source;
  source.addEventListener("started", () => say("generating…"));
  source.addEventListener("notes", (ev) => {
    const d = JSON.parse(ev.data);
    state.variations[d.variation] = { notes: d.notes, seconds: 0 };
    const end = Math.max(0, ...d.notes.map((n) => n[1]));
    $("bar").style.width = `${Math.min(100, 100 * end / (state.jobCut + state.length))}%`;
    showTabs(); redraw();
  });
  source.addEventListener("done", (ev) => { finished(JSON.parse(ev.data).result); });
  source.addEventListener("cancelled", () => { say("cancelled"); running(false); source.close(); });
  source.addEventListener("failed", (ev) => { say(`failed: ${JSON.parse(ev.data).error}`); running(false); source.close(); });
}

async function finished(result) {
  state.source && state.source.close();
  running(false);
  $("bar").style.width = "100%";
  for (const v of result.variations) {
    const notes = await api(`/api/jobs/${result.id}/${v.index}/notes`);
    state.variations[v.index] = { notes, seconds: v.seconds };
  }
  state.job = { id: result.id };
  showTabs(); selectVariation(state.variation);
  say(`${result.variations.length} variation${result.variations.length > 1 ? "s" : ""}, ` +
      `${result.tokens_per_s.toFixed(0)} tokens/s`);
  loadHistory();
}

async function cancel() {
  if (!state.job) return;
  await api(`/api/jobs/${state.job.id}`, { method: "DELETE" }).catch(() => {});
  state.source && state.source.close();
  running(false); say("cancelled");
}

function running(on) {
  $("generate").hidden = on; $("cancel").hidden = !on;
  $("generate").disabled = on;
}

function resetResult() {
  const a = $("audio"); a.pause(); a.removeAttribute("src"); a.load();
  ["dl-midi", "dl-wav", "continue", "score-toggle"].forEach((id) => $(id).hidden = true);
  $("play").disabled = true; $("score").hidden = true; $("score").innerHTML = "";
  $("bar").style.width = "0"; $("tabs").innerHTML = ""; redraw();
}

function showTabs() {
  const n = state.variations.filter(Boolean).length;
  $("tabs").innerHTML = n > 1 ? state.variations.map((_, i) =>
    `<div class="tab${i === state.variation ? " on" : ""}" data-i="${i}">variation ${i + 1}</div>`).join("") : "";
  $("tabs").querySelectorAll(".tab").forEach((t) => t.onclick = () => selectVariation(+t.dataset.i));
}

function selectVariation(i) {
  state.variation = i;
  showTabs();
  if (state.job && state.job.id && state.variations[i] && state.variations[i].seconds !== undefined) {
    const base = `/api/jobs/${state.job.id}/${i}`;
    const a = $("audio"); a.pause(); a.src = `${base}/wav`;
    $("dl-midi").href = `${base}/midi`; $("dl-wav").href = `${base}/wav`;
    ["dl-midi", "dl-wav", "continue", "score-toggle"].forEach((id) => $(id).hidden = false);
    $("play").disabled = false;
    if (!$("score").hidden) loadScore();
  }
  redraw();
}

// ---- listening --------------------------------------------------------------------------------
function togglePlay() {
  const a = $("audio");
  if (!a.src) return;
  if (a.paused) { a.play(); tick(); } else { a.pause(); }
}
function tick() {
  const a = $("audio");
  $("clock").textContent = `${fmt(a.currentTime)} / ${fmt(a.duration || 0)}`;
  $("play").innerHTML = a.paused ? "&#9654;" : "&#10074;&#10074;";
  redraw();
  if (!a.paused) requestAnimationFrame(tick);
}
function stop() { const a = $("audio"); if (!a.paused) a.pause(); }

async function loadScore() {
  $("score").hidden = false;
  $("score").innerHTML = "<p class='dim'>engraving…</p>";
  try {
    $("score").innerHTML = await api(`/api/jobs/${state.job.id}/${state.variation}/score`);
  } catch (e) { $("score").innerHTML = `<p class="dim">${e.message}</p>`; }
}

// ---- primers: a dropped file, or "continue this" ----------------------------------------------------
async function upload(file) {
  const form = new FormData();
  form.append("file", file);
  say(`reading ${file.name}…`);
  try {
    const info = await api("/api/uploads", { method: "POST", body: form });
    state.primer = { upload: info.id, notes: info.notes, seconds: info.seconds, cut: info.seconds, name: info.name };
    drawPrimer(); say(`${info.name}: ${info.notes.length} notes, ${info.seconds.toFixed(1)} s — generate to continue it`);
  } catch (e) { say(`${e.message}`); }
}

function continueThis() {
  const v = state.variations[state.variation];
  if (!v) return;
  const end = Math.max(0, ...v.notes.map((n) => n[1]));
  state.primer = { job: state.job.id, variation: state.variation, notes: v.notes, seconds: end, cut: end };
  drawPrimer(); say("continuing this one: press Generate");
}

function dragCut(ev) {
  const c = $("primer-roll");
  if (!state.primer || !c._x) return;
  const rect = c.getBoundingClientRect();
  const t = ((ev.clientX - rect.left - 36) / (rect.width - 44)) * c._end;
  state.primer.cut = Math.max(0.5, Math.min(state.primer.seconds, t));
  drawPrimer();
}

// ---- history ------------------------------------------------------------------------------------
async function loadHistory() {
  const past = await api("/api/history");
  $("history").innerHTML = past.map((j) => {
    const when = new Date(j.created * 1000).toLocaleTimeString();
    const style = j.settings.style || "no style";
    const secs = j.variations.map((v) => (v.seconds || 0).toFixed(0)).join(", ");
    return `<li data-id="${j.id}"><b>${style}</b> ${j.primer ? "· continued" : ""}<span>${when} · ${j.model} · ${secs} s · seed ${j.settings.seed}</span></li>`;
  }).join("");
  $("history").querySelectorAll("li").forEach((li) => li.onclick = () => openPast(past.find((j) => j.id === li.dataset.id)));
}

async function openPast(j) {
  stop(); resetResult();
  state.job = { id: j.id }; state.variations = []; state.length = j.settings.seconds || 12;
  state.jobCut = j.primer ? (j.primer.seconds || j.primer.end || 0) : 0;
  for (const v of j.variations) {
    state.variations[v.index] = { notes: await api(`/api/jobs/${j.id}/${v.index}/notes`), seconds: v.seconds };
  }
  selectVariation(0);
  say(`from the history: ${j.settings.style || "no style"}, seed ${j.settings.seed}`);
}

// ---- wiring -------------------------------------------------------------------------------------
function wire() {
  for (const id of ["guidance", "temperature", "top_p", "seconds"]) {
    const show = () => { $(`${id}-out`).textContent = id === "seconds" ? `${$(id).value} s` : $(id).value; };
    $(id).oninput = show; show();
  }
  $("model").onchange = showStyles;
  $("dice").onclick = () => { $("seed").value = Math.floor(Math.random() * 100000); };
  $("generate").onclick = generate;
  $("cancel").onclick = cancel;
  $("play").onclick = togglePlay;
  $("audio").onended = tick; $("audio").onpause = tick;
  $("continue").onclick = continueThis;
  $("score-toggle").onclick = () => ($("score").hidden ? loadScore() : ($("score").hidden = true));
  $("clear-primer").onclick = (e) => { e.stopPropagation(); state.primer = null; drawPrimer(); };
  const drop = $("drop");
  drop.onclick = (e) => { if (e.target === drop || e.target.id === "drop-text") $("file").click(); };
  $("file").onchange = () => $("file").files[0] && upload($("file").files[0]);
  drop.ondragover = (e) => { e.preventDefault(); drop.classList.add("over"); };
  drop.ondragleave = () => drop.classList.remove("over");
  drop.ondrop = (e) => { e.preventDefault(); drop.classList.remove("over"); e.dataTransfer.files[0] && upload(e.dataTransfer.files[0]); };
  let dragging = false;
  $("primer-roll").onpointerdown = (e) => { dragging = true; dragCut(e); };
  window.addEventListener("pointermove", (e) => dragging && dragCut(e));
  window.addEventListener("pointerup", () => { dragging = false; });
  window.addEventListener("keydown", (e) => {
    if (e.code === "Space" && !["INPUT", "SELECT"].includes(document.activeElement.tagName)) { e.preventDefault(); togglePlay(); }
  });
  window.addEventListener("resize", () => { redraw(); drawPrimer(); });
}

wire();
redraw();
loadModels().catch((e) => say(`could not load models: ${e.message}`));
loadHistory().catch(() => {});
watchSpeed();
