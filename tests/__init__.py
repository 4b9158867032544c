"""The test suite; ``PATIENCE`` bounds every wait on a process, server or state."""
# How long a test waits for a process, a server or a state before calling it hung: a bound against hangs, never a
# speed requirement (the suite runs on busy machines; speed belongs in benchmarks/).
PATIENCE = 1800.0
