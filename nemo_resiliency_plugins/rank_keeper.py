"""Deprecated path, kept for one release: jobs saved before 0.2 start each rank as
``python -m nemo_resiliency_plugins.rank_keeper``. The keeper moved to :mod:`nemo_resiliency_plugins.job.rank_keeper`.
"""

import sys
import warnings

from nemo_resiliency_plugins.job.rank_keeper import main

if __name__ == "__main__":
    warnings.warn(
        "python -m nemo_resiliency_plugins.rank_keeper is deprecated: use nemo_resiliency_plugins.job.rank_keeper",
        DeprecationWarning,
        stacklevel=1,
    )
    sys.exit(main())
