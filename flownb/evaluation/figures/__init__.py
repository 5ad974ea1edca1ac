"""The figures a report states per variant: intervals and paired tests (``stats``), money
spent, saved and priced (``money``), speed at the provider (``speed``)."""
