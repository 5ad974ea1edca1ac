"""What an evaluation report is made of (``shape``: the scorers' records and the protocol its
views and store read a report through) and how it is kept in the run log (``store``)."""
