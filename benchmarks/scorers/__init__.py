"""How the scorers' default thresholds were calibrated."""
