"""gpupoolctl: pool a mixed GPU fleet from an admin workstation over SSH.

This module is shipped to nodes inside the agent payload, so it must stay stdlib-only and
import nothing heavy.
"""

__version__ = "0.1.0"
