"""``python -m folio_analytics``: the analytics service (``folio analytics``)."""

import sys

from folio_analytics.main import main

sys.exit(main(sys.argv[1:]))
