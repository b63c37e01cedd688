"""`python -m core.service`: the engine service in the foreground (core.service.process)."""

from core.service.process import main

raise SystemExit(main())
