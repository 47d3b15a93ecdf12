"""The classes a call's arguments and a subscript's index fall into: the words of a rule's
`arg_class` and `index_class` match keys (`tracer.static.rules` checks them, `tracer.static.precedence`
orders rules by them)."""

ARG_CLASSES = ("none", "dtype", "device", "dtype+device", "other")
# The fewest arguments a call of each class has: `x.to(non_blocking=True)` is "none", `x.to(d, t)`
# "dtype+device"; a rule that allows only classes needing more arguments than its max_args is void.
ARGS_NEEDED = {"none": 0, "dtype": 1, "device": 1, "dtype+device": 2, "other": 1}
INDEX_CLASSES = ("index", "slice")
