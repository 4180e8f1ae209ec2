"""The node side of gpupoolctl.

Stdlib-only: this package, `gpupoolctl.hw` and `gpupoolctl.sim` are zipped into one payload,
sent over the single SSH exec with the JSON request on stdin, and run by the node's python3.
"""
