"""Build one `Origin` per distinct launch context, deduplicated, with its line, confidence and evidence."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from tracer.join.calls import call_from_line, methods_of_call
from tracer.join.compiled import CompiledKernels
from tracer.join.dtypes import copy_dtypes
from tracer.join.frames import MODULE_FILE, parse_call_from, parse_frame, same_file
from tracer.join.locate import CallLocator
from tracer.join.ranking import rank_sites
from tracer.join.sites import SiteIndex, choose_site
from tracer.join.source_lines import SourceLines
from tracer.join.stackless import RANKING_CONFIDENCE, Ranking, StacklessRanker
from tracer.model.events import NONE, Cat, Trace
from tracer.model.origin import Frame, Origin
from tracer.model.ranges import parse_site_range
from tracer.model.site import Site

if TYPE_CHECKING:
    from tracer.join.calls import CallOrder
    from tracer.join.state import JoinState

_CPU_OP, _RANGE = Cat.CPU_OP, Cat.USER_ANNOTATION
_EMPTY = 0  # id of the empty chain in every chain table
_INSTANCE_SUFFIX = re.compile(r"_\d+$")
NO_SOURCE_CAP = 0.8  # sites matched by call order alone, with the function's branches unknown
HARMONY_MARGIN = 1.0  # a ranked line within this of a window's own best may be the op chain's agreed one
CORE_OPS = 3  # ... among the windows of its op chain that hold the same ops this near the hot one


class _Chains:
    """Interned tuples built by appending one element to an interned parent tuple."""

    def __init__(self) -> None:
        self.tuples: list[tuple[Any, ...]] = [()]
        self._ids: dict[tuple[int, Any], int] = {}

    def extend(self, parent: int, item: Any) -> int:
        key = (parent, item)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = len(self.tuples)
            self.tuples.append(self.tuples[parent] + (item,))
        return found


class _Context(NamedTuple):
    """What an event's Origin depends on: equal contexts share one Origin (the builder's cache key)."""

    frame_chain: int
    op_chain: int
    range_chain: int
    replay: bool
    sequence: int  # id of the calls its user frame's run made (`CallOrder.tokens`), NONE when not needed
    place: int  # the call's index among them
    target: str | None  # a copy's target dtype
    source_dtype: str | None
    window: int  # without frames: the ops around it (`OpWindows.ids`), NONE otherwise


class OriginBuilder:
    """Turns join contexts into `Origin`s; identical contexts share one Origin (one index)."""

    def __init__(
        self,
        trace: Trace,
        sites: SiteIndex,
        source: SourceLines,
        use_call_from: bool,
        architectures: Sequence[str] = (),
    ) -> None:
        self.trace = trace
        self.sites = sites
        self.source = source
        self.locator = CallLocator(source)
        self.compiled = CompiledKernels(trace, source, self.locator)  # torch.compile'd code's kernels
        self.ranker = StacklessRanker(sites, source, architectures)
        # ranked origin -> (its base, target dtype, Ranking, the ops next to the hot one: `_core`)
        self._rankings: dict[Origin, tuple] = {}
        self.use_call_from = use_call_from
        self.origins: list[Origin] = []
        self._origin_index: dict[Origin, int] = {}
        self._by_context: dict[tuple[Any, ...], int] = {}
        self._frame_chains = _Chains()  # of (frame name, CallFrom text)
        self._op_chains = _Chains()  # of op names
        self._range_chains = _Chains()  # of range names (ProfilerStep#N excluded)
        self._frame_chain_of: dict[int, int] = {NONE: _EMPTY}
        self._op_context_of: dict[int, tuple[int, int, int]] = {NONE: (_EMPTY, _EMPTY, NONE)}
        self._frames_of_chain: dict[int, tuple[Frame, ...]] = {}

    def before_trace_id(self) -> int:
        """The Origin of GPU work launched before the profiler started (still running when it did)."""
        return self._intern(
            ("before trace",),
            lambda: Origin(
                before_trace=True,
                evidence=(
                    (
                        "launched before the profiler started: its correlation id is below the first "
                        "launch the trace recorded, so the launch and its CPU ops are not in the trace"
                    ),
                ),
            ),
        )

    def origin_id(self, join: JoinState, anchor: int, replay: bool, calls: CallOrder) -> int:
        table = join.table
        if anchor == NONE:
            return self._intern(
                ("unlaunched",), lambda: Origin(evidence=("no launch or CPU op found for it",))
            )
        op_chain, range_chain, forward = self._op_context(join, anchor)
        if forward != NONE and not replay:
            return self._backward(join, forward, op_chain, range_chain, calls)
        frame = join.innermost_frame[anchor]
        frame_chain = self._frame_chain(join, frame)
        user = call = NONE
        sequence, place = NONE, -1
        if not replay:
            user, call = join.user_call(anchor, frame)
            if user != NONE and call != NONE and self._needs_order(table, call):
                # Runs that made the same calls share an answer (each layer, each step).
                sequence, place = calls.run_of(user, call)
        target = source_dtype = None
        cast = join.cast_op(anchor)
        if cast != NONE:
            target, source_dtype = copy_dtypes(table.name[cast], table.args[cast])
        window = NONE
        if not replay and frame == NONE and self.orders_calls():
            window = join.windows.id_of(join.top_op(anchor))
        context = _Context(
            frame_chain, op_chain, range_chain, replay, sequence, place, target, source_dtype, window
        )
        found = self._by_context.get(context)
        if found is not None:  # most events: a context seen before (each layer of each step)
            return found
        tokens = calls.tokens[sequence] if sequence != NONE else ()
        return self._intern(context, lambda: self._build(join, anchor, context, user, call, tokens))

    def _backward(
        self, join: JoinState, forward: int, op_chain: int, range_chain: int, calls: CallOrder
    ) -> int:
        """A backward op is explained by its forward op's line (autograd's fwdbwd flow links them)."""
        forward_id = self.origin_id(join, forward, False, calls)

        def make() -> Origin:
            origin = self.origins[forward_id]
            return replace(
                origin,
                ops=self._op_chains.tuples[op_chain],
                ranges=self._range_chains.tuples[range_chain] or origin.ranges,
                evidence=(
                    f"backward of {join.table.name[forward]} (autograd fwdbwd flow); its forward line:",
                    *origin.evidence,
                ),
            )

        return self._intern(("backward", forward_id, op_chain, range_chain), make)

    def _intern(self, context: tuple[Any, ...], make) -> int:
        found = self._by_context.get(context)
        if found is None:
            origin = make()
            found = self._origin_index.get(origin)
            if found is None:
                found = self._origin_index[origin] = len(self.origins)
                self.origins.append(origin)
            self._by_context[context] = found
        return found

    def orders_calls(self) -> bool:
        """Whether a call's order in its user frame can matter (there are sites or source to match, or
        launches of Inductor-generated code to tell apart)."""
        return bool(self.sites) or bool(self.source.roots) or self.compiled.ran_compiled_code()

    def _needs_order(self, table, call: int) -> bool:
        if not self.orders_calls():
            return False
        # CallFrom names the line of a frame call exactly; ops run directly in a frame have none.
        return not (self.use_call_from and table.cat[call] == Cat.PYTHON_FUNCTION)

    # -- chains ----------------------------------------------------------------------------------
    def _frame_chain(self, join: JoinState, frame: int) -> int:
        memo = self._frame_chain_of
        known = memo.get(frame)
        if known is not None:  # most anchors sit in a frame already seen
            return known
        path = []
        cur = frame
        while cur not in memo:
            path.append(cur)
            cur = join.frame_parents[cur]
        chain = memo[cur]
        names, args = join.table.name, join.table.args
        for row in reversed(path):
            row_args = args[row]
            call_from = row_args.get("CallFrom") if row_args else None
            chain = memo[row] = self._frame_chains.extend(chain, (names[row], call_from))
        return chain

    def _op_context(self, join: JoinState, row: int) -> tuple[int, int, int]:
        """(op chain id, range chain id, the forward op row if this runs in a backward op)."""
        memo = self._op_context_of
        known = memo.get(row)
        if known is not None:
            return known
        path = []
        cur = row
        while cur not in memo:
            path.append(cur)
            cur = join.op_parents[cur]
        ops, ranges, forward = memo[cur]
        table = join.table
        fwdbwd = self.trace.fwdbwd
        for r in reversed(path):
            cat, name = table.cat[r], table.name[r]
            if cat == _CPU_OP:
                ops = self._op_chains.extend(ops, name)
                forward = fwdbwd.get(r, forward)
            elif cat == _RANGE and not name.startswith("ProfilerStep#"):
                ranges = self._range_chains.extend(ranges, name)
            memo[r] = (ops, ranges, forward)
        return ops, ranges, forward

    def _frames(self, chain: int) -> tuple[Frame, ...]:
        frames = self._frames_of_chain.get(chain)
        if frames is None:
            items = self._frame_chains.tuples[chain]
            built = []
            for i, (name, _) in enumerate(items):
                frame = parse_frame(name)
                if frame.file == MODULE_FILE:
                    # `nn.Module: LlamaDecoderLayer_3`: the instance number splits one line's
                    # origin into one per layer; the class is what the origin needs.
                    frame = replace(frame, function=_INSTANCE_SUFFIX.sub("", frame.function))
                child_call = parse_call_from(items[i + 1][1]) if i + 1 < len(items) else None
                if child_call is not None and same_file(child_call[0], frame.file):
                    frame = replace(frame, call_line=child_call[1])
                built.append(frame)
            frames = self._frames_of_chain[chain] = tuple(built)
        return frames

    # -- the line ---------------------------------------------------------------------------------
    def _build(self, join, anchor: int, context: _Context, user: int, call: int, tokens) -> Origin:
        table = join.table
        target = context.target
        frames = self._frames(context.frame_chain)
        ops = self._op_chains.tuples[context.op_chain]
        ranges = self._range_chains.tuples[context.range_chain]
        base = Origin(ranges=ranges, frames=frames, ops=ops)
        if self.compiled.launched_by(join, anchor, user, ranges, context.replay):
            return self.compiled.origin(join, anchor, base, user, context.replay)
        if context.replay:
            return replace(
                base,
                replay=True,
                evidence=(
                    (
                        f"replayed from a CUDA graph ({table.name[anchor]}): the trace links it to the"
                        " replay call only, not to the capture-time line"
                    ),
                ),
            )
        site_range = next((r for r in map(parse_site_range, reversed(ranges)) if r is not None), None)
        if site_range is not None:
            site = self.sites.by_id.get(site_range.site_id)
            return self._at_line(
                base,
                site_range.path,
                site_range.line,
                site,
                1.0,
                (f"inside kerneltrace site range kt:site:{site_range.site_id}",),
            )
        if user == NONE:
            if not frames:
                return self._ranked(join, anchor, base, target)
            return replace(
                base,
                evidence=("only torch/stdlib frames around this op: no user frame to name a line in",),
            )
        user_frame = parse_frame(table.name[user])
        methods = methods_of_call(table.name[call], table.cat[call]) if call != NONE else ()
        label = f"`{user_frame.function}` ({user_frame.file}, def line {user_frame.def_line})"
        if self.use_call_from and call != NONE:
            line = call_from_line(table, call, user)
            if line is not None:
                site = next(
                    (s for s in self.sites.at_line(user_frame.file, line) if s.method in methods), None
                )
                return self._at_line(
                    base, user_frame.file, line, site, 1.0, (f"CallFrom names line {line} of {label}",)
                )
        # The function's source: align this run's calls with it (control flow, order, dtypes).
        if context.place >= 0:
            choice = self.locator.locate(user_frame, tokens, context.place, target, context.source_dtype)
            if choice is not None:
                return self._from_choice(base, user_frame, label, methods, tokens, context.place, choice)
        # No source for the function: the static sites alone, by call order (no control flow known).
        reasons: tuple[str, ...]
        if not self.sites:
            reasons = ("no static sites given",)
        elif not methods:
            reasons = (_no_site_reason(table, call, user_frame),)
        else:
            k, n = _rank_among_same(tokens, context.place)
            from_sites, reasons = self._from_sites(
                base, user_frame, label, methods, k, n, target, context.source_dtype
            )
            if from_sites is not None:
                return replace(
                    from_sites,
                    confidence=min(from_sites.confidence, NO_SOURCE_CAP),
                    evidence=(
                        *from_sites.evidence,
                        "the function's source was not found: its branches are unknown",
                    ),
                )
        return replace(base, file=user_frame.file, evidence=(f"ran in {label}", *reasons))

    def _from_choice(self, base, user_frame, label, methods, tokens, place, choice) -> Origin:
        """The Origin of an aligned call: the chosen point's line, the static site there if any."""
        if choice.point is None:
            return replace(base, file=user_frame.file, evidence=(f"ran in {label}", *choice.evidence))
        file, line = user_frame.file, choice.point.line
        site = next((s for s in self.sites.at_line(file, line) if s.method in methods), None)
        k, n = _rank_among_same(tokens, place)
        kind = f"{_kind(tokens[place])} {k + 1} of {n}"
        order = f"call {place + 1} of {len(tokens)} in this run of `{user_frame.function}` ({kind})"
        evidence = (f"{order}: {choice.evidence[0]}", *choice.evidence[1:])
        origin = self._at_line(base, file, line, site, choice.confidence, evidence)
        if len(choice.candidates) > 1:
            origin = replace(
                origin, candidates=tuple(dict.fromkeys(f"{file}:{p.line}" for p in choice.candidates))
            )
        return origin

    def _from_sites(self, base, user_frame, label, methods, k, n, target, source_dtype):
        """(Origin, ()) when a static site of the call's method is chosen, else (None, reasons)."""
        in_function = self.sites.in_function(user_frame.file, user_frame.def_line)
        if not in_function:
            # A frame already running when profiling began names its executing line, not its def.
            running = [
                s
                for s in self.sites.at_line(user_frame.file, user_frame.def_line or 0)
                if s.method in methods
            ]
            if len(running) == 1:
                evidence = (f"{label} was already running when profiling began: its number is this line",)
                return self._at_line(base, user_frame.file, running[0].line, running[0], 0.9, evidence), ()
        choice = choose_site(
            in_function,
            methods,
            nth=k,
            calls=n,
            target_dtype=target,
            function=user_frame.function,
            source_dtype=source_dtype,
        )
        if choice.site is None:
            return None, choice.evidence
        origin = self._at_line(
            base, user_frame.file, choice.site.line, choice.site, choice.confidence, choice.evidence
        )
        if choice.candidates:
            origin = replace(
                origin, candidates=tuple(f"{user_frame.file}:{s.line}" for s in choice.candidates)
            )
        return origin, ()

    def _at_line(
        self,
        base: Origin,
        file: str,
        line: int,
        site: Site | None,
        confidence: float,
        evidence: tuple[str, ...],
    ) -> Origin:
        text = self.source.line(file, line)
        if text is None and site is not None:
            text = site.text.splitlines()[0].strip() if site.text else None
        if text is None and site is not None:
            text = self.source.line(site.path, line)
        return replace(
            base,
            file=file,
            line=line,
            source=text,
            site_id=site.id if site is not None else None,
            rule=(site.rule or None) if site is not None else None,
            confidence=confidence,
            evidence=evidence,
        )

    def _ranked(self, join: JoinState, anchor: int, base: Origin, target: str | None) -> Origin:
        """No Python frames: the lines whose functions best fit the ops around it, as a ranking."""
        around = join.windows.around(join.top_op(anchor)) if self.orders_calls() else None
        if around is None:
            reason = "no static sites or source given to rank" if not self.orders_calls() else "no CPU op"
            return replace(base, evidence=("no Python frames (with_stack=False)", reason))
        if not self.source.roots:  # sites without their source (--sites): rank the sites alone
            return self._sites_ranked(base, target)
        window, hot = around
        ranking = self.ranker.rank(window, hot, base.ranges, target)
        return self._from_ranking(base, target, ranking, _core(window, hot))

    def _from_ranking(self, base: Origin, target: str | None, ranking: Ranking, core: tuple = ()) -> Origin:
        if not ranking.candidates:
            unranked = replace(base, evidence=("no Python frames (with_stack=False)", *ranking.evidence))
            self._rankings[unranked] = (base, target, None, core)
            return unranked
        origin = self._ranked_origin(base, ranking.candidates, ranking.confidence, ranking.evidence)
        self._rankings[origin] = (base, target, ranking, core)
        return origin

    def _sites_ranked(self, base: Origin, target: str | None) -> Origin:
        """Static sites only, no source to align with: the sites whose op, dtype and ranges fit."""
        ranking = rank_sites(self.sites, base.ops, base.ranges, target)
        if not ranking.sites:
            return replace(base, evidence=("no Python frames (with_stack=False)", *ranking.evidence))
        best = ranking.sites[0]
        evidence = ("a ranking, not a match:", *ranking.evidence, "no --source: the sites ranked by op alone")
        origin = self._at_line(base, best.path, best.line, best, ranking.confidence, evidence)
        return replace(origin, candidates=tuple(site.location for site in ranking.sites))

    def _ranked_origin(self, base: Origin, candidates, confidence: float, evidence) -> Origin:
        best = candidates[0]
        site = self.sites.by_id.get(best.site_id) if best.site_id else None
        ranked = tuple(f"#{i + 1} {c.describe()}" for i, c in enumerate(candidates))
        origin = self._at_line(
            base, best.file, best.line, site, confidence, ("a ranking, not a match:", *evidence, *ranked)
        )
        return replace(origin, candidates=tuple(c.location for c in candidates))

    def agree_on_copies(self, origin_ids):
        """Ranked origins whose candidates have copies in other files (`StacklessRanker.agree`):
        answered in the copy whose file the rest of the trace fits best."""
        import numpy as np

        if not self._rankings:
            return origin_ids
        changed = self.ranker.agree()
        if (note := self.ranker.named_note()) is not None:
            self.trace.notes.append(note)
        if not changed:
            return origin_ids
        ids, inverse = np.unique(np.asarray(origin_ids), return_inverse=True)
        remapped = ids.copy()
        for position, origin_id in enumerate(ids.tolist()):
            found = self._rankings.get(self.origins[origin_id])
            if found is None or found[2] is None:
                continue
            base, target, ranking, core = found
            old, new = changed.get(id(ranking), (None, None))
            if old is not ranking or new is None:
                continue
            remapped[position] = self._intern(
                ("agreed", origin_id),
                lambda base=base, target=target, new=new, core=core: self._from_ranking(
                    base, target, new, core
                ),
            )
        return remapped[inverse.reshape(-1)]

    def harmonize_rankings(self, origin_ids):
        """One answer for one op chain: ranked origins of the same op chain, ranges and dtype (one
        call site, run in many layers) whose windows differ only at their edges (the same ops within
        `CORE_OPS` of the hot one: two sites of one op chain, the casts that open two norms, are not
        one) get the line ranked first for most of their calls, where each ranking has it within
        `HARMONY_MARGIN` of its own best."""
        import numpy as np

        if not self._rankings:
            return origin_ids
        ids, inverse, counts = np.unique(np.asarray(origin_ids), return_inverse=True, return_counts=True)
        groups: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for position, (origin_id, count) in enumerate(zip(ids.tolist(), counts.tolist())):
            found = self._rankings.get(self.origins[origin_id])
            if found is not None:
                base, target, _, core = found
                groups[(base.ops, base.ranges, target, core)].append((position, count))
        remapped = ids.copy()
        for members in groups.values():
            if len(members) < 2:
                continue
            firsts: Counter = Counter()  # calls whose own ranking puts the line first (None: no line)
            fits: Counter = Counter()  # then how well it fits all of them
            for position, count in members:
                ranking = self._rankings[self.origins[int(ids[position])]][2]
                firsts[ranking.candidates[0].location if ranking is not None else None] += count
                for candidate in ranking.candidates if ranking is not None else ():
                    fits[candidate.location] += count * -candidate.score
            agreed = min(firsts, key=lambda location: (-firsts[location], -fits[location], location or ""))
            for position, _ in members:
                origin_id = int(ids[position])
                base, _, ranking, _ = self._rankings[self.origins[origin_id]]
                if ranking is None:
                    continue
                if agreed is None:  # most calls of this op chain fit no line: a weak ranking yields
                    if ranking.confidence < RANKING_CONFIDENCE:
                        majority = next(
                            int(ids[p])
                            for p, _ in members
                            if self._rankings[self.origins[int(ids[p])]][2] is None
                        )
                        remapped[position] = majority
                    continue
                top = ranking.candidates[0]
                chosen = next((c for c in ranking.candidates if c.location == agreed), None)
                if top.location == agreed or chosen is None or chosen.score > top.score + HARMONY_MARGIN:
                    continue
                order = (chosen, *(c for c in ranking.candidates if c is not chosen))
                note = f"the other windows of this op chain agree on {agreed}"
                remapped[position] = self._intern(
                    ("harmonized", origin_id, agreed),
                    lambda base=base, order=order, ranking=ranking, note=note: self._ranked_origin(
                        base, order, ranking.confidence, (note, *ranking.evidence)
                    ),
                )
        return remapped[inverse.reshape(-1)]


