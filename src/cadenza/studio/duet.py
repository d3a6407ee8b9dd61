"""The studio's Duet mode: the duet engine (`cadenza.live`) behind a WebSocket.

The page sends what is played, ``{"type": "on" | "off", "pitch": p, "velocity": v}``, as it is
played; the server timestamps each message as it arrives, feeds the engine, and sends the model's
notes back the moment the engine's scheduler plays them (the same messages), so the page sounds
them and draws them. ``{"type": "ready"}`` says the model is loaded and listening; on closing, every
note the model started is ended. One duet at a time: a second is closed with 1013 (try again later).
The socket obeys the Host and Origin checks of `guard` like every write.
"""

from __future__ import annotations

import asyncio
import threading

import mido
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from starlette.concurrency import run_in_threadpool

from cadenza.live.config import DuetConfig
from cadenza.live.engine import Duet
from cadenza.settings import SettingError, validate
from cadenza.studio.registry import Registry, UnknownModel

BUSY, BAD = 1013, 1008  # WebSocket close codes: try again later; a policy violation (bad settings)


class SocketOutput:
    """A MIDI output port whose messages go to a WebSocket, sent from the event loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.queue = loop, asyncio.Queue()

    def send(self, message) -> None:
        if message.type in ("note_on", "note_off"):
            kind = "on" if message.type == "note_on" and message.velocity else "off"
            item = {"type": kind, "pitch": message.note, "velocity": message.velocity}
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    async def forward(self, ws: WebSocket) -> None:
        while True:
            await ws.send_json(await self.queue.get())


def duet_routes(app: FastAPI, registry: Registry) -> None:
    playing = threading.Semaphore(1)

    @app.websocket("/api/duet")
    async def duet_socket(ws: WebSocket, model: str = "styles", style: str | None = None, reply: float = 4.0,
                          wait: float = 0.4, temperature: float = 1.0) -> None:
        if not playing.acquire(blocking=False):
            await ws.close(code=BUSY, reason="a duet is playing: try again when it ends")
            return
        engine = thread = sender = None
        try:
            try:
                cfg = validate(DuetConfig(style=style, reply=reply, wait=wait, temperature=temperature))
                entry = registry.get(model)
                if style is not None and style not in entry.styles:
                    raise SettingError("style", f"{model} has no style {style!r}")
            except (SettingError, UnknownModel) as e:
                await ws.close(code=BAD, reason=str(e)[:120])
                return
            await ws.accept()
            output = SocketOutput(asyncio.get_running_loop())
            checkpoint = await run_in_threadpool(registry.load, model)
            engine = await run_in_threadpool(Duet, checkpoint, output, cfg)
            thread = threading.Thread(target=engine.run, name="studio-duet", daemon=True)
            thread.start()
            sender = asyncio.create_task(output.forward(ws))
            await ws.send_json({"type": "ready"})
            while True:
                played = await ws.receive_json()
                kind = "note_on" if played.get("type") == "on" else "note_off"
                pitch, velocity = int(played.get("pitch", 60)), int(played.get("velocity", 90))
                engine.feed(mido.Message(kind, note=min(max(pitch, 0), 127), velocity=min(max(velocity, 0), 127)))
        except (WebSocketDisconnect, RuntimeError, ValueError):
            pass
        finally:
            if engine is not None:
                engine.stop.set()  # the engine's run ends: every note it started ends, all-notes-off
                if thread is not None:
                    await run_in_threadpool(thread.join, 10)
            if sender is not None:
                sender.cancel()
            playing.release()
