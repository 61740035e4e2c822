"""The privacy-budget ledger: its hash-chained rows and anchors, who holds a charge, the steward's
approval rule, a dataset's account read from its entries, and the ledger audit."""
