"""What names and attributes are bound to in a module's source, for calls that do not say what they run
without Python frames: ``self.mlp = LlamaMLP(...)`` (``self.mlp(x)`` runs ``LlamaMLP.forward``),
``emb = Embedding(...)`` in an enclosing function, ``to32 = partial(torch.Tensor.to, dtype=...)``,
``act = lambda t: ...``, and the classes with their bases and methods (``super().forward``, properties).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from tracer.join.program import annotated_classes, last_name, module_imports
from tracer.join.torch_api import TORCH_API

CALLED = "called"  # bound to what calling `target` returns: an instance of a class (or a function's result)
PARTIAL = "partial"  # functools.partial(target, ...): calling it calls `target`
LAMBDA = "lambda"  # a lambda defined on `line`
ELEMENTS = "[]"  # a local name's key + this: what the container it names holds (``table[i](x)``)
ALIAS = "alias"  # another name for `target` (a function or a class)
REGISTRY = "registry"  # what a lookup in the module-level table `target` returns (``T.get(k, default)``)
BUILT = "built"  # an instance of a class the module-level table `target` holds (``T[key](config)``)
TORCH_OP = "torch_op"  # a torch function or a torch.nn module: calling it runs `aten::<target>`
ACTIVATION = "activation"  # a TORCH_OP target: one of torch's activation ops, picked by a config value

# torch.nn modules: the top-level op calling one runs (a module the source does not define).
TORCH_MODULE_OPS = {
    "Linear": "linear",
    "Embedding": "embedding",
    "LayerNorm": "layer_norm",
    "RMSNorm": "rms_norm",
    "GroupNorm": "group_norm",
    "Dropout": "dropout",
    "SiLU": "silu",
    "GELU": "gelu",
    "ReLU": "relu",
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Softmax": "softmax",
    "Conv1d": "conv1d",
    "Conv2d": "conv2d",
}
# The torch.nn layers whose bias is optional, and where ``bias`` sits among their arguments.
_BIAS_POSITION = {"Linear": 2, "Conv1d": 7, "Conv2d": 7}
# Calls on a module that return the module itself: `Cls(...).to(device)` binds a `Cls`.
_SAME_MODULE_METHODS = frozenset(
    {"to", "cuda", "cpu", "half", "float", "bfloat16", "eval", "train", "requires_grad_"}
)
# An activation chosen by name from a table or a getter (transformers' ``ACT2FN[...]``,
# ``get_activation(...)``; timm's ``get_act_layer``): calling it runs one activation op.
_ACTIVATION_TABLE = re.compile(r"(?i)^act(2|_|ivations?$|s?$)")
_ACTIVATION_GETTER = re.compile(r"(?i)^get_act(ivation)?(_fn|_layer|_cls)?$")
_CONTAINERS = frozenset({"ModuleList", "list", "tuple"})
_LOOKUPS = frozenset({"get", "get_interface"})  # a table's methods that return one of its values
_TOP_TABLES = re.compile(r"^(ACT2[A-Z]*|ACTIVATIONS?)[ \t]*[=:]", re.MULTILINE)  # ``ACT2FN = ...``
_TOP_DEFS = re.compile(r"^def[ \t]+([A-Za-z_]\w*)", re.MULTILINE)


def defines_activations(text: str) -> bool:
    """Whether a module's text defines an activation table or getter at its top level (transformers'
    ``activations.py`` with ``ACT2FN``, SGLang's ``get_act_fn``): where a chosen activation's op runs."""
    return _TOP_TABLES.search(text) is not None or any(
        _ACTIVATION_GETTER.search(name) for name in _TOP_DEFS.findall(text)
    )


def activations_named(text: str, key: str) -> list[str]:
    """The classes a module's activation table maps the key `key` to (``"gelu": GELUActivation``,
    ``"gelu": (GELUActivation, {...})``), by their last name; empty where no entry has that key."""
    pattern = re.compile(rf"""["']{re.escape(key)}["'][ \t]*:[ \t]*\(?[ \t]*([A-Za-z_][\w.]*)""")
    return [name.rsplit(".", 1)[-1] for name in pattern.findall(text)] if _TOP_TABLES.search(text) else []


def table_values(tree: ast.Module, name: str) -> list[str]:
    """The names a module-level table `name` maps keys to: ``name = {...}``, or ``name = Cls()`` with
    ``Cls`` (of the same module) holding such a dict as a class attribute."""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == name for t in targets):
            continue
        dicts: list[ast.Dict] = [value] if isinstance(value, ast.Dict) else []
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in classes:
            for item in classes[value.func.id].body:
                if isinstance(item, (ast.Assign, ast.AnnAssign)) and isinstance(item.value, ast.Dict):
                    dicts.append(item.value)
        return [v.id for d in dicts for v in d.values if isinstance(v, ast.Name)]
    return []


