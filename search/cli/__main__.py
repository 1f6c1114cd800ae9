"""``python -m frontier.search.cli``: the ``frontier`` command."""

import sys

from . import main

sys.exit(main())
