"""Posteriors over the private parameters: the seam every release draw goes through.

``kinds`` describes each (no torch); ``base`` holds the parameter view, the prior, the
likelihood and the two protocols (``Posterior``, ``PosteriorFit``); ``registry`` maps a
name to its fit. The kinds: ``swag`` (the paper's SWAG), ``laplace`` (the GGN Gaussian of
the pseudo posterior), ``exact`` (HMC of the pseudo posterior with a convergence gate) and
``sgld`` (a preconditioned Langevin chain, summarised as a Gaussian).
"""
