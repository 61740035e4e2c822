"""Privacy: budgets as values, privacy events and the admission filter, the tight PLD report, and the
interval math of what a noisy answer is worth. Pure: nothing here reads the ledger or a dataset."""
