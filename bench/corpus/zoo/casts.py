"""The many spellings of a cast: keywords, `.type`, unbound and partial calls, getattr, a local
function, method chains over lines, two casts on one line, star-args, a casting property."""

from __future__ import annotations

import functools

import torch

from bench.corpus.zoo.registry import shape


def stage_inputs(
    x: torch.Tensor, mask: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.to(dtype=..., non_blocking=True)` beside other `.to` calls with positional arguments."""
    mask = mask.to(device)
    x = x.to(dtype=torch.bfloat16, non_blocking=True)
    positions = torch.arange(x.shape[-1], device=device).to(torch.float32)
    x = x * positions.to(x.dtype)
    return x.to(device=device, dtype=torch.float32, non_blocking=True), mask


@shape(
    "to_keywords_non_blocking",
    "`x.to(dtype=..., non_blocking=True)`, `.to(device=, dtype=)` among positional `.to` calls",
)
def build_to_keywords(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.float16)
    mask = torch.ones(4, 8, dtype=torch.bool, device=device)

    def step(i: int):
        return stage_inputs(x * (i + 1), mask, device)

    return step


def legacy_cast(x: torch.Tensor, half: bool) -> torch.Tensor:
    """`x.type(dtype)`, old code's cast, next to `.to` and `.float()`."""
    y = x.type(torch.float32)
    if half:
        y = y.type(torch.float16)
    z = y.to(torch.bfloat16) + x.float().to(torch.bfloat16)
    return z.type(torch.float32)


@shape("type_method", "`x.type(torch.float32)` (a cast without `.to`), some only on some steps")
def build_type_method(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return legacy_cast(x, half=bool(i % 2))

    return step


def unbound_casts(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`torch.Tensor.to(x, dtype)`: the method called unbound, between bound calls."""
    a = torch.Tensor.to(x, torch.float32)
    b = w.to(torch.float32)
    c = torch.Tensor.float(w)
    out = a @ b.t() + c.sum()
    return torch.Tensor.to(out, x.dtype)


@shape("unbound_to", "`torch.Tensor.to(x, dtype)` and `torch.Tensor.float(w)`: methods called unbound")
def build_unbound(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)
    w = torch.randn(6, 8, device=device, dtype=torch.float16)

    def step(i: int):
        return unbound_casts(x, w)

    return step


to_bf16 = functools.partial(torch.Tensor.to, dtype=torch.bfloat16)
to_fp32 = functools.partial(torch.Tensor.to, dtype=torch.float32)


def cast_through_partials(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """`functools.partial(torch.Tensor.to, dtype=...)(x)`: a cast with no bound method frame."""
    h = to_fp32(x)
    h = h * 2 + to_fp32(residual)
    down = functools.partial(torch.Tensor.to, dtype=x.dtype)
    return down(to_bf16(h))


@shape("partial_to", "`functools.partial(torch.Tensor.to, dtype=...)(x)`: module-level and local partials")
def build_partial(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.float16)
    residual = torch.randn(4, 8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return cast_through_partials(x, residual)

    return step


def dynamic_casts(x: torch.Tensor, names: list[str]) -> torch.Tensor:
    """`getattr(x, "to")(dtype)` and `getattr(x, name)()`: the method named by a string."""
    y = x.to(torch.float32)
    for name in names:
        y = getattr(y, name)()
    return y.to(x.dtype)


@shape("getattr_call", '`getattr(x, "to")(dtype)` and methods picked by name at run time')
def build_getattr(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)
    plans = [["half"], ["float", "double"], [], ["bfloat16", "float"]]

    def step(i: int):
        return dynamic_casts(x, plans[i % 4])

    return step


def apply_caster(x: torch.Tensor, upcast: bool) -> torch.Tensor:
    """A call through a local variable holding a function (a bound method or a lambda)."""
    cast = x.float if upcast else (lambda: x.to(torch.float16))
    y = cast()
    norm = torch.linalg.vector_norm
    scale = norm(y, dim=-1, keepdim=True)
    return (y / scale).to(torch.bfloat16)


@shape(
    "local_function_variable",
    "calls through a local holding a bound method, a lambda or torch.linalg function",
)
def build_local_function(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return apply_caster(x, upcast=bool(i % 2))

    return step


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Two same-name calls on one line, three on the next, then a `.to` pair on one line."""
    scores = q.float() @ k.float().transpose(-1, -2)
    bias = q.float().mean() + k.float().mean() + scores.float().mean()
    both = q.to(torch.float32).sum() * k.to(torch.float32).sum()
    return (scores + bias + both).to(q.dtype)


@shape("same_name_one_line", "`a.float() + b.float()`: several same-name casts on one line")
def build_same_name(device: torch.device):
    q = torch.randn(2, 4, 8, device=device, dtype=torch.bfloat16)
    k = torch.randn(2, 4, 8, device=device, dtype=torch.float16)

    def step(i: int):
        return attention_scores(q, k)

    return step


def chained(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Method chains split over lines: each call's line is the attribute's line (f_lineno)."""
    # fmt: off
    h = (
        x.to(torch.float32)
        .mul(weight.float())
        .add(1.0)
    )
    out = (
        h.softmax(dim=-1)
        .to(torch.bfloat16)
        .contiguous()
    )
    # fmt: on
    return torch.cat(
        [
            out,
            h.to(torch.bfloat16),
        ],
        dim=-1,
    )


@shape("method_chain_multiline", "method chains and call arguments split over several lines")
def build_chain(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.float16)
    weight = torch.randn(8, device=device, dtype=torch.bfloat16)

    def step(i: int):
        return chained(x, weight)

    return step


def combine(*tensors: torch.Tensor, dtype: torch.dtype = torch.float32, **options) -> torch.Tensor:
    """Star-args in and out: `torch.stack([*casts])`, `f(*args, **kwargs)`."""
    cast = [t.to(dtype) for t in tensors]
    stacked = torch.stack([*cast], **options)
    return stacked.sum(**options)


@shape("star_args", "`f(*args, **kwargs)` calls, `torch.stack([*xs], **opts)`, a helper taking *tensors")
def build_star_args(device: torch.device):
    parts = [torch.randn(4, 8, device=device, dtype=torch.float16) for _ in range(3)]
    options = {"dim": 0}

    def step(i: int):
        args = parts[: 1 + i % 3]
        return combine(*args, dtype=torch.bfloat16 if i % 2 else torch.float32, **options)

    return step


class ScaledEmbedding(torch.nn.Module):
    """A `@property` that casts: the cast runs in the property's frame, called from an attribute."""

    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, width).to(torch.float16))
        self.scale_param = torch.nn.Parameter(torch.tensor(2.0))

    @property
    def weight(self) -> torch.Tensor:
        return self.table.to(torch.float32)

    @property
    def scale(self) -> torch.Tensor:
        return self.scale_param.to(torch.bfloat16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.weight[ids]
        return rows.to(torch.bfloat16) * self.scale


@shape("property_cast", "a `@property` that casts a parameter, read by `self.weight` inside forward")
def build_property(device: torch.device):
    emb = ScaledEmbedding(32, 8).to(device)
    ids = torch.tensor([1, 5, 7, 30], device=device)

    def step(i: int):
        with torch.no_grad():
            return emb((ids + i) % 32)

    return step


def to_float32(t: torch.Tensor) -> torch.Tensor:
    """A helper called from two lines (and from a loop): its frame's caller line tells them apart."""
    if t.dtype == torch.float32:
        return t
    return t.to(torch.float32)


def gated_residual(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    h = to_float32(x)
    g = to_float32(gate).sigmoid()
    outs = [to_float32(piece) for piece in (h * g).chunk(2, dim=-1)]
    return torch.cat(outs, dim=-1).to(x.dtype)


@shape("helper_two_lines", "one helper function called from two lines and a comprehension")
def build_helper(device: torch.device):
    x = torch.randn(4, 8, device=device, dtype=torch.bfloat16)
    gate = torch.randn(4, 8, device=device, dtype=torch.float16)

    def step(i: int):
        return gated_residual(x, gate)

    return step
