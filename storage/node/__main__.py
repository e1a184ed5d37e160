"""``python -m storage.node``: run one storage node (see main.py)."""

import sys

from storage.node.main import main

sys.exit(main())
