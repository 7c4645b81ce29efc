"""The recovery benchmark (``benchmarks/recovery.py``), split by concern: settings, statistics, log reading,
jobs, cases 1-4, the host-side case 5, and the report."""