@dataclass(frozen=True)
class Binding:
    """One thing a name may be bound to."""

    kind: str  # CALLED, PARTIAL, LAMBDA, ALIAS, TORCH_OP, REGISTRY, BUILT
    target: str = ""  # the class or function's name (last part of a dotted name), or the op's
    line: int = 0  # LAMBDA: where it is defined
    dtype: str | None = None  # PARTIAL of a cast: its literal dtype keyword
    bias: bool | None = None  # TORCH_OP of a layer built with (True) or without a bias; None: unknown
    bias_flag: str = ""  # ... unknown as a config's attribute decides it (``bias=config.use_bias``)


@dataclass
class ClassSketch:
    """A class of a parsed module: its bases' names and what its methods bind ``self.x`` to."""

    name: str
    bases: tuple[str, ...]
    attributes: dict[str, tuple[Binding, ...]] = field(default_factory=dict)
    elements: dict[str, tuple[Binding, ...]] = field(default_factory=dict)  # self.x = ModuleList([...])


@dataclass
class ModuleBindings:
    """A module's classes, its module-level bindings and each function's (with its enclosing
    functions'), keyed by id of the function node; and the ``super().name(...)`` calls by position."""

    classes: dict[str, ClassSketch] = field(default_factory=dict)
    module: dict[str, tuple[Binding, ...]] = field(default_factory=dict)
    functions: dict[int, dict[str, tuple[Binding, ...]]] = field(default_factory=dict)
    super_calls: set[tuple[int, int]] = field(default_factory=set)  # (line, col) as `CallPoint` has them
    imports: dict[str, Imported] = field(default_factory=dict)  # module-level ``from m import a as b``
    # ``min(xs, key=lambda t: ...)``: the lambdas a call is given, which it may run (def lines), by
    # the call's (line, col) as `CallPoint` has them
    lambda_arguments: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Imported:
    """``from ..m import a as b``: level 2, module ``m``, name ``a`` (bound to ``b``)."""

    level: int
    module: str
    name: str


def module_bindings(tree: ast.Module) -> ModuleBindings:
    """Every binding of a parsed module (one walk)."""
    found = ModuleBindings()
    _walk_body(tree.body, found, None, found.module, None)
    found.imports = _imports(tree)
    return found


def _imports(tree: ast.Module) -> dict[str, Imported]:
    """The names a module binds by ``from m import a`` (at module level, also inside ``if``/``try``);
    the first binding of a name wins (``try: from fast import f`` before ``except: from slow ...``)."""
    found: dict[str, Imported] = {}
    for node in module_imports(tree):
        for alias in node.names:
            if alias.name != "*":
                found.setdefault(
                    alias.asname or alias.name, Imported(node.level, node.module or "", alias.name)
                )
    return found


