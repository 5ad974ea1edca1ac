"""Running an evaluation: ``evaluate`` (``run``), the variants run together (``jobs``), the
judges' calls (``judging``), repeats (``repeats``), the long results frame (``assemble``), the
scorers file (``config``) and each variant's set-up for trackers (``params``)."""
