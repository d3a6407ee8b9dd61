// Filling a span: drag across the roll's time axis to select it; "Regenerate span" rewrites the notes
// that start in it (N variations, every other note locked); step through them (A/B), keep one, and
// the kept one is what the next span edits; undo goes back one edit at a time.

import { selectable } from "./roll.js";

const $ = (id) => document.getElementById(id);
const tenth = (t) => Math.round(t * 10) / 10;   // spans in tenths of a second: easy to read and to type

export class SpanEditor {
  // run(path, body, range, verb) -> whether the job finished; can(task): the model can do it now
  constructor({ state, stage, player, run, can }) {
    Object.assign(this, { state, stage, run, can });
    Object.assign(state, { span: null, pending: false, undo: [] });
    selectable($("roll"), {
      enabled: () => !state.busy && stage.current() !== null,
      onSpan: (span) => this.select(span),
      onClick: (t) => { this.select(null); player.seek(t); },
    });
    $("regenerate").onclick = () => this.regenerate();
    $("clear-span").onclick = () => this.select(null);
    $("keep").onclick = () => this.keep();
    $("undo").onclick = () => this.undo();
    stage.onShow(() => this.refresh());
  }

  // A dragged span, snapped to whole bars where the music has bar lines (a musician asks for "bars
  // 9-12"), else to tenths of a second.
  select(span) {
    const s = span && snap(span, this.stage.bars());
    this.state.span = s && s[1] > s[0] ? s : null;
    this.refresh(); this.stage.redraw();
  }

  // Something new is on stage (a generation, a file, a melody, the history): nothing to undo.
  reset() {
    Object.assign(this.state, { span: null, pending: false, undo: [] });
    this.refresh();
  }

  refresh() {
    const s = this.state, bar = $("span-bar");
    bar.hidden = !s.span;
    if (s.span) {
      const secs = `${s.span[0].toFixed(1)}–${s.span[1].toFixed(1)} s`, named = barNames(s.span, this.stage.bars());
      $("span-text").textContent = named ? `${named} (${secs})` : secs;
      Object.assign(bar.dataset, { start: String(s.span[0]), end: String(s.span[1]) });
    }
    const why = this.can("infill") ? "" : "this model cannot fill a span: pick one trained on the note vocabulary";
    $("regenerate").disabled = Boolean(why) || s.busy || !this.stage.current();
    $("regenerate").title = why;
    $("keep").hidden = !(s.pending && s.variations.filter(Boolean).length > 1);
    $("undo").hidden = !s.undo.length || s.busy;
  }

  async regenerate() {
    const s = this.state;
    if (s.pending) this.keep();   // going on from a choice keeps the variation on screen
    const target = this.stage.current();
    if (!target || !s.span) return;
    const before = this.stage.snapshot(), [start, end] = s.span;
    s.undo.push(before);
    const done = await this.run("/api/infill", { ...target, start, end }, { from: start, until: end, to: before.range.to },
                                "filling the span");
    if (done) s.pending = true;
    else { s.undo.pop(); this.stage.restore(before); }
    this.refresh();
  }

  keep() {
    this.state.pending = false;
    this.stage.keepOnly();
  }

  undo() {
    const before = this.state.undo.pop();
    if (!before) return;
    this.state.pending = false;
    this.stage.restore(before);
  }
}

// [start, end] out to the bar lines around it (the line at or before start, at or after end), or to
// tenths of a second without bar lines.
export function snap(span, bars) {
  if (bars.length < 2) return [tenth(span[0]), tenth(span[1])];
  const at = (t) => bars.reduce((best, b) => (b <= t + 1e-3 ? b : best), bars[0]);
  const after = (t) => bars.find((b) => b >= t - 1e-3) ?? bars[bars.length - 1];
  return [at(span[0]), after(span[1])];
}

// "bars 9–12" for a span on bar lines, numbered as a score numbers them (a pickup is bar 0).
function barNames(span, bars) {
  const i = bars.indexOf(span[0]), j = bars.indexOf(span[1]);
  if (i < 0 || j <= i) return "";
  const pickup = bars.length > 2 && bars[1] - bars[0] < bars[2] - bars[1] - 1e-3;
  const first = i + (pickup ? 0 : 1), last = j - 1 + (pickup ? 0 : 1);
  return first === last ? `bar ${first}` : `bars ${first}–${last}`;
}
