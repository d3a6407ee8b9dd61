// cadenza studio: the page. Plain JavaScript modules, no library, no build step: the server renders
// audio and scores. This one wires the page together: models and styles, generating and continuing,
// the history; the roll (roll.js), what is on stage (stage.js), listening (player.js), filling a span
// (edit.js), playing a melody in and accompanying it (melody.js, recorder.js), the API (api.js).

import { api, follow, post, uploadFile } from "./api.js";
import { DuetPanel } from "./duet.js";
import { SpanEditor } from "./edit.js";
import { MelodyPanel } from "./melody.js";
import { Player } from "./player.js";
import { drawRoll, timeAt } from "./roll.js";
import { Stage } from "./stage.js";

const $ = (id) => document.getElementById(id);
const state = { models: [], style: null, source: null, primer: null, jobCut: 0, length: 12, busy: false };
window.studio = state;     // the browser tests read the state from here
const say = (text) => { $("status").textContent = text; };

const player = new Player($("audio"), $("play"), $("clock"), () => stage.redraw());
const stage = new Stage(state, player);
const can = (task) => ((state.models.find((m) => m.id === $("model").value) || {}).tasks || []).includes(task);
const editor = new SpanEditor({ state, stage, player, run: runJob, can });
const melody = new MelodyPanel({ state, stage, player, run: runJob, can, fresh: () => editor.reset(), say });
const duet = new DuetPanel({ recorder: melody.recorder, stage, model: () => $("model").value,
                             style: () => state.style, say });

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
  $("styles").querySelectorAll(".chip").forEach((b) => { b.onclick = () => { state.style = b.dataset.style; showStyles(); }; });
  $("guidance").disabled = !styles.length;
  editor.refresh(); melody.refresh();
}

// ---- jobs -------------------------------------------------------------------------------------
// The sampling settings; an edit (a span, an accompaniment) takes its length from its music.
function settings(edit) {
  const s = {
    temperature: +$("temperature").value, top_p: +$("top_p").value, seed: +$("seed").value,
    num_samples: +$("variations").value, stop_at_eos: false,
  };
  if (!edit) s.seconds = +$("seconds").value;
  if (state.style) { s.style = state.style; s.guidance = +$("guidance").value; }
  return s;
}

// Start a job (POST `path` with the model, the settings and `body`) and follow it on the stage, which
// spans `range` seconds; `verb` says what it does. -> whether it finished.
async function runJob(path, body, range, verb) {
  player.stop();
  let job;
  try {
    job = await post(path, { model: $("model").value, settings: settings(path !== "/api/jobs"), ...body });
  } catch (e) { say(`could not start: ${e.message}`); return false; }
  stage.start(job, range);
  running(true); say("queued…");
  const finished = await new Promise((resolve) => {
    state.source = follow(job.id, {
      started: () => say(`${verb}…`),
      notes: (d) => stage.notes(d),
      done: (result) => stage.finished(result).then(() => { say(summary(result)); resolve(true); },
                                                    (e) => { say(e.message); resolve(false); }),
      cancelled: () => { say("cancelled"); resolve(false); },
      failed: (error) => { say(`failed: ${error}`); resolve(false); },
    });
  });
  running(false);
  loadHistory().catch(() => {});
  return finished;
}

const summary = (r) => `${r.variations.length} variation${r.variations.length > 1 ? "s" : ""}, ` +
  `${r.tokens_per_s.toFixed(0)} tokens/s`;

async function generate() {
  state.length = +$("seconds").value;
  const body = {};
  state.jobCut = 0;
  if (state.primer) {
    body.primer = state.primer.upload || { job: state.primer.job, variation: state.primer.variation };
    body.primer_seconds = state.primer.cut;
    state.jobCut = state.primer.cut;
  }
  editor.reset();
  await runJob("/api/jobs", body, { from: state.jobCut, to: state.jobCut + state.length }, "generating");
}

async function cancel() {   // the job's `cancelled` event ends it on the page
  if (!state.job) return;
  say("cancelling…");
  await api(`/api/jobs/${state.job.id}`, { method: "DELETE" }).catch((e) => say(e.message));
}

function running(on) {
  state.busy = on;
  $("generate").hidden = on; $("cancel").hidden = !on;
  $("generate").disabled = on;
  editor.refresh(); melody.refresh();
}