def _walk_body(
    statements: list[ast.stmt],
    found: ModuleBindings,
    class_sketch: ClassSketch | None,
    scope: dict[str, tuple[Binding, ...]],
    method_class: ClassSketch | None,
) -> None:
    for node in statements:
        if isinstance(node, ast.ClassDef):
            sketch = ClassSketch(node.name, tuple(base for b in node.bases if (base := last_name(b))))
            found.classes.setdefault(node.name, sketch)
            _walk_body(node.body, found, sketch, {}, None)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            own = dict(scope) if class_sketch is None else {}  # a method does not see its class body
            own.update(annotated_parameters(node.args))
            for name, bound in default_parameters(node.args).items():
                own[name] = _merge(own.get(name, ()), bound)
            found.functions[id(node)] = own
            _walk_body(node.body, found, None, own, class_sketch or method_class)
        else:
            _bind_statement(node, found, scope, method_class)
            for field_name in ("body", "orelse", "finalbody"):
                inner = getattr(node, field_name, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    _walk_body(inner, found, class_sketch, scope, method_class)
            for handler in getattr(node, "handlers", ()) or ():
                _walk_body(handler.body, found, class_sketch, scope, method_class)


_BODIES = ("body", "orelse", "finalbody", "handlers")


def _statement_nodes(node: ast.stmt):
    """The nodes of one statement, not those of the statements in its bodies (`_walk_body` visits
    each of them on its own: walking them here too made nesting cost its depth squared)."""
    stack = [
        child for name, value in ast.iter_fields(node) if name not in _BODIES for child in _children(value)
    ]
    yield node
    while stack:
        child = stack.pop()
        yield child
        stack.extend(ast.iter_child_nodes(child))


def _children(value) -> list[ast.AST]:
    if isinstance(value, ast.AST):
        return [value]
    return [item for item in value if isinstance(item, ast.AST)] if isinstance(value, list) else []


def _bind_statement(
    node: ast.stmt, found: ModuleBindings, scope: dict, method_class: ClassSketch | None
) -> None:
    for child in _statement_nodes(node):
        if isinstance(child, ast.Call):
            func = child.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Call)
                and isinstance(func.value.func, ast.Name)
                and func.value.func.id == "super"
            ):
                found.super_calls.add((func.end_lineno or child.lineno, child.col_offset))
            lambdas = tuple(
                argument.lineno
                for argument in (*child.args, *(k.value for k in child.keywords))
                if isinstance(argument, ast.Lambda)
            )
            if lambdas:
                at = (func.end_lineno or child.lineno) if isinstance(func, ast.Attribute) else child.lineno
                found.lambda_arguments[(at, child.col_offset)] = lambdas
    if isinstance(node, ast.Assign):
        pairs = [(target, node.value) for target in node.targets]
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        pairs = [(node.target, node.value)]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        target, iterated = node.target, node.iter
        if (  # for i, layer in enumerate(self.layers)
            isinstance(target, ast.Tuple)
            and len(target.elts) == 2
            and isinstance(iterated, ast.Call)
            and last_name(iterated.func) == "enumerate"
            and iterated.args
        ):
            target, iterated = target.elts[1], iterated.args[0]
        if isinstance(target, ast.Name) and method_class is not None:
            elements = _elements_of(iterated, method_class)
            if elements:
                scope[target.id] = elements
        return
    else:
        return
    while pairs:
        target, value = pairs.pop()
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            pairs.extend(zip(target.elts, value.elts))
            continue
        bound = bindings_of(value)
        if isinstance(target, ast.Name):
            if bound:
                scope[target.id] = _merge(scope.get(target.id, ()), bound)
            elif method_class is not None and (elements := _elements_of(value, method_class)):
                scope[target.id] = elements  # layer = self.layers[i]
            elif elements := _container_elements(value):
                scope[target.id + ELEMENTS] = elements  # table = [lambda t: ..., ...]; table[i](x)
        elif (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and method_class is not None
        ):
            # ``self.layers = layers if layers is not None else []``: what the name holds (a parameter's
            # annotation says), not another name for a function
            named = _names_in(value)
            if named:
                bound = _merge(
                    tuple(b for b in bound if b.kind != ALIAS or b.target not in scope),
                    tuple(b for name in named for b in scope.get(name, ())),
                )
                held = tuple(b for name in named for b in scope.get(name + ELEMENTS, ()))
                if held:
                    method_class.elements[target.attr] = _merge(
                        method_class.elements.get(target.attr, ()), held
                    )
            if bound:
                method_class.attributes[target.attr] = _merge(
                    method_class.attributes.get(target.attr, ()), bound
                )
            elements = _container_elements(value)
            if elements:
                method_class.elements[target.attr] = _merge(
                    method_class.elements.get(target.attr, ()), elements
                )


