"""How one `Origin` becomes a path of graph steps: scopes, Python functions, site, op chain.

Ranges are normalised (``layer.17`` -> ``layer.*``) so a 78-layer model draws one scope; Python
frames lose their plumbing (``_call_impl``, decorators' wrappers) and borrow the class name of the
``nn.Module: Name_0`` frame above them, so ``forward`` reads ``LlamaAttention.forward``.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass, replace

from tracer.join.frames import BUILTIN_FILE, MODULE_FILE, is_library_file, same_file
from tracer.model import Frame, Origin
from tracer.model.ranges import FUNCTION_PREFIX, SITE_PREFIX

SCOPE, FUNCTION, SITE, OPS = "scope", "function", "site", "ops"

# A number standing alone in a range name (``layer.17``, ``decode_step_3``, ``block[2]``), not one
# glued to letters (``fp8``, ``sm90``), is an index: the same scope repeated.
_INDEX = re.compile(r"(?<![A-Za-z0-9])\d+(?![A-Za-z0-9])")
_BUILTIN_CALL = re.compile(r"^(?:method|function) (?P<name>[\w.]+)")
_INSTANCE_SUFFIX = re.compile(r"_\d+$")  # ``nn.Module: LlamaDecoderLayer_0``
# Frames that only forward a call: they add depth to every path and say nothing about the model.
_PLUMBING_FUNCTIONS = frozenset(
    {"_call_impl", "_wrapped_call_impl", "decorate_context", "wrapper", "wrapped", "inner", "_fn"}
)


@dataclass(frozen=True)
class Step:
    """One step of an origin's path: what kind of node, the key that merges equal steps, its label."""

    kind: str
    key: str
    label: str
    detail: str = ""  # longer text (full path, all merged names) for tooltips and reports
    raw: str = ""  # the un-normalised name (a scope's ``layer.17``), counted to say "x78"
    where: str = ""  # a function's ``file.py:line``


def normalise_range(name: str) -> str:
    return _INDEX.sub("*", name)


def scope_steps(origin: Origin) -> list[Step]:
    steps = []
    for name in origin.ranges:
        if name.startswith(SITE_PREFIX):  # the site node says the same, with the source text
            continue
        if name.startswith(FUNCTION_PREFIX):
            label = name[len(FUNCTION_PREFIX) :]
            steps.append(Step(SCOPE, name, label, detail=name, raw=name))
            continue
        normal = normalise_range(name)
        steps.append(Step(SCOPE, normal, normal, detail=normal, raw=name))
    if origin.replay and not origin.frames and not origin.ops:
        steps.append(
            Step(SCOPE, "<cuda graph replay>", "CUDA graph replay", detail="replayed from a CUDA graph")
        )
    return steps


def _is_builtin(frame: Frame) -> bool:
    # also ``<string>``/``<frozen ...>`` frames: code without a file says nothing a reader can open
    return frame.file == BUILTIN_FILE or frame.file.startswith("<")


def _module_class(frame: Frame) -> str | None:
    """The class of an ``nn.Module: Name_0`` marker frame, else None."""
    if frame.file != MODULE_FILE:
        return None
    return _INSTANCE_SUFFIX.sub("", frame.function)


def function_name(frame: Frame, owner: str | None = None) -> str:
    """``LlamaAttention.forward`` when an ``nn.Module: LlamaAttention_0`` frame called it, else the name;
    a builtin reads ``replay()`` rather than ``method replay of pybind11_builtins.<long> object``."""
    if _is_builtin(frame):
        builtin = _BUILTIN_CALL.match(frame.function)
        return f"{builtin['name']}()" if builtin else frame.function
    return f"{owner}.{frame.function}" if owner and "." not in frame.function else frame.function


def function_where(frame: Frame) -> str:
    """``modeling_llama.py:243`` (the def line), or just the file."""
    if _is_builtin(frame):
        return ""
    where = posixpath.basename(frame.file)
    return f"{where}:{frame.def_line}" if frame.def_line is not None else where


def function_steps(origin: Origin, frames: tuple[Frame, ...] | None = None) -> list[Step]:
    """The origin's frames, outermost first, without plumbing and without the builtin call itself
    (the site or op chain below names it)."""
    frames = origin.frames if frames is None else frames
    steps: list[Step] = []
    owner: str | None = None
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        module = _module_class(frame)
        if module is not None:
            owner = module
            continue
        if _is_builtin(frame) and (index != last or origin.file is not None):
            continue  # a builtin is the call itself: the site (or the op chain) names it
        if index != last and (
            frame.function in _PLUMBING_FUNCTIONS
            or (frame.function == "__call__" and _next_is_module(frames, index + 1))
        ):
            continue
        name = function_name(frame, owner if frame.function == "forward" else None)
        # Keyed without the def line: frames already running when profiling began carry their
        # executing line instead, and an edit above a function moves it; neither makes it another.
        key = f"{frame.file}: {name}"
        steps.append(Step(FUNCTION, key, name, detail=frame.label, where=function_where(frame)))
        owner = None
    return steps


