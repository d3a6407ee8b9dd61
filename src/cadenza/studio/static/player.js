// Listening: the server renders each variation to a WAV; the page plays it with an <audio> element
// and moves the roll's cursor with it.

const fmt = (t) => `${Math.floor(t / 60)}:${(t % 60).toFixed(1).padStart(4, "0")}`;

export class Player {
  // `audio`: the <audio> element; `play` and `clock`: its button and time; `redraw()`: draws the roll
  constructor(audio, play, clock, redraw) {
    Object.assign(this, { audio, play, clock, redraw });
    audio.onended = () => this.tick();
    audio.onpause = () => this.tick();
    play.onclick = () => this.toggle();
  }

  // The cursor's time while something is loaded and has played, else undefined (no cursor)
  get cursor() {
    const a = this.audio;
    return a.src && (a.currentTime > 0 || !a.paused) ? a.currentTime : undefined;
  }

  // Load `url`; with `keepPlace`, go on from the same time, playing if it was (A/B of variations).
  load(url, keepPlace = false) {
    const a = this.audio, at = a.currentTime, playing = !a.paused;
    a.pause();
    a.src = url;
    this.play.disabled = false;
    if (keepPlace && at > 0) {
      a.addEventListener("loadedmetadata", () => {
        a.currentTime = Math.min(at, a.duration || at);
        if (playing) this.start();
      }, { once: true });
    }
    this.tick();
  }

  clear() {
    const a = this.audio;
    a.pause(); a.removeAttribute("src"); a.load();
    this.play.disabled = true;
    this.clock.textContent = "0:00.0 / 0:00.0";
  }

  toggle() {
    if (this.audio.paused) this.start(); else this.audio.pause();
  }

  // Play from where it is; a browser that refuses (no user gesture yet) leaves it paused, quietly.
  start() {
    if (!this.audio.src) return;
    this.audio.play().then(() => this.tick(), () => this.tick());
  }

  stop() { if (!this.audio.paused) this.audio.pause(); }

  seek(t) {
    if (!this.audio.src) return;
    this.audio.currentTime = t;
    this.tick();
  }

  tick() {
    const a = this.audio;
    this.clock.textContent = `${fmt(a.currentTime)} / ${fmt(a.duration || 0)}`;
    this.play.innerHTML = a.paused ? "&#9654;" : "&#10074;&#10074;";
    this.redraw();
    if (!a.paused) requestAnimationFrame(() => this.tick());
  }
}
