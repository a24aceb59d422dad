"""The soak with faults (bench/soak.py), cut by concern: the running record, the load it drives,
the faults it injects, the readings it samples, the arithmetic and judgement over them, and the
report."""
