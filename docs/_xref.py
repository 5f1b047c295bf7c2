"""Resolve references written against private module paths to the documented public names.

A docstring may write ``:func:`bnn_ppl.inference.fitting.fit``` or, inside a module,
``:class:`Posterior```; the API reference documents each object once, under its public import
path (``bnn_ppl.inference.fit``, ``bnn_ppl.Posterior``). This extension finds the object a
reference names (by importing it) and links to the page that documents the same object. A
reference to an object that exists but has no public page (a private module or helper) renders
as code, unlinked, and is counted in ``docs/_build/private_references.txt``; a reference to
nothing importable stays a warning, which ``-W`` turns into a failed build.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from sphinx.util.nodes import make_refnode

_PUBLIC: dict[int, str] = {}
_PRIVATE: set[str] = set()


class _Annotated:
    """A class attribute that is declared (annotated) but has no value on the class."""

    def __init__(self, name: str) -> None:
        self.name = name


def _import(dotted: str):
    """The object named by a dotted path, or raise ``LookupError``."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # noqa: BLE001 - any failure means "not this split"
            continue
        try:
            for j, attr in enumerate(parts[i:], start=i):
                if not hasattr(obj, attr) and j == len(parts) - 1:
                    if attr in getattr(obj, "__annotations__", {}):
                        return _Annotated(dotted)  # declared, set by subclasses
                obj = getattr(obj, attr)
        except AttributeError:
            continue
        return obj
    raise LookupError(dotted)


def _public_map(env) -> dict[int, str]:
    if not _PUBLIC:
        for name, entry in env.get_domain("py").objects.items():
            if entry.aliased:
                continue
            try:
                _PUBLIC.setdefault(id(_import(name)), name)
            except LookupError:
                pass
    return _PUBLIC


def _candidates(target: str, module: str | None, klass: str | None) -> list[str]:
    target = target.lstrip(".~")
    out = []
    if module:
        if klass:
            out.append(f"{module}.{klass}.{target}")
        out.append(f"{module}.{target}")
        package = module.rsplit(".", 1)[0]
        out.append(f"{package}.{target}")
    out += [target, f"bnn_ppl.{target}", f"bnn_ppl.inference.{target}"]
    return out


def _docstring_owner(node) -> list[str]:
    """Dotted prefixes of the object whose docstring holds ``node``, longest first."""
    source = node.source or ""
    if "docstring of " not in source:
        return []
    owner = source.split("docstring of ", 1)[1].split(":", 1)[0].strip()
    parts = owner.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def missing_reference(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = "".join(node.get("reftarget", "").split())
    public = _public_map(env)
    py_objects = env.get_domain("py").objects
    owners = [f"{prefix}.{target}" for prefix in _docstring_owner(node)]
    for candidate in owners + _candidates(target, node.get("py:module"), node.get("py:class")):
        if not (
            candidate.startswith("bnn_ppl") or candidate.split(".")[0] in {"models", "inference"}
        ):
            continue
        try:
            obj = _import(candidate)
        except LookupError:
            continue
        # the object itself, or the nearest documented parent plus the remaining attributes
        parts = candidate.split(".")
        for i in range(len(parts), 0, -1):
            try:
                head = _import(".".join(parts[:i]))
            except LookupError:
                continue
            name = public.get(id(head))
            if name is None:
                continue
            full = ".".join([name, *parts[i:]])
            if full in py_objects:
                entry = py_objects[full]
                return make_refnode(
                    app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, full
                )
        del obj
        _PRIVATE.add(candidate)
        return contnode  # exists, but has no public page: code, unlinked
    # a short name: the one documented object of that name, else a private one of any module
    short = target.lstrip(".~")
    matches = [name for name in py_objects if name.endswith("." + short)]
    if len(matches) == 1 and "." not in short:
        entry = py_objects[matches[0]]
        return make_refnode(
            app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, matches[0]
        )
    head, _, rest = short.partition(".")
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("bnn_ppl") or module is None:
            continue
        owner = getattr(module, head, None)
        if owner is None and head in getattr(module, "__annotations__", {}):
            owner = module
        if owner is not None and (
            not rest or hasattr(owner, rest) or rest in getattr(owner, "__annotations__", {})
        ):
            _PRIVATE.add(f"{name}.{short}")
            return contnode
    return None


def build_finished(app, exception):
    if exception is None:
        out = Path(app.outdir).parent / "private_references.txt"
        out.write_text("".join(f"{name}\n" for name in sorted(_PRIVATE)))


def _prose_safe_napoleon() -> None:
    """An attribute docstring whose first line is a sentence with a colon is not "type: text"."""
    from sphinx.ext.napoleon.docstring import GoogleDocstring

    original = GoogleDocstring._consume_inline_attribute

    def consume(self):
        type_, descs = original(self)
        if len(type_.split()) >= 3 and not any(c in type_ for c in "[|`"):
            return "", [f"{type_}: {descs[0]}" if descs else type_, *descs[1:]]
        return type_, descs

    GoogleDocstring._consume_inline_attribute = consume


def setup(app):
    _prose_safe_napoleon()
    app.connect("missing-reference", missing_reference)
    app.connect("build-finished", build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
