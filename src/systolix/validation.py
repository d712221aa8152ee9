"""Turn pydantic's validation errors into one line that names the file and the field."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(source: str, error: ValidationError, prefix: str = "") -> str:
    """``SOURCE: field 'a.b': what is wrong (got VALUE)``: the first error only, on one line."""
    err = error.errors()[0]
    loc = ([prefix] if prefix else []) + [str(p) for p in err["loc"]]
    field = ".".join(loc) or "(root)"
    kind = err["type"]
    if kind == "missing":
        return f"{source}: missing key {field!r}"
    if kind == "extra_forbidden":
        return f"{source}: unknown key {field!r}"
    msg = " ".join(str(err["msg"]).split())
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
    if "input" in err and not isinstance(err["input"], (dict, list)):
        shown = repr(err["input"])
        if len(shown) > 60:
            shown = shown[:57] + "..."
        msg = f"{msg} (got {shown})"
    return f"{source}: field {field!r}: {msg}"
