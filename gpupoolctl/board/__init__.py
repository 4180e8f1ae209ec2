"""The pool at a glance: one frame of every node's GPUs and slices, the jobs, the queue,
recent events and utilization, built from the ledger and drawn by `top`, `top --once` and
`pool --html`.

    follower = Follower(ledger)                       # follows the ledger incrementally
    view = follower.poll()
    frame = build_frame(view.state, view.now, events=list(follower.events),
                        utilization=follower.utilization(view))
    frame_page(frame)                                 # one self-contained HTML page

This package reads the ledger only (never its write lock) and imports nothing of jobs/ or
sched/: why queued jobs wait is given to build_frame by the caller.
"""
