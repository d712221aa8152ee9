"""Turn pydantic's validation errors into one line that names the file and the field."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(source: str, error: ValidationError) -> str:
    err = error.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(root)"
    kind = err["type"]
    if kind == "missing":
        return f"{source}: missing key {field!r}"
    if kind == "extra_forbidden":
        return f"{source}: unknown key {field!r}"
    msg = err["msg"]
    if "input" in err:
        shown = repr(err["input"])
        if len(shown) > 60:
            shown = shown[:57] + "..."
        msg = f"{msg} (got {shown})"
    return f"{source}: field {field!r}: {msg}"