def _rank_among_same(tokens, place: int) -> tuple[int, int]:
    """(k, n): the call at `place` is the k-th (0-based) of n calls of its kind and name in the run."""
    if not 0 <= place < len(tokens):
        return 0, 1
    mine = tokens[place]
    same = [
        i for i, t in enumerate(tokens) if t.kind == mine.kind and (t.name == mine.name or t.kind == "module")
    ]
    return same.index(place), len(same)


def _kind(token) -> str:
    """How the evidence names a call: "`.to` call", "module call", "aten::mul op"."""
    if token.kind == "module":
        return "module call"
    if token.kind == "op":
        return f"{token.name} op"
    return f"`.{token.name}` call"


def _no_site_reason(table, call: int, user_frame: Frame) -> str:
    where = f"`{user_frame.function}`"
    if call == NONE:
        return f"launched from {where} with no CPU op around the launch (a Triton or custom kernel)"
    name = table.name[call]
    if table.cat[call] == _CPU_OP:
        return f"{name} runs directly in {where} (an operator such as `*`, not a call site kind)"
    if name.startswith("nn.Module: "):
        module = _INSTANCE_SUFFIX.sub("", name.removeprefix("nn.Module: "))
        return f"a call of module {module} from {where}: module calls are not static sites"
    return f"`{parse_frame(name).function}` from {where}: not a static site kind"


def _core(window: Sequence[str], hot: int) -> tuple:
    """The ops within `CORE_OPS` of the hot one, and where it is among them: the windows of one call
    site run in many layers share it (they differ at their edges), those of two sites do not."""
    start = max(0, hot - CORE_OPS)
    return (hot - start, *window[start : hot + CORE_OPS + 1])


__all__ = ["OriginBuilder"]
