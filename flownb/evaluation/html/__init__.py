"""The HTML of reports, in one place: the side-by-side comparison, the summary table and the
self-contained page (``report``), the decision's parts (``decision``)."""
