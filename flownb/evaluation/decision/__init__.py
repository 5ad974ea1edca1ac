"""The vendor decision: each variant's price at scale (``price``), quality against price on one
frontier (``frontier``), and the recommendation that states its rule (``choose``)."""
