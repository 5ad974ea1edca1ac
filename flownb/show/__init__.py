"""How things look to a person: notebook display, progress bars, the money meter, warnings
pointed at the caller's line, and CSV a spreadsheet will not run."""
