"""The versioned JSON envelope spoken between the workstation and the agent.

Request:  {"v": 1, "verb": "facts", "args": {...}, "host": "<inventory name>",
           "sim": null | {"template": "<name>", "state_dir": "<dir or null>",
                          "nics": [<hw.nics entry>, ...] (optional: the template's NICs
                          replaced, inventory var sim_nics)}}
Response: {"v": 1, "ok": true,  "data": ..., "error": null}
          {"v": 1, "ok": false, "data": null, "error": {"type": "...", "message": "..."}}
"""

from __future__ import annotations

from typing import Any

PROTOCOL_VERSION = 1


class AgentError(Exception):
    """An error the agent reports in its envelope rather than as a traceback."""

    type_name = "AgentError"

    def __init__(self, message: str, type_name: str | None = None) -> None:
        super().__init__(message)
        if type_name:
            self.type_name = type_name


def ok(data: Any) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "ok": True, "data": data, "error": None}


def failure(type_name: str, message: str) -> dict[str, Any]:
    return {
        "v": PROTOCOL_VERSION,
        "ok": False,
        "data": None,
        "error": {"type": type_name, "message": message},
    }


def check_request(request: Any) -> dict[str, Any]:
    """Validate the request's shape; raise AgentError naming what is wrong."""
    if not isinstance(request, dict):
        raise AgentError("request must be a JSON object", "BadRequest")
    version = request.get("v")
    if version != PROTOCOL_VERSION:
        raise AgentError(
            f"protocol version {version!r} not understood (this agent speaks {PROTOCOL_VERSION})",
            "BadRequest",
        )
    if not isinstance(request.get("verb"), str):
        raise AgentError("request has no 'verb'", "BadRequest")
    return request
