"""The studio API's contract: what each operation answers with, success and error alike, is in its
OpenAPI entry with the body it carries, so that a client generated from /openapi.json can trust it.

Two bodies, as FastAPI makes them: `Problem` ({"detail": "one line"}) for 400, 404, 413 and 429,
and FastAPI's validation body ({"detail": [{"loc", "msg", "type"}]}) for 422, whose `loc` names the
field. A 405 lists in `Allow` every method the path answers to, not only the first route's.
"""

from __future__ import annotations

from typing import Any, Literal, NoReturn

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match


class Problem(BaseModel):
    """An error the server explains in one line."""

    detail: str


WHY = {
    400: "the body could not be read: not JSON, or an upload that is not a MIDI file with notes",
    403: "the Host header does not name this server, or a page of another origin sent a write (`studio.guard`)",
    404: "an id (model, job, upload, variation) the server did not hand out",
    413: "the body (an upload, or JSON) is larger than the server's limit",
    422: "a field is missing, of the wrong type or out of range: `loc` names it, `msg` says why",
    429: "too many jobs are waiting; try again after Retry-After seconds",
}


def errors(*codes: int) -> dict[int | str, dict]:
    """The `responses` entry of a route that may answer with `codes` (422 has FastAPI's body)."""
    out: dict[int | str, dict] = {}
    for code in codes:
        if code == 422:
            out[code] = {"description": WHY[code], "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/HTTPValidationError"}}}}
        else:
            out[code] = {"model": Problem, "description": WHY[code]}
        if code == 429:
            out[code]["headers"] = {"Retry-After": {"description": "seconds to wait", "required": True,
                                                    "schema": {"type": "integer"}}}
    return out


def refuse(field: tuple[str | int, ...], msg: str) -> NoReturn:
    """Raise a 422 whose body is FastAPI's: one entry, `field` its location (("body", "notes", 3,
    "pitch")), `msg` why."""
    raise HTTPException(422, [{"loc": list(field), "msg": msg, "type": "value_error"}])


def install(app: FastAPI) -> None:
    """Answer a 405 with every method of its path in `Allow`, a 422 with the field and the reason
    (whatever the input was), and put the guard's 403 in every operation's schema (and the body
    limit's 413 in every one with a body)."""
    app.add_exception_handler(StarletteHTTPException, _with_every_method)
    app.add_exception_handler(RequestValidationError, _invalid)
    schema = app.openapi

    def with_guards() -> dict[str, Any]:
        if app.openapi_schema is None:
            for operations in schema()["paths"].values():
                for op in operations.values():
                    codes = (403, 413) if "requestBody" in op else (403,)  # the guard's, and BodyLimit's
                    for code in codes:
                        op["responses"].setdefault(str(code), {"description": WHY[code], "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}})
        return app.openapi_schema

    app.openapi = with_guards


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 without the `input` it echoes: a NaN or an Infinity sent in a field cannot be
    written as JSON (a 500 instead of the 422), and a large input would come back whole."""
    return JSONResponse(status_code=422, content={"detail": [
        {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]})


async def _with_every_method(request: Request, exc: StarletteHTTPException):
    """Starlette answers 405 from the first route whose path matched, with only its methods: a path
    with a GET route and a DELETE route said `Allow: GET`."""
    if exc.status_code == 405:
        allowed: set[str] = set()
        for route in request.app.router.routes:
            match, _ = route.matches({**request.scope, "method": "\0"})  # a method no route has: paths only
            if match == Match.PARTIAL:
                allowed |= set(getattr(route, "methods", None) or ())
        if allowed:
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(sorted(allowed))}
    return await http_exception_handler(request, exc)


# ---- what the operations answer with ------------------------------------------------------------
JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]


class JobOut(BaseModel):
    """A job: its status, and when done its result (files per variation under /api/jobs/{id}/{k}/)."""

    id: str
    model: str
    settings: dict[str, Any]
    status: JobStatus
    created: float
    started: float | None
    finished: float | None
    error: str | None
    result: dict[str, Any] | None
    events: int = Field(description="events so far: GET /api/jobs/{id}/events?after=N resumes after N")


class UploadOut(BaseModel):
    id: str = Field(description="name it as a primer, a piece to infill or a melody to accompany")
    name: str
    seconds: float
    notes: list[list[float]] = Field(description="[start, end, pitch, velocity] per note, in onset order")
    bars: list[float] = Field(default=[], description="where each bar starts, seconds, then the line closing the "
                              "last (from the file's time signatures and tempo; a span snaps to them)")


class ModelOut(BaseModel):
    id: str
    name: str
    kind: Literal["shipped", "run"]
    styles: list[str]
    step: int
    valid_loss: float | None
    tasks: list[str] = Field(description="generate and continue; infill and accompany for a note-vocabulary model")


class SettingOut(BaseModel):
    name: str
    default: Any
    range: str
    doc: str


class Health(BaseModel):
    ok: bool
    running: int
    compiled_step: str = Field(description="off, building, ready, or eager: and why")
