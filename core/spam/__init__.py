"""Private spam-filter training and classification (Pathak, Sharifi & Raj), between simulated parties.

``features`` turns mail into sparse binary feature sets; ``paillier`` is the encryption with
explicit fixed-point scales; ``protocol`` holds the parties, the recording channel and the
protocol steps; ``training`` runs a whole training from a spec and writes its report;
``classify`` is the classification protocol, built on the DGK comparison in ``compare``.
"""
