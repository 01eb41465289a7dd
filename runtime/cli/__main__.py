"""``python -m wavepp.runtime.cli``, as before the command became a package (``python -m wavepp`` is the usual way)."""

import sys

from wavepp.runtime.cli import main

sys.exit(main())
