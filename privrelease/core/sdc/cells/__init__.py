"""Tables of counts and totals protected by cell suppression, as τ-ARGUS and sdcTable protect them.

``rules`` (the steward's primary rules in the disclosure policy, and the protection levels they imply),
``table`` (a hierarchical table's cells, values, contributions and linear relations), ``secondary``
(secondary suppression: an exact MIP and a scaling LP heuristic, both with the protection intervals) and
``audit`` (the intruder's linear programs over the published cells: the guarantee); ``cellkey`` (the cell key
method's perturbation table and cell keys: not yet a method of the ``sdc_table`` mechanism).
"""
