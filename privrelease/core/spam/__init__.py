"""Private spam-filter training and classification (after Pathak, Sharifi & Raj), between parties
that each run in their own process.

``features`` turns mail into sparse binary feature sets; ``paillier`` is the encryption (CRT for
the key holder) with checked ranges; ``aggregation`` the pairwise masks and packing of secure
aggregation; ``protocol`` the parties, the wire format and the recording channel; ``parties``
runs them in processes and drives a round; ``training`` runs a whole training from a spec,
``run_report`` writes its report;
``classify`` is the classification protocol, built on the DGK comparison in ``compare``.
"""
