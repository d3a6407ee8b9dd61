// Accompanying a melody. Give one by playing it in (a MIDI keyboard, the on-screen keys or the
// computer's: `Recorder`), by dropping a MIDI file (its lead part, or its top line), or by taking the
// top line of a result; "Accompany" writes voices under it in the chosen style and plays it all.

import { Recorder } from "./recorder.js";

const $ = (id) => document.getElementById(id);
const HINT = "play one in, drop a MIDI file, or take a result's top line";

export class MelodyPanel {
  // run(path, body, range, verb) -> whether the job finished; can(task): the model can do it now;
  // fresh(): something new goes on stage (no span edits to undo); say(text): the status line
  constructor({ state, stage, player, run, can, fresh, say }) {
    Object.assign(this, { state, stage, player, run, can, fresh, say });
    state.melody = null;   // {label, end, and one of: notes (played), upload (an id), result ({job, variation})}
    this.recorder = new Recorder({
      keys: $("keys"), octave: $("octave"), down: $("octave-down"), up: $("octave-up"), record: $("record"),
      tempo: $("tempo"), metronome: $("metronome"), midi: $("midi-status"),
    }, { active: () => !state.busy, onNote: (notes) => this.playing(notes), onTake: (notes) => this.took(notes) });
    $("accompany").onclick = () => this.accompany();
    $("top-line").onclick = () => this.topLine();
    $("record").addEventListener("click", () => this.refresh());
    stage.onShow(() => this.refresh());
  }

  use(melody) {
    this.state.melody = melody;
    this.refresh();
  }

  // A dropped file: `info` as POST /api/uploads answers.
  fromUpload(info) {
    this.use({ upload: info.id, end: info.seconds, label: `${info.name}: its lead part, or its top line` });
  }

  topLine() {
    const target = this.stage.current(), v = this.state.variations[this.state.variation];
    if (!target || !target.result) return;
    const end = Math.max(0, ...v.notes.map((n) => n[1]));
    this.use({ result: target.result, end, label: `the top line of variation ${target.result.variation + 1}` });
    this.say("melody: the top line of this result — press Accompany");
  }

  playing(notes) {   // the take so far, drawn as it grows
    this.fresh();
    this.stage.show({ notes, seconds: Math.max(8, ...notes.map((n) => n[1] + 1)), name: "recording" });
  }

  took(notes) {
    this.refresh();
    if (!notes.length) { this.say("nothing recorded: press Record, then play"); return; }
    const end = Math.max(...notes.map((n) => n[1]));
    this.use({ notes, end, label: `played melody (${notes.length} notes, ${end.toFixed(1)} s)` });
    this.fresh();
    this.stage.show({ notes, seconds: end, name: "played melody" });
    this.say("recorded: press Accompany to hear it with new voices");
  }

  async accompany() {
    const m = this.state.melody;
    if (!m) return;
    const body = m.notes ? { notes: m.notes.map(([start, end, pitch, velocity]) => ({ start, end, pitch, velocity })) }
      : m.upload ? { upload: m.upload } : { result: m.result };
    this.fresh();
    if (await this.run("/api/accompany", body, { from: 0, to: m.end }, "accompanying")) this.player.start();
  }

  refresh() {
    const s = this.state, m = s.melody, recording = this.recorder && this.recorder.recording;
    $("melody-info").textContent = m ? `melody: ${m.label}` : HINT;
    const why = this.can("accompany") ? "" : "this model cannot accompany: pick one trained on the note vocabulary";
    $("accompany").disabled = Boolean(why) || !m || s.busy || recording;
    $("accompany").title = why;
    $("record").disabled = s.busy;
  }
}
