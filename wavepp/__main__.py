"""``python -m wavepp``: the ``wavepp`` command."""

import sys

from wavepp.runtime.cli import main

sys.exit(main())
