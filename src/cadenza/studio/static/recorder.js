// Playing a melody in: a MIDI keyboard through Web MIDI, the on-screen keys, or the computer's keys
// (two rows as on a piano: A S D F G H J K L ; are white keys, W E T Y U O P the black ones; Z and X
// shift an octave), with a metronome click at a chosen tempo while recording. A melody is one line:
// while recording, a new note ends the one still sounding.

const KEYS = ["KeyA", "KeyW", "KeyS", "KeyE", "KeyD", "KeyF", "KeyT", "KeyG", "KeyY", "KeyH", "KeyU", "KeyJ",
              "KeyK", "KeyO", "KeyL", "KeyP", "Semicolon"];   // semitones 0..16 above the octave's C
const LABELS = "AWSEDFTGYHUJKOLP;";                      // what each of KEYS says on the screen
const BLACK = [1, 3, 6, 8, 10];
const SHORTEST = 0.05;   // seconds: a tap is a short note, never an empty one

export class Recorder {
  // el: {keys, octave, down, up, record, tempo, metronome, midi}: the elements it drives;
  // active(): whether the computer's keys play now; onNote(notes): a note was recorded (the take so
  // far, in seconds from Record); onTake(notes): a recording is over (`take`)
  constructor(el, { active, onNote, onTake }) {
    Object.assign(this, { el, active, onNote, onTake });
    this.octave = 4;            // the keys start at C4, middle C (60)
    this.recording = false;
    this.notes = []; this.sounding = new Map();   // pitch -> {start, velocity, stop}
    this.audio = null; this.clicker = null;
    el.down.onclick = () => this.shift(-1);
    el.up.onclick = () => this.shift(1);
    el.record.onclick = () => (this.recording ? this.stop() : this.start());
    this.drawKeys();
    this.listen();
    this.connectMidi();
  }

  get base() { return 12 * (this.octave + 1); }
  now() { return performance.now() / 1000; }

  shift(by) {
    this.octave = Math.max(0, Math.min(8, this.octave + by));
    this.drawKeys();
  }

  drawKeys() {   // two octaves and a C, from the octave's C
    this.el.octave.textContent = `C${this.octave}`;
    const keys = [];
    for (let p = this.base; p <= this.base + 24 && p <= 127; p++) {
      const label = LABELS[p - this.base] || "";
      keys.push(`<button class="key${BLACK.includes(p % 12) ? " black" : ""}" data-pitch="${p}" ` +
                `title="${p}" tabindex="-1">${label}</button>`);
    }
    this.el.keys.innerHTML = keys.join("");
    this.el.keys.querySelectorAll(".key").forEach((k) => {
      const p = Number(k.dataset.pitch);
      k.onpointerdown = (e) => { e.preventDefault(); k.setPointerCapture(e.pointerId); this.noteOn(p, 90); };
      k.onpointerup = () => this.noteOff(p);
      k.onpointercancel = () => this.noteOff(p);
    });
  }

  listen() {
    const typing = (el) => ["SELECT", "TEXTAREA"].includes(el.tagName) ||
      (el.tagName === "INPUT" && !["checkbox", "range", "button"].includes(el.type));
    const held = new Map();   // key -> the pitch it started: an octave switch while it is down
    window.addEventListener("keydown", (e) => {
      if (!this.active() || typing(document.activeElement) || e.ctrlKey || e.metaKey || e.altKey) return;
      const i = KEYS.indexOf(e.code);
      if (i >= 0) {
        e.preventDefault();
        if (!e.repeat && !held.has(e.code)) { held.set(e.code, this.base + i); this.noteOn(this.base + i, 90); }
      } else if (e.code === "KeyZ" || e.code === "KeyX") { e.preventDefault(); this.shift(e.code === "KeyZ" ? -1 : 1); }
    });
    window.addEventListener("keyup", (e) => {
      if (held.has(e.code)) { this.noteOff(held.get(e.code)); held.delete(e.code); }
    });
  }

  // A MIDI keyboard where the browser lets the page have one; where it refuses (headless Chromium
  // always does), the on-screen and computer keys are there: say so quietly.
  connectMidi() {
    const say = (text) => { this.el.midi.textContent = text; };
    if (!navigator.requestMIDIAccess) { say("no Web MIDI here: play the keys below or A S D F…"); return; }
    navigator.requestMIDIAccess().then((access) => {
      const bind = () => {
        const names = [];
        for (const input of access.inputs.values()) {
          input.onmidimessage = (m) => this.midi(m.data);
          names.push(input.name || "MIDI keyboard");
        }
        say(names.length ? `MIDI: ${names.join(", ")}` : "no MIDI keyboard connected");
        this.el.midi.dataset.inputs = String(names.length);
      };
      bind();
      access.onstatechange = bind;
    }).catch(() => say("no MIDI access: play the keys below or A S D F…"));
  }