// ---- primers: a dropped file, or "continue this" ----------------------------------------------------
function drawPrimer() {
  const c = $("primer-roll");
  if (!state.primer) { c.hidden = true; $("primer-info").hidden = true; $("drop-text").hidden = false; return; }
  c.hidden = false; $("primer-info").hidden = false; $("drop-text").hidden = true;
  drawRoll(c, state.primer.notes, { seconds: state.primer.seconds, cut: state.primer.cut });
  $("cut-time").textContent = state.primer.cut.toFixed(1);
}

// A dropped file: the primer of the next generation, the piece on stage (to fill a span of) and the
// melody to accompany.
async function upload(file) {
  say(`reading ${file.name}…`);
  let info;
  try { info = await uploadFile(file); } catch (e) { say(e.message); return; }
  state.primer = { upload: info.id, notes: info.notes, seconds: info.seconds, cut: info.seconds, name: info.name };
  drawPrimer();
  editor.reset();
  stage.show({ upload: info.id, notes: info.notes, seconds: info.seconds, name: info.name, bars: info.bars || [] });
  melody.fromUpload(info);
  say(`${info.name}: ${info.notes.length} notes, ${info.seconds.toFixed(1)} s — generate to continue it, ` +
      "select a span to fill, or accompany its melody");
}

function continueThis() {
  const v = state.variations[state.variation];
  if (!v) return;
  const end = Math.max(0, ...v.notes.map((n) => n[1]));
  state.primer = { job: state.job.id, variation: state.variation, notes: v.notes, seconds: end, cut: end };
  drawPrimer(); say("continuing this one: press Generate");
}

function dragCut(ev) {
  if (!state.primer) return;
  state.primer.cut = Math.max(0.5, Math.min(state.primer.seconds, timeAt($("primer-roll"), ev)));
  drawPrimer();
}

// ---- history ------------------------------------------------------------------------------------
const TASK = { continue: "· continued", infill: "· a span filled", accompany: "· accompanied" };

async function loadHistory() {
  const past = await api("/api/history");
  $("history").innerHTML = past.map((j) => {
    const when = new Date(j.created * 1000).toLocaleTimeString();
    const style = j.settings.style || "no style";
    const secs = j.variations.map((v) => (v.seconds || 0).toFixed(0)).join(", ");
    const task = j.primer ? TASK[j.primer.task || "continue"] || "" : "";
    return `<li data-id="${j.id}"><b>${style}</b> ${task}<span>${when} · ${j.model} · ${secs} s · seed ${j.settings.seed}</span></li>`;
  }).join("");
  $("history").querySelectorAll("li").forEach((li) => { li.onclick = () => openPast(past.find((j) => j.id === li.dataset.id)); });
}

async function openPast(j) {
  if (state.busy) return;
  player.stop(); editor.reset();
  const p = j.primer || {};
  state.length = j.settings.seconds || 12;
  state.jobCut = (p.task || "continue") === "continue" && j.primer ? (p.seconds || p.end || 0) : 0;
  stage.start({ id: j.id }, { from: state.jobCut, to: p.task && p.task !== "continue" ? p.end || 0 : state.jobCut + state.length });
  await stage.finished(j);
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
  $("continue").onclick = continueThis;
  $("score-toggle").onclick = () => ($("score").hidden ? stage.score() : ($("score").hidden = true));
  $("clear-primer").onclick = (e) => { e.stopPropagation(); state.primer = null; drawPrimer(); };
  const drop = $("drop");
  drop.onclick = (e) => { if (e.target === drop || e.target.id === "drop-text") $("file").click(); };
  $("file").onchange = () => {
    if ($("file").files[0]) upload($("file").files[0]);
    $("file").value = "";   // so that choosing the same file again reads it again
  };
  drop.ondragover = (e) => { e.preventDefault(); drop.classList.add("over"); };
  drop.ondragleave = () => drop.classList.remove("over");
  drop.ondrop = (e) => { e.preventDefault(); drop.classList.remove("over"); e.dataTransfer.files[0] && upload(e.dataTransfer.files[0]); };
  let dragging = false;
  $("primer-roll").onpointerdown = (e) => { dragging = true; dragCut(e); };
  window.addEventListener("pointermove", (e) => dragging && dragCut(e));
  window.addEventListener("pointerup", () => { dragging = false; });
  window.addEventListener("keydown", (e) => {
    if (e.code === "Space" && !["INPUT", "SELECT"].includes(document.activeElement.tagName)) { e.preventDefault(); player.toggle(); }
  });
  window.addEventListener("resize", () => { stage.redraw(); drawPrimer(); });
}

wire();
stage.redraw();
editor.refresh(); melody.refresh();
loadModels().catch((e) => say(`could not load models: ${e.message}`));
loadHistory().catch(() => {});
watchSpeed();
