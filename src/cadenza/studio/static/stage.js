// The stage: the piano roll and the transport for what the page shows now. Either a job's variations
// (streaming in, then finished: audio, downloads, a score, tabs to step through them) or a piece
// without a job (a dropped file, a melody being played in), drawn as given notes and not playable.

import { api, variationNotes } from "./api.js";
import { drawRoll } from "./roll.js";

const $ = (id) => document.getElementById(id);
const RESULT_BUTTONS = ["dl-midi", "dl-wav", "continue", "score-toggle", "top-line"];

export class Stage {
  // `state`: the page's state (window.studio), whose job, variations, variation, piece and range the
  // stage keeps; `player`: the Player that plays the finished variation on screen
  constructor(state, player) {
    Object.assign(this, { state, player, listeners: [] });
    Object.assign(state, { job: null, variations: [], variation: 0, piece: null, range: { from: 0, to: 12 } });
  }

  onShow(fn) { this.listeners.push(fn); }
  shown() { this.listeners.forEach((fn) => fn()); }

  // A job begins: an empty roll `range.to` seconds long, on which it writes from `range.from` (to
  // `range.until`, where that is not the end).
  start(job, range) {
    this.clear();
    Object.assign(this.state, { job, variations: [], variation: 0, piece: null, range });
    this.redraw(); this.shown();
  }

  // A `notes` event of the job on stage: a variation's notes so far, and which of them are new.
  notes(ev) {
    const s = this.state, { from, to, until = to } = s.range;
    s.variations[ev.variation] = { notes: ev.notes, new: ev.new, bars: ev.bars || [] };
    const last = Math.max(from, ...ev.notes.filter((_, i) => ev.new[i]).map((n) => n[0]));
    $("bar").style.width = `${Math.min(100, (100 * (last - from)) / Math.max(until - from, 0.1))}%`;
    this.tabs(); this.redraw();
  }

  // A finished job (a `done` event's result, or one from the history): every variation's notes.
  async finished(result) {
    const s = this.state;
    const got = await Promise.all(result.variations.map((v) => variationNotes(result.id, v.index)));
    s.job = { id: result.id };
    s.variations = [];
    result.variations.forEach((v, k) => { s.variations[v.index] = { ...got[k], seconds: v.seconds, bars: v.bars || [] }; });
    $("bar").style.width = "100%";
    this.select(s.variations[s.variation] ? s.variation : 0);
  }

  // A piece without a job: {notes, seconds, name, upload (its id, for a dropped file), bars, new (which
  // notes to draw as new: none by default)}.
  show(piece) {
    this.clear();
    const end = Math.max(piece.seconds || 0, ...piece.notes.map((n) => n[1]));
    Object.assign(this.state, { piece: { ...piece, new: piece.new || piece.notes.map(() => 0) },
                                range: { from: 0, to: end } });
    this.redraw(); this.shown();
  }

  // Step to variation `i` (A/B: the music goes on from the same time).
  select(i) {
    const s = this.state, v = s.variations[i];
    s.variation = i;
    this.tabs();
    if (!s.piece && s.job && v && v.seconds !== undefined) {
      const base = `/api/jobs/${s.job.id}/${i}`;
      this.player.load(`${base}/wav`, true);
      $("dl-midi").href = `${base}/midi`; $("dl-wav").href = `${base}/wav`;
      RESULT_BUTTONS.forEach((id) => { $(id).hidden = false; });
      if (!$("score").hidden) this.score();
    }
    this.redraw(); this.shown();
  }

  // What a span edit or a top line takes from the stage: an upload, a finished variation, or null.
  current() {
    const s = this.state, v = s.variations[s.variation];
    if (s.piece) return s.piece.upload ? { upload: s.piece.upload } : null;
    return s.job && v && v.seconds !== undefined ? { result: { job: s.job.id, variation: s.variation } } : null;
  }

  // The bar lines of what is on stage (seconds; the last closes the last bar), [] where unknown.
  bars() {
    const s = this.state, v = s.piece || s.variations[s.variation];
    return (v && v.bars) || [];
  }

  // What is on stage, to come back to (undo); `restore` shows it again.
  snapshot() {
    const { job, variations, variation, piece, range } = this.state;
    return { job, variations: [...variations], variation, piece, range };
  }

  restore(snap) {
    this.clear();
    Object.assign(this.state, snap, { variations: [...snap.variations] });
    if (snap.piece) { this.redraw(); this.shown(); } else this.select(snap.variation);
  }

  // Keep only the variation on screen (the others are still in the history).
  keepOnly() {
    const s = this.state;
    s.variations = s.variations.map((v, i) => (i === s.variation ? v : undefined));
    this.tabs(); this.shown();
  }

  clear() {
    this.player.clear();
    RESULT_BUTTONS.forEach((id) => { $(id).hidden = true; });
    $("score").hidden = true; $("score").innerHTML = "";
    $("bar").style.width = "0"; $("tabs").innerHTML = "";
  }

  tabs() {
    const s = this.state;
    const many = s.variations.filter(Boolean).length > 1;
    $("tabs").innerHTML = many ? s.variations.map((v, i) => (v ?
      `<div class="tab${i === s.variation ? " on" : ""}" data-i="${i}">variation ${i + 1}</div>` : "")).join("") : "";
    $("tabs").querySelectorAll(".tab").forEach((t) => { t.onclick = () => this.select(Number(t.dataset.i)); });
  }

  redraw() {
    const s = this.state;
    const v = s.piece || s.variations[s.variation] || { notes: [], new: [] };
    drawRoll($("roll"), v.notes, { new: v.new, seconds: s.range.to, span: s.span || undefined, bars: v.bars,
                                   cursor: s.piece ? undefined : this.player.cursor });
    $("empty").hidden = v.notes.length > 0;
  }

  async score() {
    const s = this.state;
    $("score").hidden = false;
    $("score").innerHTML = "<p class='dim'>engraving…</p>";
    try {
      $("score").innerHTML = await api(`/api/jobs/${s.job.id}/${s.variation}/score`);
    } catch (e) { $("score").innerHTML = `<p class="dim">${e.message}</p>`; }
  }
}
