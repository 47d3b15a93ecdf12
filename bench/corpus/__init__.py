"""The truth corpus: workloads recorded twice (A: the trace the join sees; B: each op's true line)."""
