"""Numbers that replace looking at max-delta and F1 plots (numpy/scipy/plotly only, no torch).

Skeleton: the scores, diagnosis and figures arrive with the scorers issue.
"""
