"""The HTML of reports, in one place, written by one set of rules (``format``): the side by side
(``compare``), the summary table (``summary``), the page ``report.save`` writes and the report
in a notebook (``page``), the frontier and a choice (``decision``), a scorer's agreement with
people (``agreement``)."""
