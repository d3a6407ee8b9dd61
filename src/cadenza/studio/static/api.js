// The studio's JSON API as the page uses it: requests, errors as one line, a job's event stream.

export async function api(path, options = {}) {
  const r = await fetch(path, options);
  const body = r.headers.get("content-type")?.includes("json") ? await r.json() : await r.text();
  if (!r.ok) {
    const d = body && body.detail;  // a string, or FastAPI's list of {loc, msg}
    const msg = Array.isArray(d) ? d.map((x) => x.msg).join("; ") : (d || r.statusText);
    throw new Error(msg);
  }
  return body;
}

export const post = (path, body) =>
  api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

export async function uploadFile(file) {
  const form = new FormData();
  form.append("file", file);
  return api("/api/uploads", { method: "POST", body: form });
}

// Follow a job's server-sent events: on.started(), on.notes(event), on.done(result), on.cancelled(),
// on.failed(error). Returns the EventSource (close it to stop listening).
export function follow(jobId, on) {
  const source = new EventSource(`/api/jobs/${jobId}/events`);
  const data = (ev) => JSON.parse(ev.data);
  source.addEventListener("started", () => on.started && on.started());
  source.addEventListener("notes", (ev) => on.notes(data(ev)));
  source.addEventListener("done", (ev) => { source.close(); on.done(data(ev).result); });
  source.addEventListener("cancelled", () => { source.close(); on.cancelled(); });
  source.addEventListener("failed", (ev) => { source.close(); on.failed(data(ev).error); });
  return source;
}

// A finished variation's notes and which of them are new (1) or given (0).
export async function variationNotes(jobId, index) {
  const [notes, flags] = await Promise.all([api(`/api/jobs/${jobId}/${index}/notes`),
                                            api(`/api/jobs/${jobId}/${index}/new`)]);
  return { notes, new: flags };
}
