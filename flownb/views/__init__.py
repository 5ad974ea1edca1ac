"""What a notebook shows of a flow's run: the live results view of rows and evaluations
(live.py, live_boards.py), a run's text growing while it streams (live_text.py), and the form
(widgets.py). The flows users hold open them (:mod:`flownb.flows.base`), evaluations open the
evaluation's board; the magics and ``%load_ext`` live in :mod:`flownb.notebook`."""
