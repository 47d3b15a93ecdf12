"""`python -m tracer ...`: the `kerneltrace` command where its console script is not installed."""

from tracer.cli import main

main(prog_name="kerneltrace")
