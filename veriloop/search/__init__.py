"""Search over candidate programs, generic over any verifier score: trees of Nodes,
Treefinement (REBASE), best-of-N, multi-turn best-of-N and beam search."""
