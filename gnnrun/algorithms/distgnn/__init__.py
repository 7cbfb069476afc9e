"""DistGNN's full-batch family on vertex-cut parts: `cd0`, `cdr`, `zero_comm` (distgnn),
and the delayed remote partial aggregates that complete split vertices (drpa)."""
