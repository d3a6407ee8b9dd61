// Piano rolls on a canvas: notes given and new in two colours, a selected span, the play cursor.
// Notes are [start, end, pitch, velocity] in seconds; `opts.new` flags which are new (1) or given (0).

const LEFT = 36, RIGHT = 8;  // room for the octave labels, and a margin

export function drawRoll(canvas, notes, opts = {}) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const end = Math.max(opts.seconds || 1, ...notes.map((n) => n[1]));
  let lo = Math.min(...notes.map((n) => n[2]), 60) - 2, hi = Math.max(...notes.map((n) => n[2]), 60) + 2;
  if (hi - lo < 24) { const m = (lo + hi) >> 1; lo = m - 12; hi = m + 12; }
  const x = (t) => LEFT + (t / end) * (w - LEFT - RIGHT), rowH = (h - 16) / (hi - lo + 1);
  const y = (p) => 6 + (hi - p) * rowH;
  stripes(g, lo, hi, x, y, rowH, w, h, end);
  g.fillStyle = "rgba(200,210,235,0.22)";   // bar lines, where the music has a meter
  (opts.bars || []).forEach((t) => g.fillRect(x(t), 0, 1, h));
  if (opts.span) {   // the selected span, under the notes
    g.fillStyle = "rgba(111,211,193,0.16)";
    g.fillRect(x(opts.span[0]), 0, x(opts.span[1]) - x(opts.span[0]), h);
    g.fillStyle = "#6fd3c1";
    g.fillRect(x(opts.span[0]), 0, 1, h); g.fillRect(x(opts.span[1]) - 1, 0, 1, h);
  }
  const r = Math.min(3, rowH / 2);
  const paint = (n, isNew) => {
    const v = n[3] / 127;
    g.fillStyle = isNew ? `hsl(${42 - 30 * v}, ${70 + 25 * v}%, ${45 + 20 * v}%)` : "rgba(120,140,190,0.6)";
    const bx = x(n[0]), bw = Math.max(2, x(n[1]) - x(n[0])), by = y(n[2]) + 0.5, bh = Math.max(2, rowH - 1);
    g.beginPath(); g.roundRect(bx, by, bw, bh, r); g.fill();
  };
  const isNew = (i) => (opts.new ? opts.new[i] !== 0 : true);
  notes.forEach((n, i) => { if (!isNew(i)) paint(n, false); });   // given notes first, new ones on top
  notes.forEach((n, i) => { if (isNew(i)) paint(n, true); });
  if (opts.cut !== undefined) { g.fillStyle = "#6fd3c1"; g.fillRect(x(opts.cut) - 1, 0, 3, h); }
  if (opts.cursor !== undefined) { g.fillStyle = "#ffffff"; g.fillRect(x(opts.cursor), 0, 2, h); }
  canvas.dataset.notes = String(notes.filter((_, i) => isNew(i)).length);
  canvas.dataset.given = String(notes.length - Number(canvas.dataset.notes));
  canvas.dataset.cursor = opts.cursor === undefined ? "" : opts.cursor.toFixed(2);
  canvas.dataset.bars = String((opts.bars || []).length);
  // where the time axis lies (CSS pixels from the left: 0 s, and the end): a script can aim at a time
  Object.assign(canvas.dataset, { x0: String(LEFT), x1: String(w - RIGHT), end: String(end) });
  canvas._end = end;
}

function stripes(g, lo, hi, x, y, rowH, w, h, end) {
  for (let p = lo; p <= hi; p++) {            // keyboard stripes, C labelled
    const black = [1, 3, 6, 8, 10].includes(p % 12);
    g.fillStyle = black ? "#0e1018" : "#12151f";
    g.fillRect(LEFT, y(p), w - LEFT - RIGHT, rowH);
    if (p % 12 === 0) {
      g.fillStyle = "#8b91a7"; g.font = "10px system-ui"; g.fillText(`C${p / 12 - 1}`, 4, y(p) + rowH - 1);
      g.fillStyle = "#232838"; g.fillRect(LEFT, y(p) + rowH - 1, w - LEFT - RIGHT, 1);
    }
  }
  for (let s = 0; s <= end; s += end > 40 ? 10 : end > 16 ? 5 : 1) {   // seconds grid
    g.fillStyle = "#1f2433"; g.fillRect(x(s), 0, 1, h);
    g.fillStyle = "#5d647a"; g.font = "10px system-ui"; g.fillText(`${s}s`, x(s) + 2, h - 3);
  }
}

// The time (seconds) under a pointer event, on a roll drawn by drawRoll; clamped to the roll.
export function timeAt(canvas, ev) {
  const rect = canvas.getBoundingClientRect();
  const t = ((ev.clientX - rect.left - LEFT) / (rect.width - LEFT - RIGHT)) * (canvas._end || 1);
  return Math.max(0, Math.min(canvas._end || 1, t));
}

// Drag across a roll's time axis to select a span: onSpan([start, end]) while dragging and at the
// end; a click that does not drag is onClick(time). `enabled()` says whether the roll is editable.
export function selectable(canvas, { enabled, onSpan, onClick }) {
  let from = null, moved = false;
  canvas.addEventListener("pointerdown", (ev) => {
    if (!enabled()) return;
    from = timeAt(canvas, ev); moved = false;
    canvas.setPointerCapture(ev.pointerId);
  });
  canvas.addEventListener("pointermove", (ev) => {
    if (from === null) return;
    const t = timeAt(canvas, ev);
    if (Math.abs(t - from) > 0.02 * (canvas._end || 1)) moved = true;
    if (moved) onSpan([Math.min(from, t), Math.max(from, t)], false);
  });
  canvas.addEventListener("pointerup", (ev) => {
    if (from === null) return;
    const t = timeAt(canvas, ev);
    if (moved) onSpan([Math.min(from, t), Math.max(from, t)], true); else onClick(t);
    from = null;
  });
}
