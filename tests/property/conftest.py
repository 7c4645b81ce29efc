"""Property tests run the same examples on every run: derandomized (a seed fixed by the test's name) and without
Hypothesis's example database, so that a failure here is reproducible and never a fluke of one machine's history.
The example counts in each file are kept small (the suite's property tests stay near 20 s of test time on a quiet
machine); every branch of the shared ``anything`` strategy is also run as an explicit example
(strategies.each_class_of_anything), so that no branch depends on what few examples are drawn."""

from hypothesis import settings

settings.register_profile("nrp-property", derandomize=True, database=None)
settings.load_profile("nrp-property")
