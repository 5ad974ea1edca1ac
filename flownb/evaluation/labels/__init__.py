"""People's judgement of an evaluation: labels (``labelling``), pairwise preferences
(``preferences``), a scorer's agreement with people (``agreement``), and the widgets that ask
for them (``review``, ``pairwise``)."""