  midi(data) {
    const [status, pitch, velocity] = data, kind = status & 0xf0;
    if (kind === 0x90 && velocity > 0) this.noteOn(pitch, velocity);
    else if (kind === 0x80 || kind === 0x90) this.noteOff(pitch);
  }

  noteOn(pitch, velocity) {
    if (this.sounding.has(pitch)) this.noteOff(pitch);
    if (this.recording) for (const p of [...this.sounding.keys()]) this.noteOff(p);   // one line
    this.sounding.set(pitch, { start: this.now(), velocity, stop: this.tone(pitch, velocity) });
    this.el.keys.querySelector(`[data-pitch="${pitch}"]`)?.classList.add("down");
    this.onPlay?.("on", pitch, velocity);   // a duet hears it too
  }

  noteOff(pitch) {
    const n = this.sounding.get(pitch);
    if (!n) return;
    this.sounding.delete(pitch);
    n.stop();
    this.onPlay?.("off", pitch, 0);
    this.el.keys.querySelector(`[data-pitch="${pitch}"]`)?.classList.remove("down");
    if (this.recording && n.start >= this.t0) {
      this.notes.push([n.start - this.t0, Math.max(this.now(), n.start + SHORTEST) - this.t0, pitch, n.velocity]);
      this.onNote(this.notes);
    }
  }

  start() {
    this.notes = []; this.t0 = this.now(); this.recording = true;
    this.el.record.classList.add("on"); this.el.record.textContent = "Stop";
    this.el.metronome.dataset.beats = "0";
    if (this.el.metronome.checked) {
      const beat = 60 / this.tempo();
      this.click(0);
      this.clicker = setInterval(() => this.click(Number(this.el.metronome.dataset.beats)), beat * 1000);
    }
  }

  stop() {
    for (const p of [...this.sounding.keys()]) this.noteOff(p);
    this.recording = false;
    clearInterval(this.clicker); this.clicker = null;
    this.el.record.classList.remove("on"); this.el.record.textContent = "Record";
    this.onTake(this.take());
  }

  // The recording from its first note on (on the metronome: from the beat it fell in), sorted, in
  // whole milliseconds.
  take() {
    if (!this.notes.length) return [];
    const first = Math.min(...this.notes.map((n) => n[0]));
    const beat = 60 / this.tempo();
    const from = this.el.metronome.checked ? Math.floor(first / beat) * beat : first;
    const ms = (t) => Math.round((t - from) * 1000) / 1000;
    return this.notes.map(([s, e, p, v]) => [ms(s), ms(e), p, v]).sort((a, b) => a[0] - b[0]);
  }

  tempo() { return Math.max(30, Math.min(300, Number(this.el.tempo.value) || 100)); }

  context() {
    if (!this.audio) this.audio = new AudioContext();
    if (this.audio.state === "suspended") this.audio.resume().catch(() => {});
    return this.audio;
  }

  // A soft tone while a key is held: returns the function that releases it.
  tone(pitch, velocity) {
    const ac = this.context(), osc = ac.createOscillator(), gain = ac.createGain();
    osc.type = "triangle";
    osc.frequency.value = 440 * 2 ** ((pitch - 69) / 12);
    gain.gain.setValueAtTime(0, ac.currentTime);
    gain.gain.linearRampToValueAtTime(0.25 * velocity / 127, ac.currentTime + 0.01);
    osc.connect(gain).connect(ac.destination);
    osc.start();
    return () => {
      gain.gain.cancelScheduledValues(ac.currentTime);
      gain.gain.setTargetAtTime(0, ac.currentTime, 0.04);
      osc.stop(ac.currentTime + 0.3);
    };
  }

  click(beat) {   // a metronome click, higher on the bar's first beat
    const ac = this.context(), osc = ac.createOscillator(), gain = ac.createGain();
    osc.frequency.value = beat % 4 === 0 ? 1760 : 1320;
    gain.gain.setValueAtTime(0.3, ac.currentTime);
    gain.gain.exponentialRampToValueAtTime(0.001, ac.currentTime + 0.05);
    osc.connect(gain).connect(ac.destination);
    osc.start(); osc.stop(ac.currentTime + 0.06);
    this.el.metronome.dataset.beats = String(beat + 1);
  }
}