def annotated_parameters(arguments: ast.arguments) -> dict[str, tuple[Binding, ...]]:
    """What a function's annotated parameters hold: ``past_key_values: Cache | None`` an instance of
    ``Cache`` (its methods run where the function calls them), ``layers: list[Layer]`` elements that
    are ``Layer`` instances (key: the name + `ELEMENTS`). Torch's, typing's and builtin types bind
    nothing."""
    found: dict[str, tuple[Binding, ...]] = {}
    for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
        if argument.annotation is None:
            continue
        instances, elements = annotated_classes(argument.annotation)
        if instances:
            found[argument.arg] = tuple(Binding(CALLED, name) for name in instances)[:4]
        if elements:
            found[argument.arg + ELEMENTS] = tuple(Binding(CALLED, name) for name in elements)[:4]
    return found


def default_parameters(arguments: ast.arguments) -> dict[str, tuple[Binding, ...]]:
    """What a function's parameters hold by default where the default names a function or class
    (``mask_function: Callable = causal_mask_function``): one thing the parameter may be."""
    positional = (*arguments.posonlyargs, *arguments.args)
    pairs = [
        *zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults),
        *((a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None),
    ]
    return {
        argument.arg: (Binding(ALIAS, default.id),)
        for argument, default in pairs
        if isinstance(default, ast.Name)
    }


def _names_in(value: ast.AST) -> list[str]:
    """The plain names an assigned value may be: ``layers``, ``a if c else b``, ``a or b``."""
    if isinstance(value, ast.Name):
        return [value.id]
    if isinstance(value, ast.IfExp):
        return _names_in(value.body) + _names_in(value.orelse)
    if isinstance(value, ast.BoolOp):
        return [name for part in value.values for name in _names_in(part)]
    return []


