"""python -m voice_stack_dev.demo (what scripts/demo runs, with the ha11 environment)."""

from .cli import main

raise SystemExit(main())
