"""The command line: start-up time of the read-only verbs, and several workers on one machine."""
