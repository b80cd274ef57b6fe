"""``python -m kraft_spark``: the same as the ``kraft-spark`` command."""

import sys

from kraft_spark.cli import main

sys.exit(main())