def _elements_of(node: ast.AST, method_class: ClassSketch) -> tuple[Binding, ...]:
    """What iterating or indexing ``self.x`` (``self.x[a:b]``) gives, for a container ``self.x``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return method_class.elements.get(node.attr, ())
    return ()


def _container_elements(value: ast.AST) -> tuple[Binding, ...]:
    if isinstance(value, ast.Call) and last_name(value.func) in _CONTAINERS and value.args:
        value = value.args[0]
    if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
        return bindings_of(value.elt)
    if isinstance(value, (ast.List, ast.Tuple)):
        out: tuple[Binding, ...] = ()
        for element in value.elts:
            out = _merge(out, bindings_of(element))
        return out
    return ()


def bindings_of(value: ast.AST) -> tuple[Binding, ...]:
    """What an assigned expression binds a name to (empty when unknown)."""
    if isinstance(value, ast.IfExp):
        return _merge(bindings_of(value.body), bindings_of(value.orelse))
    if isinstance(value, ast.Lambda):
        return (Binding(LAMBDA, "<lambda>", value.lineno),)
    if isinstance(value, ast.Name):
        return (Binding(ALIAS, value.id),)
    if isinstance(value, ast.Subscript) and _ACTIVATION_TABLE.search(last_name(value.value) or ""):
        return (Binding(TORCH_OP, ACTIVATION),)  # ``ACT2FN[config.hidden_act]``
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
        # ``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]``: a function of the table
        return (Binding(REGISTRY, value.value.id),)
    if isinstance(value, ast.Attribute):
        if value.attr in TORCH_API and _root_name(value) in ("torch", "F", "functional", "nn", "Tensor"):
            return (Binding(TORCH_OP, value.attr),)
        return ()
    if not isinstance(value, ast.Call):
        return ()
    func = value.func
    name = last_name(func)
    if name == "partial" and value.args:
        inner = value.args[0]
        dtype = next((_dtype_text(k.value) for k in value.keywords if k.arg == "dtype"), None)
        if (
            isinstance(inner, ast.Attribute)
            and inner.attr in TORCH_API
            and _root_name(inner)
            in (
                "torch",
                "F",
                "Tensor",
                "functional",
            )
        ):
            return (Binding(TORCH_OP, inner.attr, dtype=dtype),)
        target = last_name(inner)
        return (Binding(PARTIAL, target, dtype=dtype),) if target else ()
    if (
        isinstance(func, ast.Attribute)
        and func.attr in _SAME_MODULE_METHODS
        and isinstance(func.value, ast.Call)
    ):
        return bindings_of(func.value)
    if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name):
        # ``FALCON_ATTENTION_CLASSES[config._attn_implementation](config, layer_idx)``: an instance of
        # a class of the table (``ACT2CLS[config.hidden_act]()``: the activation the config picks)
        if _ACTIVATION_TABLE.search(func.value.id):
            return (Binding(TORCH_OP, ACTIVATION),)
        return (Binding(BUILT, func.value.id),)
    if name is None:
        return ()
    if name in _LOOKUPS and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        # ``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)``:
        # a function of the table, or the default
        default = bindings_of(value.args[1]) if len(value.args) > 1 else ()
        return (Binding(REGISTRY, func.value.id), *default)
    if _ACTIVATION_GETTER.search(name):
        return (Binding(TORCH_OP, ACTIVATION),)  # ``get_activation(config.hidden_act)``
    if name in TORCH_MODULE_OPS and _root_name(func) in ("nn", "torch", name):
        if name not in _BIAS_POSITION:
            return (Binding(CALLED, name), Binding(TORCH_OP, TORCH_MODULE_OPS[name]))
        bias, flag = _bias_of(value)
        return (Binding(CALLED, name), Binding(TORCH_OP, TORCH_MODULE_OPS[name], bias=bias, bias_flag=flag))
    return (Binding(CALLED, name),)


def _bias_of(call: ast.Call) -> tuple[bool | None, str]:
    """Whether a layer is built with a bias: a literal ``bias=`` (or in its place among the
    arguments), torch's default (True) when not given; None when a value decides, with the config
    attribute that does (``bias=config.use_bias``: "use_bias"; else "")."""
    given = next((k.value for k in call.keywords if k.arg == "bias"), None)
    if given is None:
        position = _BIAS_POSITION[last_name(call.func) or ""]
        if len(call.args) > position:
            given = call.args[position]
        elif any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
            return None, ""  # ``**kwargs``: may hold it
        else:
            return True, ""
    if isinstance(given, ast.Constant) and isinstance(given.value, bool):
        return given.value, ""
    return None, _config_attribute(given)


def _config_attribute(node: ast.AST) -> str:
    """``config.x`` or ``self.config.x``: "x"; else ""."""
    if not isinstance(node, ast.Attribute):
        return ""
    owner = node.value
    if isinstance(owner, ast.Name) and owner.id == "config":
        return node.attr
    if isinstance(owner, ast.Attribute) and owner.attr == "config" and isinstance(owner.value, ast.Name):
        return node.attr if owner.value.id == "self" else ""
    return ""


def _merge(a: tuple[Binding, ...], b: tuple[Binding, ...]) -> tuple[Binding, ...]:
    return tuple(dict.fromkeys((*a, *b)))[:4]


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        if node.attr in ("Tensor", "functional"):
            return node.attr
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _dtype_text(node: ast.AST) -> str | None:
    from tracer.join.program import _literal_dtype

    return _literal_dtype(node)


__all__ = [
    "ACTIVATION",
    "ALIAS",
    "BUILT",
    "CALLED",
    "ELEMENTS",
    "LAMBDA",
    "PARTIAL",
    "REGISTRY",
    "TORCH_MODULE_OPS",
    "TORCH_OP",
    "Binding",
    "ClassSketch",
    "Imported",
    "ModuleBindings",
    "activations_named",
    "bindings_of",
    "defines_activations",
    "module_bindings",
    "table_values",
]
