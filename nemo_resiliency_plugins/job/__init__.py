"""Programs that run inside each training rank, not on the launching host.

Standard library only (a test imports each with every third-party package blocked): a plugin can ship one of
these files with the job, so the training image needs nothing of this package installed.
"""
