"""`python -m binlake`, and the file `spark-submit` runs (`binlake launcher` prints its path)."""

import os
import sys

# run as a file (spark-submit), Python puts this folder first on the path, where binlake's own modules
# (config, keys, schema, ...) would shadow top-level modules of those names
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

from binlake.cli import main

raise SystemExit(main())
