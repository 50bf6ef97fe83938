"""``python -m retold.cli``: the same entry point as the ``retold`` console script."""

from retold.cli import main

raise SystemExit(main())
