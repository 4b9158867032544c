"""The prepared GPU check: paper-scale throughput of a trial on one GPU."""
