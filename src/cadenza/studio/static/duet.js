// Duet mode: play a phrase (a MIDI keyboard, the on-screen keys or the computer's) and pause; the model
// answers, its notes sounding through the page's synthesizer and drawn on the roll as they come. Play
// again to cut the answer short. The engine runs on the server (the same one as `cadenza duet`),
// reached over a WebSocket: what is played goes there as it is played, the answer comes back note by
// note at the moment the engine plays it.

const $ = (id) => document.getElementById(id);
const WINDOW = 16;   // seconds of the duet the roll shows

export class DuetPanel {
  // recorder: the Recorder whose keys and MIDI input play, and whose tones sound; stage: where the
  // duet is drawn; model(), style(): what to play with; say(text): the status line
  constructor({ recorder, stage, model, style, say }) {
    Object.assign(this, { recorder, stage, model, style, say });
    this.ws = null; this.notes = []; this.open = new Map(); this.tones = new Map();
    window.studio.duet = { answers: 0, heard: 0, state: "off" };
    $("duet").onclick = () => (this.ws ? this.stop() : this.start());
    recorder.onPlay = (kind, pitch, velocity) => this.played(kind, pitch, velocity);
  }

  now() { return performance.now() / 1000 - this.t0; }

  start() {
    const q = new URLSearchParams({ model: this.model() });
    if (this.style()) q.set("style", this.style());
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    this.ws = new WebSocket(`${proto}//${location.host}/api/duet?${q}`);
    this.t0 = performance.now() / 1000; this.notes = []; this.open.clear();
    this.mark("connecting"); $("duet").classList.add("on"); $("duet").textContent = "Stop duet";
    this.say("duet: loading the model…");
    this.ws.onmessage = (e) => this.heard(JSON.parse(e.data));
    this.ws.onclose = (e) => this.closed(e.reason);
  }

  stop() { if (this.ws) this.ws.close(); }

  closed(reason) {
    for (const stop of this.tones.values()) stop();
    this.tones.clear(); this.ws = null;
    this.mark("off"); $("duet").classList.remove("on"); $("duet").textContent = "Duet";
    this.say(reason ? `duet: ${reason}` : "duet over");
  }

  mark(state) { window.studio.duet.state = state; $("duet").dataset.state = state; }

  // A note the player played: to the engine, and onto the roll.
  played(kind, pitch, velocity) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    this.ws.send(JSON.stringify({ type: kind, pitch, velocity }));
    this.track(kind, pitch, velocity, 0);
  }

  // A message of the engine: ready, or a note of the answer to sound now.
  heard(m) {
    if (m.type === "ready") { this.mark("listening"); this.say("duet: play a phrase, then pause"); return; }
    const key = `m${m.pitch}`;
    if (m.type === "on") {
      if (this.tones.has(key)) this.tones.get(key)();
      this.tones.set(key, this.recorder.tone(m.pitch, m.velocity));
      window.studio.duet.heard += 1;
      if (!this.answering) { this.answering = true; window.studio.duet.answers += 1; }
    } else {
      this.tones.get(key)?.(); this.tones.delete(key);
      if (!this.tones.size) this.answering = false;
    }
    this.track(m.type, m.pitch, m.velocity, 1);
  }

  // The roll: the last WINDOW seconds, the player's notes as given ones, the model's as new.
  track(kind, pitch, velocity, model) {
    const t = this.now(), key = `${model}:${pitch}`;
    if (kind === "on") this.open.set(key, this.notes.push([t, t + 0.05, pitch, velocity, model]) - 1);
    else if (this.open.has(key)) { this.notes[this.open.get(key)][1] = Math.max(t, this.notes[this.open.get(key)][0] + 0.05); this.open.delete(key); }
    const from = Math.max(0, t - WINDOW), shown = this.notes.filter((n) => n[1] >= from);
    this.stage.show({ notes: shown.map(([s, e, p, v]) => [s - from, e - from, p, v]), seconds: WINDOW, name: "duet",
                      new: shown.map((n) => n[4]) });
  }
}
