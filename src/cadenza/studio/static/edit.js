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

  select(span) {
    const s = span && [tenth(span[0]), tenth(span[1])];
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
      $("span-text").textContent = `${s.span[0].toFixed(1)}–${s.span[1].toFixed(1)} s`;
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
