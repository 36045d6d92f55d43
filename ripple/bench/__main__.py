"""`python -m ripple.bench`: see `cli.py`."""
from .cli import main

raise SystemExit(main())
