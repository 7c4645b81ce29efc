"""Property tests run the same examples on every run: derandomized (a seed fixed by the test's name) and without
Hypothesis's example database, so that a failure here is reproducible and never a fluke of one machine's history.
The example counts in each file are kept small (the suite's property tests stay near 20 s on a quiet machine):
each edge class a generator could miss is pinned by an explicit ``@example`` or a plain test beside it."""

from hypothesis import settings

settings.register_profile("nrp-property", derandomize=True, database=None)
settings.load_profile("nrp-property")