def _next_is_module(frames: tuple[Frame, ...], start: int) -> bool:
    for frame in frames[start:]:
        if _module_class(frame) is not None:
            return True
        if frame.function not in _PLUMBING_FUNCTIONS:
            return False
    return False


def site_step(origin: Origin) -> Step | None:
    """The source line; an origin with a file but no line has none (its frames name the file)."""
    if origin.file is None or origin.line is None:
        return None
    # the file's directory too: ``glm5_kv_cast/model.py:209`` says more than ``model.py:209``
    short = "/".join(origin.file.replace("\\", "/").split("/")[-2:])
    return Step(SITE, origin.key, f"{short}:{origin.line}", detail=origin.location)


def ops_step(origin: Origin) -> Step | None:
    if not origin.ops:
        return None
    chain = " > ".join(origin.ops)
    return Step(OPS, chain, chain, detail=chain)


def frames_to_site(origin: Origin) -> tuple[Frame, ...]:
    """The frames down to the one executing the origin's line: deeper frames are the library code
    that line called (``Linear.forward``), which the site's own text already names."""
    if origin.file is None or origin.line is None:
        return origin.frames
    for index in range(len(origin.frames) - 1, -1, -1):
        frame = origin.frames[index]
        if (
            frame.def_line is not None
            and frame.def_line <= origin.line
            and same_file(frame.file, origin.file)
        ):
            return origin.frames[: index + 1]
    return origin.frames


def compiled_steps(origin: Origin) -> list[Step]:
    """A kernel of torch.compile'd code: its frames down to the compiled function, then the Inductor
    graph that launched it (the user lines it fused hang off its kernel node, `tracer.graph.build`)."""
    region = origin.compiled
    assert region is not None
    frames = origin.frames
    generated = next((i for i, f in enumerate(frames) if f.file == region.graph), len(frames))
    last = max(
        (i for i in range(generated) if not _is_builtin(frames[i]) and _module_class(frames[i]) is None
         and not is_library_file(frames[i].file)),
        default=-1,
    )  # fmt: skip
    steps = scope_steps(origin) + function_steps(origin, frames[: last + 1])
    module = posixpath.basename(region.graph.replace("\\", "/"))
    dynamo = f" {region.compile_id}" if region.compile_id else ""
    label = f"Inductor graph{dynamo}"
    detail = (
        f"{region.graph}\nfused lines found by {region.provenance}" if region.provenance else region.graph
    )
    steps.append(Step(SCOPE, f"inductor: {region.graph}", f"{label} ({module[:12]}…)", detail=detail))
    ops = ops_step(origin)
    if ops is not None:
        steps.append(ops)
    return _elided(steps)


def origin_steps(origin: Origin, *, site_by_text: bool = False) -> list[Step]:
    """The full path of an origin below the root, outermost first (the kernel is added by the caller).

    `site_by_text` keys a site by its file and source text instead of its line, so the same line
    matches across two versions of a file (a diff) even when edits above it moved it.
    """
    if origin.compiled is not None:
        return compiled_steps(origin)
    steps = scope_steps(origin) + function_steps(origin, frames_to_site(origin))
    site = site_step(origin)
    if site is not None:
        if site_by_text and origin.source:
            site = replace(site, key=f"{origin.file}: {' '.join(origin.source.split())}")
        steps.append(site)
    ops = ops_step(origin)
    if ops is not None:
        steps.append(ops)
    return _elided(steps)


MAX_PATH_STEPS = 64  # ranges and frames nested deeper are drawn as one "... N more" node


def _elided(steps: list[Step]) -> list[Step]:
    """`steps` with the middle of an over-deep path (ranges nested thousands deep) as one step, so the
    tree, the drawing and their cost stay bounded; equal elisions still merge (keyed by what they hide)."""
    if len(steps) <= MAX_PATH_STEPS:
        return steps
    head, tail = 8, MAX_PATH_STEPS - 9
    hidden = steps[head : len(steps) - tail]
    digest = hashlib.blake2b(
        "\0".join(f"{s.kind}:{s.key}" for s in hidden).encode("utf-8", "surrogatepass"), digest_size=6
    )
    label = f"… {len(hidden)} more nested ranges and frames"
    return [*steps[:head], Step(SCOPE, f"<elided {digest.hexdigest()}>", label, detail=label), *steps[-tail:]]
