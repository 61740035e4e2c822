"""Statistical disclosure control: the steward's disclosure policy, the methods that meet it, and its risk measures."""
