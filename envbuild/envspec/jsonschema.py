"""JSON Schema of the spec, for editors (yaml-language-server) and other tools."""

from __future__ import annotations

from typing import Any

from envbuild.envspec.specmodel import Spec

_BASE_STRING_PATTERN = r"^(debootstrap:[a-z][a-z0-9-]*|docker://.+|oras://.+|localimage:.+|/.+|\.{1,2}/.+|.+\.sif)$"


def spec_json_schema() -> dict[str, Any]:
    schema = Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "envbuild environment spec (version 1)"
    # The model stores a normalised {kind, ref}; users write a string or a one-key mapping.
    base_object = {
        "type": "object",
        "properties": {
            "debootstrap": {"type": "string", "description": "Debian suite, e.g. bookworm"},
            "docker": {"type": "string", "description": "docker://<image>"},
            "oras": {"type": "string", "description": "oras://<image>"},
            "localimage": {"type": "string", "description": "path of a .sif or sandbox directory"},
            "include": {"type": "array", "items": {"type": "string"},
                        "description": "debootstrap only: extra Debian packages"},
            "mirror": {"type": "string", "description": "debootstrap only: Debian mirror URL"},
        },
        "additionalProperties": False,
        "oneOf": [{"required": [k]} for k in ("debootstrap", "docker", "oras", "localimage")],
    }
    schema["properties"]["base"] = {
        "description": "where the root filesystem comes from",
        "anyOf": [{"type": "string", "pattern": _BASE_STRING_PATTERN}, base_object],
    }
    schema.get("$defs", {}).pop("BaseImage", None)
    return schema
